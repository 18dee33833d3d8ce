package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// newConc returns an in-memory concurrency limiter of limit permits per key.
func newConc(t testing.TB, limit int, opts ...ratelimit.Option) *ratelimit.Concurrency {
	t.Helper()
	c, err := ratelimit.NewConcurrency(limit, opts...)
	require.NoError(t, err)
	return c
}

// gated is a loopback server whose handler holds every request until the
// test opens the gate: entered receives one value per request that
// reached the handler, served one per request whose middleware returned
// (its permits released).
type gated struct {
	srv     *httptest.Server
	gate    chan struct{}
	entered chan struct{}
	served  chan struct{}
}

// newGated serves mw around a handler that waits for the gate, or for the
// request's context to end (a client gone).
func newGated(t *testing.T, mw *Middleware) *gated {
	t.Helper()
	g := &gated{gate: make(chan struct{}), entered: make(chan struct{}, 64), served: make(chan struct{}, 64)}
	inner := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.entered <- struct{}{}
		select {
		case <-g.gate:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	g.srv = loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { g.served <- struct{}{} }()
		inner.ServeHTTP(w, r)
	}))
	return g
}

// start sends a GET in the background; its reply arrives on the channel.
func (g *gated) start(t *testing.T, hdr ...string) <-chan reply {
	ch := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("GET", g.srv.URL+"/", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := g.srv.Client().Do(req)
		if err != nil {
			t.Errorf("request: %v", err)
			ch <- reply{}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		ch <- reply{code: resp.StatusCode, header: resp.Header, body: string(body)}
	}()
	return ch
}

// TestConcurrencyHoldsPermitsForTheRequest: N slow requests in flight hold
// the N permits of their key; the next one is refused with 429 and the
// concurrency fields (qu="concurrent-requests", no t, no reset, no
// Retry-After); once they are served, a new request is admitted. Another
// key is not affected. Real server on loopback.
func TestConcurrencyHoldsPermitsForTheRequest(t *testing.T) {
	t.Parallel()
	const n = 3
	conc := newConc(t, n)
	g := newGated(t, newMW(t, []Limit{{Name: "exports", Key: KeyByHeader("X-API-Key"), Concurrency: conc}}))

	var held []<-chan reply
	for range n {
		held = append(held, g.start(t, "X-API-Key", "a"))
		<-g.entered
	}
	assert.Equal(t, n, conc.InFlight("a"), "InFlight with %d requests in the handler", n)

	over := get(t, g.srv, "X-API-Key", "a")
	<-g.served
	assert.Equal(t, http.StatusTooManyRequests, over.code)
	assert.Equal(t, `"exports";q=3;qu="concurrent-requests"`, over.header.Get("RateLimit-Policy"))
	assert.Equal(t, `"exports";r=0`, over.header.Get("RateLimit"))
	assert.Equal(t, "3", over.header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "0", over.header.Get("X-RateLimit-Remaining"))
	assert.Empty(t, over.header.Get("X-RateLimit-Reset"), "no reset for a concurrency limit")
	assert.Empty(t, over.header.Get("Retry-After"), "no Retry-After: nobody knows when a holder ends")
	assert.JSONEq(t, `{"error":"Too Many Requests","message":"concurrency limit \"exports\" exceeded: too many requests in flight, retry once one ends"}`, over.body)
	assert.Equal(t, n, conc.InFlight("a"), "the refused request took no permit")

	other := g.start(t, "X-API-Key", "b")
	<-g.entered // another key has permits of its own
	assert.Equal(t, 1, conc.InFlight("b"))
	close(g.gate)
	assert.Equal(t, http.StatusOK, (<-other).code)
	<-g.served

	var rs []string
	for _, ch := range held {
		r := <-ch
		<-g.served
		assert.Equal(t, http.StatusOK, r.code)
		assert.Equal(t, `"exports";q=3;qu="concurrent-requests"`, r.header.Get("RateLimit-Policy"))
		rs = append(rs, r.header.Get("RateLimit"))
	}
	sort.Strings(rs)
	assert.Equal(t, []string{`"exports";r=0`, `"exports";r=1`, `"exports";r=2`}, rs, "remaining after each acquisition")
	assert.Equal(t, 0, conc.InFlight("a"), "InFlight once every handler returned")

	again := get(t, g.srv, "X-API-Key", "a")
	<-g.served
	assert.Equal(t, http.StatusOK, again.code)
	assert.Equal(t, `"exports";r=2`, again.header.Get("RateLimit"))
	assert.Equal(t, 0, conc.InFlight("a"))
	assert.Equal(t, 0, conc.Len(), "no key left in flight")
}

// TestConcurrencyReleasedOnPanic: a handler that panics gives its permit
// back before the panic goes on, to the caller's recover or to the
// http.Server's.
func TestConcurrencyReleasedOnPanic(t *testing.T) {
	t.Parallel()
	conc := newConc(t, 1)
	mw := newMW(t, []Limit{{Name: "c", Key: KeyByIP(), Concurrency: conc}})
	boom := errors.New("boom")
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(boom) }))

	// The caller's recover: the panic value goes on up unchanged.
	func() {
		defer func() {
			assert.Equal(t, boom, recover(), "the panic goes on after the release")
		}()
		do(h, "GET", "/")
	}()
	assert.Equal(t, 0, conc.InFlight("192.0.2.1"), "httptest's client address")

	// The http.Server's recover, on loopback.
	served := make(chan struct{}, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { served <- struct{}{} }()
		mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic(http.ErrAbortHandler) // the server's quiet abort
		})).ServeHTTP(w, r)
	}))
	srv.Start()
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("a panicking handler answered %d", resp.StatusCode)
	}
	<-served
	assert.Equal(t, 0, conc.InFlight("127.0.0.1"), "InFlight after the server recovered the panic")
	assert.Equal(t, 0, conc.Len())
}

