// Package settle lets the homes of the rate limiters (package ratelimit's
// Keyed, module redislimit's Limiter) hand out ratelimit.Reservation
// values: this package cannot import ratelimit, which registers its
// constructor here.
package settle

import "context"

// Holder is what stands behind one reservation in one home: the record of
// the estimate it holds for one key, in memory or on Redis.
type Holder interface {
	// Settle settles the reservation at actual events (actual >= 0): the
	// difference from the estimate is given back or charged. Once only:
	// a second call, or one after the reservation expired, changes
	// nothing and reports Done. It must not depend on ctx being live: a
	// caller that went away still settles (ctx passes its values on).
	Settle(ctx context.Context, actual int64) error
}

// Make builds a *ratelimit.Reservation (returned as any) holding n events
// through h, with the Decision d (a ratelimit.Decision, passed as any)
// that admitted them. Package ratelimit sets it in an init function.
var Make func(h Holder, n int, d any) any

// Done is set by package ratelimit to its ErrReservationSettled, which a
// Holder returns when it has nothing left to settle.
var Done error
