// Command cdc-agent is one node of a cdcctl replication cluster.
package main

import (
	"github.com/cdcctl/cdcctl/internal/agent"
	_ "github.com/cdcctl/cdcctl/internal/engine/bucket/cloud" // s3://, gs://, azblob:// sinks and checkpoint stores
)

func main() { agent.Main() }