// TestConcurrencyReleasedWhenClientGoes: a client that goes away cancels
// the request's context; the handler returns and the permit comes back.
func TestConcurrencyReleasedWhenClientGoes(t *testing.T) {
	t.Parallel()
	conc := newConc(t, 1)
	g := newGated(t, newMW(t, []Limit{{Name: "c", Key: KeyByHeader("X-API-Key"), Concurrency: conc}}))

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", g.srv.URL+"/", nil)
		req.Header.Set("X-API-Key", "a")
		resp, err := g.srv.Client().Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		errc <- err
	}()
	<-g.entered
	assert.Equal(t, 1, conc.InFlight("a"))
	cancel()
	require.Error(t, <-errc, "the canceled request")
	<-g.served // the handler saw ctx.Done and returned
	assert.Equal(t, 0, conc.InFlight("a"), "InFlight once the handler of the client gone returned")

	close(g.gate)
	r := get(t, g.srv, "X-API-Key", "a")
	<-g.served
	assert.Equal(t, http.StatusOK, r.code)
}

// countingConc counts the acquisitions asked of a concurrency limiter.
type countingConc struct {
	ratelimit.ConcurrencyLimiter
	tries atomic.Int64
}

func (c *countingConc) TryAcquire(ctx context.Context, key string, n int) (ratelimit.Permit, ratelimit.Decision, error) {
	c.tries.Add(1)
	return c.ConcurrencyLimiter.TryAcquire(ctx, key, n)
}

