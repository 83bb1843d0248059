//go:build linux

package bench

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts Azurite in its own process group (so killGroup reaches
// node's children) and has the kernel kill it if the bench dies.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// maxRSSMiB returns the process's peak resident set size in MiB (getrusage
// ru_maxrss, which Linux reports in KiB).
func maxRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024
}
