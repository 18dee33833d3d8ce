//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: outside Linux there is no portable way to have the child die
// with the test binary, so only the test cleanups stop redis-server.
func sysProcAttr() *syscall.SysProcAttr { return nil }
