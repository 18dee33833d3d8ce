//go:build race

package ratelimit

// raceEnabled reports whether the race detector is on.
const raceEnabled = true
