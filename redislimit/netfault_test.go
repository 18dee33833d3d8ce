package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/faultproxy"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
	"github.com/rlkit/ratelimit/internal/testkit/reliability"
	"go.uber.org/goleak"
)

// The network-fault scenarios: a Limiter on a go-redis client whose Addr
// is a fault proxy in front of a local redis-server, several goroutines
// deciding on one key that cannot refill during the run, and a fault
// switched on for a while. Each asserts its bounds and records its
// figures (reliability.Record, Group "network").
//
// netTimeout is the limiter's WithTimeout: a budget a service would give a
// rate-limit check on its request path, far above a loopback round trip
// (tens of µs, a few ms under -race) and below the 100 ms latency fault,
// which must therefore always end in the failure policy.
const netTimeout = 50 * time.Millisecond

// netSlack bounds how far past netTimeout a call may return: the timer
// that bounds it fires late when the machine is loaded (a process stalled
// for 233 ms was measured while the whole suite ran with both CPUs busy),
// and the failure policy has its own work. Loose on purpose: a hang would
// take seconds (go-redis's read timeout is 3 s).
const netSlack = time.Second

// netRecoveryBound bounds how long a run waits, after its afterFor, for a
// call to find Redis again once the fault is cleared. Generous on
// purpose (a healthy Redis on loopback answers in milliseconds): it only
// keeps a broken recovery from hanging the test, and a machine loaded
// enough to starve the callers for this long fails the timeout checks
// anyway.
const netRecoveryBound = 30 * time.Second

const (
	netLimit   = 500 // the key's limit: TokenBucket of 500 per day, burst 500
	netWorkers = 8
)

var netPolicy = ratelimit.TokenBucketPolicy(ratelimit.Per(netLimit, 24*time.Hour), netLimit)

// netScenario is one network fault.
type netScenario struct {
	id, title, fault string
	apply            func(*faultproxy.Proxy)
	local            bool // WithLocalFallback(4) instead of FailClosed
	allFail          bool // the fault fails every call that reaches the network
	dropped          bool // replies are lost after execution: count executions
}

// netOutcome is one call's outcome.
type netOutcome struct {
	start, end int64 // wall-clock ns
	admitted   bool
	failed     bool // error wrapping ErrUnavailable: the failure policy decided
	other      error
	err        error
}

// evalCounter is a go-redis hook that counts the EVALSHAs the client
// hands to go-redis (a command or inside a pipeline). Hooks see a
// command once however often go-redis would send it, so Redis's count of
// EVALSHA runs equal to this count proves that nothing was sent twice.
type evalCounter struct{ n atomic.Int64 }