// TestConcurrencyAllOrNothingWithRateLimits: a request a rate limit
// refuses never asks for a permit; a request the concurrency limit
// refuses is refunded in the rate limits that admitted it (Peek shows
// their quota untouched), and answered with the concurrency limit's
// fields.
func TestConcurrencyAllOrNothingWithRateLimits(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch) // frozen: nothing refills
	rate := newKeyed(t, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 3), mock)
	conc := &countingConc{ConcurrencyLimiter: newConc(t, 1)}
	g := newGated(t, newMW(t, []Limit{
		{Name: "conc", Key: KeyByHeader("X-API-Key"), Concurrency: conc},
		{Name: "rate", Key: KeyByHeader("X-API-Key"), Limiter: rate},
	}, WithClock(mock)))

	first := g.start(t, "X-API-Key", "a")
	<-g.entered
	require.Equal(t, 2, remaining(t, rate, "a"), "the first request's charge")
	require.EqualValues(t, 1, conc.tries.Load())

	over := get(t, g.srv, "X-API-Key", "a")
	<-g.served
	assert.Equal(t, http.StatusTooManyRequests, over.code)
	assert.Equal(t, `"conc";q=1;qu="concurrent-requests"`, over.header.Get("RateLimit-Policy"), "the denying limit's fields")
	assert.Equal(t, `"conc";r=0`, over.header.Get("RateLimit"))
	assert.Equal(t, 2, remaining(t, rate, "a"), "the rate limit is refunded when the concurrency limit refuses")

	close(g.gate)
	<-first
	<-g.served
	// Drain the rate limit, then one more: refused by it, no permit asked.
	for range 2 {
		r := get(t, g.srv, "X-API-Key", "a")
		<-g.entered
		<-g.served
		require.Equal(t, http.StatusOK, r.code)
	}
	tries := conc.tries.Load()
	r := get(t, g.srv, "X-API-Key", "a")
	<-g.served
	assert.Equal(t, http.StatusTooManyRequests, r.code)
	assert.Equal(t, `"rate";q=3;w=10800`, r.header.Get("RateLimit-Policy"))
	assert.NotEmpty(t, r.header.Get("Retry-After"))
	assert.Equal(t, tries, conc.tries.Load(), "a request the rate limit refused asked for no permit")
}

// TestConcurrencyObserved: the middleware's observer hears each
// acquisition (allowed, denied) under the limit's name, with the
// concurrency algorithm and the limiter's home, and one released Event
// per request served; the in-flight count computed from them goes up to
// the limit and back to 0. A limiter with an Observer of its own is
// refused beside WithObserver.
func TestConcurrencyObserved(t *testing.T) {
	t.Parallel()
	own := newConc(t, 1, ratelimit.WithObserver(ratelimit.ObserverFunc(func(context.Context, ratelimit.Event) {})))
	_, err := New([]Limit{{Name: "c", Key: KeyByIP(), Concurrency: own}}, WithObserver(&events{}))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), `httplimit.Limit.Concurrency of limit "c" reports to an Observer of its own`)

	const n = 2
	var obs events
	conc := newConc(t, n)
	g := newGated(t, newMW(t, []Limit{{Name: "c", Key: KeyByHeader("X-API-Key"), Concurrency: conc}}, WithObserver(&obs)))
	var held []<-chan reply
	for range n {
		held = append(held, g.start(t, "X-API-Key", "a"))
		<-g.entered
	}
	r := get(t, g.srv, "X-API-Key", "a")
	<-g.served
	require.Equal(t, http.StatusTooManyRequests, r.code)
	close(g.gate)
	for _, ch := range held {
		<-ch
		<-g.served
	}

	inFlight, peak := 0, 0
	count := map[ratelimit.Outcome]int{}
	for _, e := range obs.Take() {
		assert.Equal(t, "c", e.Name)
		assert.Equal(t, ratelimit.ConcurrencyAlgorithm, e.Algorithm)
		assert.Equal(t, ratelimit.HomeKeyed, e.Home)
		assert.Equal(t, 1, e.N)
		count[e.Outcome]++
		switch e.Outcome {
		case ratelimit.OutcomeAllowed:
			inFlight += e.N
		case ratelimit.OutcomeReleased:
			inFlight -= e.N
			assert.Equal(t, n, e.Decision.Limit)
		}
		peak = max(peak, inFlight)
	}
	assert.Equal(t, map[ratelimit.Outcome]int{ratelimit.OutcomeAllowed: n, ratelimit.OutcomeDenied: 1, ratelimit.OutcomeReleased: n}, count)
	assert.Equal(t, n, peak, "in flight at the peak")
	assert.Equal(t, 0, inFlight, "in flight once served")
}

