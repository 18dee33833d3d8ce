package redislimit

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// report logs err, the error of a call Redis could not decide, at most
// once per reportEvery, or counts it. quiet says the breaker answered the
// call: counted, never reported on its own.
func (l *Limiter) report(ctx context.Context, err error, quiet bool) {
	logger := l.logger.Get()
	if logger == nil {
		return
	}
	if quiet {
		l.reports.Skip()
		return
	}
	suppressed, ok := l.reports.Admit(l.ts.Now(), l.reportEvery)
	if !ok {
		return
	}
	logger.LogAttrs(ctx, slog.LevelError, ErrUnavailable.Error(),
		slog.String("limit", l.name),
		slog.String("algorithm", l.cur.Load().policy.Algorithm.String()),
		slog.Any("error", err),
		slog.Int64("suppressed", suppressed))
}

// cause turns the error of a call that tried Redis into the truthful
// cause: a timeout of the limiter's own (not the caller's) becomes a
// timeoutError, or a connectError when a dial failed meanwhile.
func (l *Limiter) cause(err error) error {
	var ce *connectError
	if errors.As(err, &ce) {
		return err
	}
	var te *timeoutError
	if !errors.As(err, &te) {
		// go-redis, which never retries a script (noretry.go), reports a
		// read cut short by the deadline as the network's i/o timeout.
		var ne net.Error
		if !errors.Is(err, context.DeadlineExceeded) && (!errors.As(err, &ne) || !ne.Timeout()) {
			return err
		}
		te = &timeoutError{l.timeout}
	}
	if l.dials != nil {
		if f := l.dials.last.Load(); f != nil && time.Since(f.at) <= 2*l.timeout+time.Second {
			return &connectError{d: te.d, dial: f.err}
		}
	}
	return te
}

// dialRecorder remembers the last failed dial of a client's connection
// pools, as a go-redis hook, so that errors can name the real cause.
type dialRecorder struct {
	last atomic.Pointer[dialFailure] // nil after a successful dial
}

type dialFailure struct {
	err error
	at  time.Time
}

func (r *dialRecorder) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			r.last.Store(&dialFailure{err: err, at: time.Now()})
		} else {
			r.last.Store(nil)
		}
		return conn, err
	}
}

func (r *dialRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (r *dialRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// recorders holds one dialRecorder per client, so that many limiters on
// one client add one hook; entries go when their client is collected.
var recorders sync.Map // weak.Pointer[T] -> *dialRecorder

// recorderFor returns the dial recorder of client, installing it on first
// use; nil for client types it cannot hook.
func recorderFor(client redis.UniversalClient) *dialRecorder {
	switch c := client.(type) {
	case *redis.Client:
		return register(c, func(r *dialRecorder) { c.AddHook(r) })
	case *redis.ClusterClient:
		return register(c, func(r *dialRecorder) { c.OnNewNode(func(n *redis.Client) { n.AddHook(r) }) })
	case *redis.Ring:
		return register(c, func(r *dialRecorder) { c.OnNewNode(func(n *redis.Client) { n.AddHook(r) }) })
	}
	return nil
}

var registerMu sync.Mutex

func register[T any](p *T, install func(*dialRecorder)) *dialRecorder {
	k := weak.Make(p)
	registerMu.Lock()
	defer registerMu.Unlock()
	if v, ok := recorders.Load(k); ok {
		return v.(*dialRecorder)
	}
	r := &dialRecorder{}
	recorders.Store(k, r)
	install(r)
	runtime.AddCleanup(p, func(k weak.Pointer[T]) { recorders.Delete(k) }, k)
	return r
}