func (h *evalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *evalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *evalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// runNetScenario runs sc: the load starts with the fault on, the fault
// lasts faultFor, then the load goes on for afterFor without it.
func runNetScenario(t *testing.T, sc netScenario) {
	srv := redistest.Start(t)
	leaks := goleak.IgnoreCurrent()
	faultFor := reliability.Pick(time.Second, 15*time.Second)
	afterFor := reliability.Pick(time.Second, 3*time.Second)

	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
	counter := &evalCounter{}
	c.AddHook(counter)
	prefix := uniquePrefix(t)
	opts := []Option{WithPrefix(prefix), WithTimeout(netTimeout), WithBreaker(0), WithDenyCache(0), WithLogger(nil)}
	if sc.local {
		opts = append(opts, WithLocalFallback(4))
	} else {
		opts = append(opts, WithFailurePolicy(FailClosed))
	}
	l, err := New(c, netPolicy, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const key = "netkey"
	// Loads the script, opens a connection (retried: a loaded machine may
	// miss the 50 ms timeout once or twice).
	for i := 0; ; i++ {
		_, err := l.Peek(ctx, key, 0)
		if err == nil {
			break
		}
		if i == 20 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	px.MatchRequests("evalsha") // counts the EVALSHAs that reach Redis (Stats.Matched)
	execBefore := cmdCalls(t, srv.Addr(), "evalsha")
	sentBefore := counter.n.Load()

	var mu sync.Mutex
	var outs []netOutcome
	// cleared is when the fault was switched off (Unix ns, 0 before), and
	// recovered is set by the first call that starts a timeout after that
	// and is decided by Redis.
	var cleared atomic.Int64
	var recovered atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range netWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []netOutcome
			for {
				select {
				case <-stop:
					mu.Lock()
					outs = append(outs, mine...)
					mu.Unlock()
					return
				default:
				}
				// The caller's own deadline is well beyond the limiter's
				// timeout: what ends a call is the limiter, not the caller.
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				start := time.Now()
				d, err := l.AllowN(cctx, key, 1)
				end := time.Now()
				cancel()
				o := netOutcome{start: start.UnixNano(), end: end.UnixNano(), admitted: d.Allowed, err: err}
				switch {
				case errors.Is(err, ErrUnavailable):
					o.failed = true
				case err != nil:
					o.other = err
				}
				if c := cleared.Load(); c > 0 && !o.failed && o.other == nil && o.start > c+int64(netTimeout) {
					recovered.Store(true)
				}
				mine = append(mine, o)
			}
		}()
	}
	faultStart := time.Now()
	sc.apply(px)
	time.Sleep(faultFor)
	px.Clear()
	px.MatchRequests("evalsha") // Clear cleared it
	faultEnd := time.Now()
	cleared.Store(faultEnd.UnixNano())
	// The run goes on afterFor, and then until a call has found Redis
	// again, for at most netRecoveryBound: on a machine loaded enough,
	// calls that begin just after the fault (re-dialling through the
	// proxy, scheduled late) can take all of afterFor, and a run that ended
	// then would see no call after the fault, although nothing is wrong.
	time.Sleep(afterFor)
	for bound := time.Now().Add(netRecoveryBound); !recovered.Load() && time.Now().Before(bound); {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	runEnd := time.Now()

	executed := int64(cmdCalls(t, srv.Addr(), "evalsha") - execBefore)
	sent := counter.n.Load() - sentBefore
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	dl, err := New(direct, netPolicy, WithPrefix(prefix), WithDenyCache(0), WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	final, err := dl.Peek(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = direct.Close()
	stats := px.Stats()
	_ = c.Close()
	_ = px.Close()

	// The figures.
	var calls, admitted, byRedis, failed, fallbackAdmitted int64
	var lat []time.Duration
	var lastFail int64
	var lateErr error
	for _, o := range outs {
		if o.failed && o.start > faultEnd.UnixNano() && lateErr == nil {
			lateErr = fmt.Errorf("%w (at +%v, took %v)", o.err, time.Duration(o.start-faultEnd.UnixNano()), time.Duration(o.end-o.start))
		}
		if o.other != nil {
			t.Errorf("a call returned %v, want nil or an error wrapping ErrUnavailable", o.other)
			continue
		}
		calls++
		if o.admitted {
			admitted++
		}
		if o.failed {
			failed++
			lastFail = max(lastFail, o.end)
			if o.admitted {
				fallbackAdmitted++
			}
		} else if o.admitted {
			byRedis++
		}
		if o.start >= faultStart.UnixNano() && o.start < faultEnd.UnixNano() {
			lat = append(lat, time.Duration(o.end-o.start))
		}
	}
	p50, p99, maxd := reliability.Percentiles(lat)
	// The bucket refills 500 a day: over the run, at most this many more.
	refill := int64(runEnd.Sub(faultStart) * netLimit / (24 * time.Hour))
	limit := int64(netLimit) + refill
	over := max(admitted-limit, 0)
	charged := int64(netLimit - final.Remaining)
	var recovery time.Duration
	if lastFail > 0 {
		recovery = time.Duration(lastFail - faultStart.UnixNano())
	}

	how := fmt.Sprintf("redis-server 7 on loopback behind internal/testkit/faultproxy; go-redis v9 client with default options but ContextTimeoutEnabled and Addr = the proxy; "+
		"Limiter with WithTimeout(%v), %s, WithBreaker(0) and WithDenyCache(0) (every call goes to Redis); %d goroutines calling AllowN(key, 1) in a loop on one key, "+
		"token bucket of %d per day (burst %d: it cannot refill during the run); fault: %s, switched on as the load starts, for %v, then %v without it (longer if no call has found Redis again by then).",
		netTimeout, map[bool]string{false: "FailClosed", true: "WithLocalFallback(4)"}[sc.local], netWorkers, netLimit, netLimit, sc.fault, faultFor, afterFor)
	res := reliability.Result{
		Group: "network", Scenario: sc.id, Title: sc.title, How: how,
		Limit: limit, Calls: calls, Admitted: admitted, Over: over, Failed: failed, Fallback: failed,
		Recovery: recovery, P50: p50, P99: p99, Max: maxd,
		Notes: []string{
			fmt.Sprintf("events charged on Redis at the end: %d (admitted by Redis and returned: %d)", charged, byRedis),
			fmt.Sprintf("proxy: %d connections accepted, %d replies dropped after execution, %d replies cut mid-way", stats.Accepted, stats.Dropped, stats.Cut),
		},
	}
	if sc.dropped {
		res.Executed = executed
	}
	res.Notes = append(res.Notes, fmt.Sprintf("EVALSHAs handed to go-redis: %d; that reached Redis (counted by the proxy): %d; run by Redis (INFO commandstats): %d", sent, stats.Matched, executed))
	if sc.local {
		res.Notes = append(res.Notes, fmt.Sprintf("admitted by the local fallback (a quarter of the limit per instance): %d; over-admission beyond the limit is the fallback's, by design", fallbackAdmitted))
	}
	// The bounds.
	if byRedis > netLimit || charged > limit {
		t.Errorf("Redis admitted %d and charged %d, limit %d: over-admission", byRedis, charged, limit)
	}
	if !sc.local && over != 0 {
		t.Errorf("admitted %d > limit %d under FailClosed", admitted, limit)
	}
	if sc.local && admitted-byRedis > netLimit/4 {
		t.Errorf("local fallback admitted %d, more than its share %d", admitted-byRedis, netLimit/4)
	}
	if byRedis > charged {
		t.Errorf("%d admissions returned by Redis but %d charged", byRedis, charged)
	}
	if maxd > netTimeout+netSlack {
		t.Errorf("a call took %v during the fault, want at most the timeout %v + %v", maxd, netTimeout, netSlack)
	}
	if len(lat) == 0 {
		t.Error("no call during the fault")
	}
	if sc.allFail {
		// Every call during the fault failed to the policy (those that
		// started in its last timeout may have seen it cleared). A timer
		// that fires late on a loaded machine may let a reply through
		// that came after the timeout: at most 1% of the calls.
		var during, byRedisDuring int
		for _, o := range outs {
			if o.start >= faultStart.UnixNano() && o.end < faultEnd.UnixNano()-int64(netTimeout) {
				during++
				if !o.failed {
					byRedisDuring++
				}
			}
		}
		if byRedisDuring*100 > during {
			t.Errorf("%d of %d calls during the fault were decided by Redis, want none (1%% tolerated)", byRedisDuring, during)
		}
	}
	// Recovery: once the fault has ended, calls find Redis again. Only
	// that it happens is asserted: on a machine loaded enough, a 50 ms timeout fails
	// ordinary calls too, so the failures after the fault are recorded,
	// not bounded.
	var after, failedAfter int
	for _, o := range outs {
		if o.start > faultEnd.Add(netTimeout).UnixNano() {
			after++
			if o.failed {
				failedAfter++
			}
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf("after the fault: %d of %d calls failed", failedAfter, after))
	if failedAfter == after {
		t.Errorf("no call found Redis after the fault (%d calls); first error: %v", after, lateErr)
	}
	// No script ran twice: Redis ran at most the EVALSHAs that reached it
	// (a request cut by a reset may reach it in part), and no more reached
	// it than the limiter sent (the hook sees each send once: a retry by
	// go-redis would reach Redis without being counted as sent).
	if executed > stats.Matched || stats.Matched > sent {
		t.Errorf("Redis ran %d EVALSHAs, %d reached it, the client sent %d: want ran <= reached <= sent", executed, stats.Matched, sent)
	}
	if sc.dropped && stats.Dropped == 0 {
		t.Error("no reply was dropped")
	}
	reliability.Record(t, res)
	goleak.VerifyNone(t, leaks)
}

func TestProofNetworkLatency1ms(t *testing.T) {
	runNetScenario(t, netScenario{id: "proxy-latency-1ms", title: "1 ms added to every reply",
		fault: "1 ms latency added to every reply chunk", apply: func(p *faultproxy.Proxy) {
			p.Set(faultproxy.Down, faultproxy.Faults{Latency: time.Millisecond})
		}})
}

func TestProofNetworkLatency10ms(t *testing.T) {
	runNetScenario(t, netScenario{id: "proxy-latency-10ms", title: "10 ms added to every reply",
		fault: "10 ms latency added to every reply chunk", apply: func(p *faultproxy.Proxy) {
			p.Set(faultproxy.Down, faultproxy.Faults{Latency: 10 * time.Millisecond})
		}})
}

func TestProofNetworkLatency100ms(t *testing.T) {
	runNetScenario(t, netScenario{id: "proxy-latency-100ms", title: "100 ms added to every reply (> timeout)",
		fault: "100 ms latency added to every reply chunk, twice the limiter's timeout", allFail: true, apply: func(p *faultproxy.Proxy) {
			p.Set(faultproxy.Down, faultproxy.Faults{Latency: 100 * time.Millisecond})
		}})
}

func TestProofNetworkBandwidth(t *testing.T) {
	runNetScenario(t, netScenario{id: "proxy-bandwidth-2k", title: "replies limited to 2 KiB/s per connection",
		fault: "replies limited to 2 KiB/s per connection (paced in 204-byte pieces)", apply: func(p *faultproxy.Proxy) {
			p.Set(faultproxy.Down, faultproxy.Faults{BytesPerSecond: 2048})
		}})
}

func TestProofNetworkResetMidReply(t *testing.T) {
	runNetScenario(t, netScenario{id: "proxy-reset-mid-reply", title: "every 5th reply cut after 3 bytes (RST)",
		fault: "every 5th reply chunk cut after its first 3 bytes, then the connection reset (RST)", apply: func(p *faultproxy.Proxy) {
			p.CutReplies(5, 3, faultproxy.RST)
		}})
}

func TestProofNetworkReplyDropped(t *testing.T) {
	runNetScenario(t, netScenario{id: "proxy-reply-dropped", title: "every 5th EVALSHA's reply lost after execution",
		fault: "every 5th request holding an EVALSHA forwarded, then the connection closed (FIN: go-redis would retry an EOF) instead of forwarding its reply", dropped: true,
		apply: func(p *faultproxy.Proxy) {
			p.MatchRequests("evalsha")
			p.DropReplies(5, faultproxy.FIN)
		}})
}

func TestProofNetworkBlackHole(t *testing.T) {
	runNetScenario(t, netScenario{id: "proxy-black-hole", title: "black hole (requests swallowed)",
		fault: "black hole: every request read and discarded, connections (new ones too) left open", allFail: true, apply: func(p *faultproxy.Proxy) {
			p.Set(faultproxy.Up, faultproxy.Faults{BlackHole: true})
		}})
}

func TestProofNetworkBlackHoleLocalFallback(t *testing.T) {
	runNetScenario(t, netScenario{id: "proxy-black-hole-local", title: "black hole, local fallback (4 instances)",
		fault: "black hole: every request read and discarded, connections (new ones too) left open", allFail: true, local: true, apply: func(p *faultproxy.Proxy) {
			p.Set(faultproxy.Up, faultproxy.Faults{BlackHole: true})
		}})
}