// TestConcurrencyLimitOptions: the rest of a Limit applies to a
// concurrency limit: a cost takes that many permits (more than the limit
// can never succeed), shadow mode measures without refusing, exempt keys
// take none, a blocked key is refused with Retry-After.
func TestConcurrencyLimitOptions(t *testing.T) {
	t.Parallel()
	t.Run("cost", func(t *testing.T) {
		t.Parallel()
		conc := newConc(t, 4)
		var cost atomic.Int64
		cost.Store(3)
		g := newGated(t, newMW(t, []Limit{{Name: "c", Key: KeyByHeader("X-API-Key"), Concurrency: conc}},
			WithCost(func(*http.Request) int { return int(cost.Load()) })))
		first := g.start(t, "X-API-Key", "a")
		<-g.entered
		assert.Equal(t, 3, conc.InFlight("a"), "a cost of 3 holds 3 permits")
		r := get(t, g.srv, "X-API-Key", "a")
		<-g.served
		assert.Equal(t, http.StatusTooManyRequests, r.code, "3 more do not fit in 4")
		cost.Store(5)
		r = get(t, g.srv, "X-API-Key", "a")
		<-g.served
		assert.Equal(t, http.StatusTooManyRequests, r.code)
		assert.Contains(t, r.body, `"retryNever":true`, "a cost above the limit can never succeed")
		assert.Empty(t, r.header.Get("Retry-After"))
		close(g.gate)
		<-first
		<-g.served
		assert.Equal(t, 0, conc.InFlight("a"))
	})
	t.Run("shadow", func(t *testing.T) {
		t.Parallel()
		var obs events
		conc := newConc(t, 1)
		g := newGated(t, newMW(t, []Limit{{Name: "c", Key: KeyByHeader("X-API-Key"), Concurrency: conc, Shadow: true}},
			WithObserver(&obs)))
		first := g.start(t, "X-API-Key", "a")
		<-g.entered
		second := g.start(t, "X-API-Key", "a")
		<-g.entered // served, though over the limit
		assert.Equal(t, 1, conc.InFlight("a"), "the shadow denial holds nothing")
		close(g.gate)
		for _, ch := range []<-chan reply{first, second} {
			assert.Equal(t, http.StatusOK, (<-ch).code)
			<-g.served
		}
		assert.Equal(t, 0, conc.InFlight("a"))
		count := map[ratelimit.Outcome]int{}
		for _, e := range obs.Take() {
			count[e.Outcome]++
		}
		assert.Equal(t, map[ratelimit.Outcome]int{ratelimit.OutcomeAllowed: 1, ratelimit.OutcomeShadow: 1, ratelimit.OutcomeReleased: 1}, count)
	})
	t.Run("exempt", func(t *testing.T) {
		t.Parallel()
		conc := newConc(t, 1)
		g := newGated(t, newMW(t, []Limit{{Name: "c", Key: KeyByHeader("X-API-Key"), Concurrency: conc, ExemptKeys: []string{"internal"}}}))
		first := g.start(t, "X-API-Key", "internal")
		<-g.entered
		second := g.start(t, "X-API-Key", "internal")
		<-g.entered
		assert.Equal(t, 0, conc.InFlight("internal"), "an exempt key takes no permit")
		close(g.gate)
		for _, ch := range []<-chan reply{first, second} {
			r := <-ch
			<-g.served
			assert.Equal(t, http.StatusOK, r.code)
			assertNoRateFields(t, "exempt", r)
		}
	})
	t.Run("blocked", func(t *testing.T) {
		t.Parallel()
		conc := newConc(t, 1, ratelimit.WithClock(fakeclock.New(epoch)))
		require.NoError(t, conc.Block(context.Background(), "a", 90*time.Second))
		h := newMW(t, []Limit{{Name: "c", Key: KeyByHeader("X-API-Key"), Concurrency: conc}}).Handler(okHandler)
		w := do(h, "GET", "/", "X-API-Key", "a")
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "90", w.Header().Get("Retry-After"), "a blocked key is told when to come back")
		assert.JSONEq(t, `{"error":"Too Many Requests","message":"concurrency limit \"c\" exceeded, retry in 90 s","retryAfter":90}`, w.Body.String())
	})
}

