//go:build !unix

package benchmarks

import "time"

// cpuTime returns -1: process CPU time is read only on Unix.
func cpuTime() time.Duration { return -1 }
