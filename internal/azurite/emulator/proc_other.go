//go:build !unix

package emulator

import "os/exec"

func setProcAttr(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

// termGroup has no gentle signal to send here: it kills.
func termGroup(cmd *exec.Cmd) { killGroup(cmd) }
