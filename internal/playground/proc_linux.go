package playground

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes an agent die with the playground even when the
// playground itself is killed with SIGKILL, so no orphan keeps a port.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
