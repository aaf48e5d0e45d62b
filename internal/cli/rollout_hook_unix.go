//go:build unix

package cli

import (
	osexec "os/exec"
	"syscall"
)

// ownGroup runs a hook in a process group of its own, so that a hook
// stopped at its timeout takes what it started with it.
func ownGroup(cmd *osexec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
