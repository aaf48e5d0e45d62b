//go:build !linux

package playground

import "os/exec"

// setParentDeathSignal has no portable equivalent outside Linux; there the
// playground's Ctrl-C handler is what stops the agents.
func setParentDeathSignal(*exec.Cmd) {}
