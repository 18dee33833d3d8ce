// Package permit lets the homes of the concurrency limiters (package
// ratelimit's Concurrency, module redislimit's Concurrency) hand out
// ratelimit.Permit values: this package cannot import ratelimit, which
// registers its constructor here.
package permit

// Holder is what stands behind one Permit: the record of the permits it
// holds, in memory or on Redis. gen tells the Permit it was handed out
// under apart from a later one the holder may be reused for.
type Holder interface {
	// Release gives back the permits of the Permit handed out under gen;
	// once only: a second call, or one after the holder moved on to
	// another Permit, does nothing.
	Release(gen uint64)
	// Lost returns a channel closed once the Permit handed out under gen
	// is no longer held: released, reset, or (on Redis) not renewed in
	// time.
	Lost(gen uint64) <-chan struct{}
}

// Make builds a ratelimit.Permit (returned as any) for h under gen. Package
// ratelimit sets it in an init function.
var Make func(h Holder, gen uint64) any

// closed is a channel that is always closed.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Closed returns a closed channel: the Lost of a Permit no longer held.
func Closed() <-chan struct{} { return closed }
