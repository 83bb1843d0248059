//go:build unix

package chaos

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the child in its own process group, so that killGroup
// reaches it and anything it starts; on Linux the kernel also kills it when
// the test binary dies.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(cmd.SysProcAttr)
}

// killGroup SIGKILLs the child's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
