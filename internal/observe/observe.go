// Package observe lets the homes of the limiters (package ratelimit's
// Keyed and Tiered, module redislimit's Limiter) tell the adapters that
// serve limits (httplimit's middleware and grpclimit's interceptors,
// through internal/limitset) what the KeyedLimiter interface does not say:
// where a limiter keeps its state, whether it reports to an observer or a
// logger of its own, and which of its errors come with a failure policy's
// Decision. An adapter reports every decision it serves itself, under its
// limits' names; it uses this to label those Events as the limiter would,
// and to refuse a limiter that would report them a second time. The homes
// know nothing of the adapters, and no context carries a mark between
// them.
package observe

// Info describes one limiter.
type Info struct {
	// Home is where the limiter keeps its state, a ratelimit.Home value
	// (this package cannot import ratelimit, which registers here); 0,
	// ratelimit.HomeNone, for a limiter no home describes.
	Home uint8
	// Observed: the limiter (or one of its tiers) reports its decisions to
	// an Observer of its own.
	Observed bool
	// Logs: the limiter (or one of its tiers) logs its errors itself.
	Logs bool
	// Fallback reports whether an error the limiter returned came with its
	// failure policy's Decision (its store failed); nil: none ever does.
	Fallback func(err error) bool
}

// describers are the functions the homes registered, in order.
var describers []func(limiter any) (Info, bool)

// Register adds describe, which reports the Info of the limiters of one
// home and false for any other. It must be called from an init function:
// Describe reads the list without a lock.
func Register(describe func(limiter any) (Info, bool)) {
	describers = append(describers, describe)
}

// Describe returns the Info of limiter from the first home that knows it,
// or the zero Info.
func Describe(limiter any) Info {
	for _, d := range describers {
		if info, ok := d(limiter); ok {
			return info
		}
	}
	return Info{}
}