// TestConcurrencyConfigErrors: a Limit has exactly one of Limiter and
// Concurrency, and no Window when it is a concurrency limit.
func TestConcurrencyConfigErrors(t *testing.T) {
	t.Parallel()
	conc := newConc(t, 1)
	rate := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), fakeclock.New(epoch))
	var nilConc *ratelimit.Concurrency
	for _, c := range []struct {
		l    Limit
		want string
	}{
		{Limit{Name: "x", Key: KeyByIP(), Limiter: rate, Concurrency: conc}, `httplimit.Limit of limit "x" must have one of Limiter and Concurrency, got both`},
		{Limit{Name: "x", Key: KeyByIP()}, `httplimit.Limit.Limiter of limit "x" must not be nil`},
		{Limit{Name: "x", Key: KeyByIP(), Concurrency: nilConc}, `httplimit.Limit.Concurrency of limit "x" must not be nil, got *ratelimit.Concurrency`},
		{Limit{Name: "x", Key: KeyByIP(), Concurrency: conc, Window: time.Minute}, `httplimit.Limit.Window of limit "x" must be zero for a concurrency limit`},
	} {
		_, err := New([]Limit{c.l})
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, c.want)
		assert.Contains(t, err.Error(), c.want)
	}
}

// failingConc is a concurrency limiter whose store is down: it answers
// its failure policy's Decision with an error, as a Redis one would.
type failingConc struct {
	open bool // fail open: admit
}

var errStoreDown = errors.New("store down")

func (f failingConc) TryAcquire(context.Context, string, int) (ratelimit.Permit, ratelimit.Decision, error) {
	if f.open {
		return ratelimit.Permit{}, ratelimit.Decision{Allowed: true}, errStoreDown
	}
	return ratelimit.Permit{}, ratelimit.Decision{RetryAfter: 2 * time.Second}, errStoreDown
}

func (f failingConc) Acquire(context.Context, string, int) (ratelimit.Permit, error) {
	return ratelimit.Permit{}, errStoreDown
}

// TestConcurrencyLimiterErrors: a TryAcquire error is treated as a rate
// limiter's: its failure policy's Decision stands, with no quota fields
// (none was measured), reported as a fallback; failing closed refunds the
// rate limits that admitted the request.
func TestConcurrencyLimiterErrors(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	for _, open := range []bool{false, true} {
		var obs events
		rate := newKeyed(t, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 5), mock)
		h := newMW(t, []Limit{
			{Name: "rate", Key: KeyByIP(), Limiter: rate},
			{Name: "conc", Key: KeyByIP(), Concurrency: failingConc{open: open}},
		}, WithClock(mock), WithObserver(&obs), WithLogger(nil)).Handler(okHandler)
		w := do(h, "GET", "/")
		var outcomes []ratelimit.Outcome
		for _, e := range obs.Take() {
			if e.Name == "conc" {
				outcomes = append(outcomes, e.Outcome)
			}
		}
		if open {
			assert.Equal(t, http.StatusOK, w.Code, "failing open")
			assert.Empty(t, w.Header().Get("RateLimit"), "no quota measured: no fields")
			assert.Equal(t, 4, remaining(t, rate, "192.0.2.1"))
			assert.Equal(t, []ratelimit.Outcome{ratelimit.OutcomeFallback, ratelimit.OutcomeReleased}, outcomes)
			continue
		}
		assert.Equal(t, http.StatusTooManyRequests, w.Code, "failing closed")
		assert.Equal(t, "2", w.Header().Get("Retry-After"))
		assert.Empty(t, w.Header().Get("RateLimit"), "no quota measured: no fields")
		assert.Equal(t, 5, remaining(t, rate, "192.0.2.1"), "refunded")
		assert.Equal(t, []ratelimit.Outcome{ratelimit.OutcomeFallback}, outcomes)
	}
}
