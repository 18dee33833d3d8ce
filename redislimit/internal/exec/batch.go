package exec

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching. One decision is one script run, but concurrent decisions share
// round trips: a call is queued, and a flusher goroutine sends everything
// queued as one pipeline of EVALSHAs (each script is still atomic on its
// own; the pipeline only saves round trips and system calls). Every path
// sends through send (retry.go): go-redis never retries a script. While a
// pipeline is in flight, new calls queue up and go together in the next
// one, so a lone caller pays one round trip and 64 concurrent callers share
// a few.
//
// When the client honours context deadlines (ContextTimeoutEnabled), a
// caller that finds nothing in flight runs its call on its own goroutine,
// bounded by its context and the timeout; otherwise a goroutine switch away
// from the caller is what bounds the caller's wait.
//
// Flushers exist only while there is work: the first call that finds fewer
// than maxFlushers running starts one, and a flusher exits when the queue
// is empty. There is no background goroutine to stop, so a Limiter needs no
// Close.
//
// Callers never wait longer than their own deadline: they wait on their
// call's channel, the context and a timer, and abandon the call when either
// fires first. An abandoned call that has not been sent yet is dropped; one
// already in flight runs to completion (its effect, if any, stays).

// call is one script run waiting for a flusher.
type call struct {
	script *Script
	keys   []string
	args   []any
	cmd    *redis.Cmd    // set by the flusher before done is signalled
	done   chan struct{} // buffered(1): the flusher never blocks on it
	state  atomic.Uint32 // callQueued, callSent or callAbandoned
	eval   bool          // the server said NOSCRIPT: send EVAL
	ack    bool          // WithReplicaAck: the round trip must end with WAIT
	acks   int           // with ack: the replicas WAIT counted, -1 when it failed
	sc     scriptCmd     // cmd as go-redis gets it (see send)
	argv   []any         // cmd's arguments, reused from call to call
}

const (
	callQueued uint32 = iota
	callSent
	callAbandoned
)

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall() *call {
	c := callPool.Get().(*call)
	c.state.Store(callQueued)
	c.eval, c.ack, c.acks = false, false, 0
	return c
}

// putCall recycles c; only calls whose done was received may be recycled.
func putCall(c *call) {
	c.script, c.keys, c.args, c.cmd, c.sc.Cmd = nil, nil, nil, nil, nil
	clear(c.argv) // holds the keys and arguments: let them go
	c.argv = c.argv[:0]
	callPool.Put(c)
}

// batcher queues calls and runs them in pipelines.
type batcher struct {
	client      redis.UniversalClient
	timeout     time.Duration // for each round trip
	inline      bool          // client honours ctx deadlines: a lone caller may run its own call
	maxFlushers int
	maxBatch    int
	maxQueue    int

	// WithReplicaAck; ackWant 0: off.
	ackWant                int
	ackReplicas, ackMillis any                  // WAIT's arguments, boxed once
	cluster                *redis.ClusterClient // with ackWant on a Cluster: WAIT per master

	mu      sync.Mutex
	queue   []*call // guarded by mu
	running int     // guarded by mu: flushers running
}

// Defaults of the batcher. Two flushers let one pipeline be written while
// the previous one is executed by Redis; one Redis node runs scripts one at
// a time, so more would only split batches.
const (
	defaultFlushers = 2
	defaultMaxBatch = 512
	defaultMaxQueue = 1 << 16
)

var timerPool sync.Pool

func getTimer(d time.Duration) *time.Timer {
	if t, ok := timerPool.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	t.Stop() // since Go 1.23 a stopped timer's channel holds no stale value
	timerPool.Put(t)
}

// do runs c and waits for its reply, at most timeout and never after ctx is
// done. On success c.cmd holds the reply (which may itself be an error
// reply) and c may be recycled by the caller.
//
// A reply proving that the script did not run (see unexecuted) is retried
// here, on the caller's goroutine, after a short backoff, at most
// MaxAttempts times in all and within timeout.
func (b *batcher) do(ctx context.Context, c *call, timeout time.Duration) error {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		left := timeout - time.Since(start)
		if attempt > 1 && left <= 0 {
			return nil // c keeps its last error
		}
		if err := b.once(ctx, c, left, timeout); err != nil {
			return err
		}
		if attempt == MaxAttempts || !unexecuted(c.cmd.Err()) ||
			!pause(ctx, retryBackoff(timeout, attempt+1), start.Add(timeout)) {
			return nil
		}
		c.state.Store(callQueued)
	}
}

// once sends c once (NOSCRIPT's EVAL aside) and waits for its reply at most
// wait, what is left of the call's timeout (which a timeout error names).
func (b *batcher) once(ctx context.Context, c *call, wait, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	if b.inline && b.running == 0 {
		// Nothing in flight: run the call on this goroutine, saving two
		// goroutine switches. Callers arriving meanwhile queue up and
		// start a flusher (the second slot), or are flushed after this.
		b.running++
		b.mu.Unlock()
		c.state.Store(callSent)
		rctx, cancel := context.WithTimeout(ctx, wait)
		one := [1]*call{c}
		b.send(rctx, one[:])
		cancel()
		if c.cmd.Err() != nil && ctx.Err() == nil {
			// go-redis ends a read at ctx's deadline with the network's
			// own timeout, which may come a moment before ctx says it is
			// done: when the caller's deadline has passed, it is what
			// ended the call, and the caller is told so.
			if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
				<-ctx.Done()
			}
		}
		b.mu.Lock()
		more := len(b.queue) > 0
		if !more {
			b.running--
		}
		b.mu.Unlock()
		if more {
			go b.flush() // inherits this slot
		}
		return nil
	}
	if len(b.queue) >= b.maxQueue {
		b.mu.Unlock()
		return errOverloaded
	}
	b.queue = append(b.queue, c)
	start := b.running < b.maxFlushers
	if start {
		b.running++
	}
	b.mu.Unlock()
	if start {
		go b.flush()
	}

	t := getTimer(wait)
	select {
	case <-c.done:
		putTimer(t)
		return nil
	case <-ctx.Done():
		putTimer(t)
		c.state.CompareAndSwap(callQueued, callAbandoned)
		return ctx.Err()
	case <-t.C:
		timerPool.Put(t) // fired and drained: reusable as is
		c.state.CompareAndSwap(callQueued, callAbandoned)
		return &timeoutError{timeout}
	}
}

// flush sends queued calls until the queue is empty.
func (b *batcher) flush() {
	var batch []*call
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		if len(b.queue) <= b.maxBatch {
			// Swap buffers: take the queue, leave ours (empty) behind.
			batch, b.queue = b.queue, batch[:0]
		} else {
			batch = append(batch[:0], b.queue[:b.maxBatch]...)
			n := copy(b.queue, b.queue[b.maxBatch:])
			clear(b.queue[n:])
			b.queue = b.queue[:n]
		}
		b.mu.Unlock()
		b.exec(batch)
		clear(batch)
	}
}

// exec runs one batch through send: one script call on its own, several in
// a pipeline.
func (b *batcher) exec(batch []*call) {
	live := batch[:0]
	for _, c := range batch {
		if c.state.CompareAndSwap(callQueued, callSent) {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	b.send(ctx, live)
	cancel()
	for _, c := range live {
		c.done <- struct{}{}
	}
}

// honoursDeadlines reports whether client applies context deadlines to
// its network I/O (go-redis's ContextTimeoutEnabled), so that a call run on
// the caller's goroutine cannot outlast the caller's deadline.
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// isNoScript reports whether err says the script is not in the server's
// cache, so that running it with EVAL is safe (it did not run).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
