//go:build unix && !linux

package azurite

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {}
