//go:build !linux

package bench

import "os/exec"

func setProcAttr(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

// maxRSSMiB is not measured on this platform (0).
func maxRSSMiB() float64 { return 0 }

// rssNow is not measured on this platform (0, 0).
func rssNow() (total, anon float64) { return 0, 0 }
