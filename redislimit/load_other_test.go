//go:build !linux

package redislimit

import "syscall"

// loadProcAttr returns nil: outside Linux a runLoad child stops when its
// stdin closes (the parent went away) or at the parent's deadline.
func loadProcAttr() *syscall.SysProcAttr { return nil }
