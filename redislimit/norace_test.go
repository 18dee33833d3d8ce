//go:build !race

package redislimit

// raceFactor is 1 under the race detector, which slows goroutines down.
const raceFactor = 0
