package exec

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

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
