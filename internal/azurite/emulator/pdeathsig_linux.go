package emulator

import "syscall"

// setPdeathsig makes the kernel kill Azurite if the test binary dies without
// running Main's cleanup (for example when go test's timeout kills it).
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
