package ratelimit

import (
	"strconv"
)

// Inheritance says what the state a key built up under one policy becomes
// when its policy changes ([Keyed.SetPolicy], [MoveKey], and the Redis
// limiter's SetPolicy). Every mode works from the events the key has used
// when it is converted: the limit minus its remaining quota.
type Inheritance uint8

// The inheritance modes. The zero Inheritance is invalid: a change of
// policy must say what happens to existing state.
const (
	// KeepUsed keeps the events used, as they are, up to the new limit.
	KeepUsed Inheritance = iota + 1
	// ScaleUsed scales the events used by the new limit over the old one,
	// rounded up: half the old quota used is half the new quota used.
	ScaleUsed
	// StartFresh forgets the state: the key starts with the new policy's
	// full quota.
	StartFresh
)

// String returns "keep", "scale" or "fresh".
func (m Inheritance) String() string {
	switch m {
	case KeepUsed:
		return "keep"
	case ScaleUsed:
		return "scale"
	case StartFresh:
		return "fresh"
	}
	return "Inheritance(" + strconv.Itoa(int(m)) + ")"
}

// inherit converts used, the events a key used under a policy of limit
// from, into the terms of the next policy, of limit to, by mode.
func inherit(used int64, mode Inheritance, from, to int64) int64 {
	switch mode {
	case KeepUsed:
		return min(used, to)
	case ScaleUsed:
		return min(mulDivCeil(used, to, from), to)
	}
	return 0
}
