package redislimit

import "syscall"

// loadProcAttr asks the kernel to SIGKILL a runLoad child if the test
// binary dies without running its cleanups (a -timeout panic, a crash,
// SIGKILL). As in internal/testkit/redistest: Pdeathsig fires when the starting
// OS thread exits, which the Go runtime does only for goroutines locked
// to their thread, and nothing here locks one.
func loadProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
