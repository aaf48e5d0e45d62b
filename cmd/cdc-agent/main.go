// Command cdc-agent is one node of a cdcctl replication cluster.
package main

import "github.com/cdcctl/cdcctl/internal/agent"

func main() { agent.Main() }
