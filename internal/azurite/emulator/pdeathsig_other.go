//go:build unix && !linux

package emulator

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {}
