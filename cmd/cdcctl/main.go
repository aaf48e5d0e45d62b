// Command cdcctl is the operator's tool for cdcctl clusters.
package main

import "github.com/cdcctl/cdcctl/internal/cli"

func main() { cli.Main() }
