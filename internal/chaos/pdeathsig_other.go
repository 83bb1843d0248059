//go:build unix && !linux

package chaos

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {}
