package redistest

import "syscall"

// sysProcAttr asks the kernel to SIGKILL redis-server if the test binary dies without running
// its cleanups (a -timeout panic, a crash, SIGKILL), so no server outlives the tests.
//
// Pdeathsig fires when the OS thread that started the child exits, not the process. The Go
// runtime ends a thread only when a goroutine exits while locked to it with LockOSThread,
// which neither the testing package nor this package does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
