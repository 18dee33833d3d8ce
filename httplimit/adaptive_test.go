package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/limitset"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// fixedAdaptive is an Adaptive whose limit is pinned at limit (Min = Max),
// with the default Reserve of 0.2.
func fixedAdaptive(t *testing.T, limit int, opts ...ratelimit.Option) *ratelimit.Adaptive {
	t.Helper()
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: limit, Min: limit, Max: limit}, opts...)
	require.NoError(t, err)
	return a
}

// priorityOf reads a request's priority from X-Priority.
func priorityOf(r *http.Request) ratelimit.Priority {
	switch r.Header.Get("X-Priority") {
	case "critical":
		return ratelimit.PriorityCritical
	case "sheddable":
		return ratelimit.PrioritySheddable
	}
	return ratelimit.PriorityDefault
}

// gate is a handler that holds each request until release is closed,
// telling entered once the request is in.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Hold") == "" {
		okHandler(w, r)
		return
	}
	g.entered <- struct{}{}
	<-g.release
	okHandler(w, r)
}

// hold sends a request with the header pairs hdr that the gate holds, and
// returns once its handler is running; its reply comes on the channel.
func (g *gate) hold(t *testing.T, srv *httptest.Server, hdr ...string) <-chan reply {
	t.Helper()
	out := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Header.Set("X-Hold", "1")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			out <- reply{code: -1, body: err.Error()}
			return
		}
		_ = resp.Body.Close()
		out <- reply{code: resp.StatusCode, header: resp.Header}
	}()
	select {
	case <-g.entered:
	case r := <-out:
		t.Fatalf("held request answered %d at once", r.code)
	}
	return out
}

// shedBody is WriteDenied's body for a request shed with a delay of 1 s.
const shedBody = `{"error":"Service Unavailable","message":"server overloaded, retry in 1 s","retryAfter":1}` + "\n"

// adaptiveEvents returns the Events of es named "adaptive", by outcome.
func adaptiveEvents(es []ratelimit.Event) map[ratelimit.Outcome][]ratelimit.Event {
	by := map[ratelimit.Outcome][]ratelimit.Event{}
	for _, e := range es {
		if e.Name == limitset.ShedName {
			by[e.Outcome] = append(by[e.Outcome], e)
		}
	}
	return by
}

// TestAdaptiveShedsByPriority: with a limit pinned at 10 and the default
// Reserve of 0.2, sheddable requests fill 8 places, default ones 10 and
// critical ones 12; each tier beyond its ceiling is shed (503, Retry-After,
// JSON body, no rate-limit fields, its rate limit refunded) while the
// tiers above still pass. Every decision reaches the middleware's
// observer under "adaptive"; every place is free once the handlers return.
// Real server on loopback.
func TestAdaptiveShedsByPriority(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)
	ad := fixedAdaptive(t, 10)
	var obs events
	g := newGate()
	mw := newMW(t, []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim}},
		WithClock(mock), WithObserver(&obs), WithAdaptive(ad, priorityOf))
	srv := loopback(t, mw.Handler(g))

	var held []<-chan reply
	holdN := func(n int, prio string) {
		for range n {
			held = append(held, g.hold(t, srv, "X-API-Key", "held", "X-Priority", prio))
		}
	}
	shedOne := func(prio string) {
		t.Helper()
		a := get(t, srv, "X-API-Key", "shed", "X-Priority", prio)
		assert.Equalf(t, http.StatusServiceUnavailable, a.code, "%s request beyond its ceiling", prio)
		assert.Equal(t, "1", a.header.Get("Retry-After"))
		assert.Equal(t, "application/json; charset=utf-8", a.header.Get("Content-Type"))
		assert.Equal(t, shedBody, a.body)
		for _, f := range rateFields[:5] {
			assert.Emptyf(t, a.header.Get(f), "%s on a shed request", f)
		}
	}
	for _, c := range []struct {
		prio    string
		ceiling int // places the tier may fill
		add     int // requests of the tier to hold (the lower tiers hold the rest)
	}{
		{"sheddable", 8, 8},
		{"", 10, 2},
		{"critical", 12, 2},
	} {
		holdN(c.add, c.prio)
		require.Equalf(t, c.ceiling, ad.InFlight(), "in flight once %q requests fill their places", c.prio)
		shedOne(c.prio)
		assert.Equal(t, c.ceiling, ad.InFlight(), "a shed request takes no place")
	}
	assert.Equal(t, 100, remaining(t, lim, "shed"), "the shed requests were refunded")
	assert.Equal(t, 100-12, remaining(t, lim, "held"))

	by := adaptiveEvents(obs.Take())
	assert.Len(t, by[ratelimit.OutcomeAllowed], 12)
	require.Len(t, by[ratelimit.OutcomeShed], 3)
	shed := by[ratelimit.OutcomeShed][2]
	assert.Positive(t, shed.Decision.RetryAfter, "a shed Decision suggests when to retry")
	shed.Decision.RetryAfter = 0 // the Adaptive's to choose
	assert.Equal(t, ratelimit.Event{Name: "adaptive", Algorithm: ratelimit.AdaptiveAlgorithm, Home: ratelimit.HomeMemory,
		Outcome: ratelimit.OutcomeShed, N: 1, Decision: ratelimit.Decision{Limit: 10}}, shed)

	close(g.release)
	for _, c := range held {
		assert.Equal(t, http.StatusOK, (<-c).code)
	}
	assert.Equal(t, 0, ad.InFlight(), "every place is free once the handlers returned")
}

// TestAdaptiveRateLimitsDecideFirst: a request the rate limits refuse is
// answered 429 and never asks the Adaptive (no Event, no place), even
// when the Adaptive is full; a request they admit but the Adaptive sheds
// is refunded, so that its client's next try is not refused for it.
// Requests no limit applies to, and exempt ones, still take places.
func TestAdaptiveRateLimitsDecideFirst(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)
	ad := fixedAdaptive(t, 1)
	var obs events
	g := newGate()
	mw := newMW(t, []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim}},
		WithClock(mock), WithObserver(&obs), WithAdaptive(ad, nil))
	srv := loopback(t, overrideFrom(mw.Handler(g)))

	first := g.hold(t, srv, "X-API-Key", "a")
	require.Equal(t, 1, ad.InFlight())
	obs.Take()

	assert.Equal(t, http.StatusTooManyRequests, get(t, srv, "X-API-Key", "a").code, "key a's quota is spent")
	assert.Empty(t, adaptiveEvents(obs.Take()), "a refused request does not ask the Adaptive")
	assert.Equal(t, 1, ad.InFlight())

	for _, hdr := range [][]string{{"X-API-Key", "b"}, {}, {"X-Test-Override", "exempt"}} {
		a := get(t, srv, hdr...)
		assert.Equalf(t, http.StatusServiceUnavailable, a.code, "request %q while the only place is held", hdr)
		assert.Lenf(t, adaptiveEvents(obs.Take())[ratelimit.OutcomeShed], 1, "request %q", hdr)
	}
	assert.Equal(t, 1, remaining(t, lim, "b"), "the shed request of key b was refunded")

	close(g.release)
	assert.Equal(t, http.StatusOK, (<-first).code)
	assert.Equal(t, 0, ad.InFlight())
	assert.Equal(t, http.StatusOK, get(t, srv, "X-API-Key", "b").code, "key b's quota is whole")
	assert.Equal(t, http.StatusOK, get(t, srv).code)
	assert.Equal(t, http.StatusOK, get(t, srv, "X-Test-Override", "exempt").code)
	assert.Len(t, adaptiveEvents(obs.Take())[ratelimit.OutcomeAllowed], 3)
	assert.Equal(t, 0, ad.InFlight())
}

// TestAdaptiveFlightEnds: how a request's flight ends, by its status, its
// context and its handler: 503, 504 and a passed deadline are dropped;
// other 5xx, a client gone, a hijacked connection and a panic are
// ignored; the rest (4xx too) succeed.
func TestAdaptiveFlightEnds(t *testing.T) {
	t.Parallel()
	live := context.Background()
	past, cancel := context.WithDeadline(live, epoch)
	t.Cleanup(cancel)
	gone, leave := context.WithCancel(live)
	leave()
	for _, c := range []struct {
		name     string
		ctx      context.Context
		w        outcomeWriter
		returned bool
		want     limitset.FlightEnd
	}{
		{"200", live, outcomeWriter{status: 200}, true, limitset.EndSuccess},
		{"no status written", live, outcomeWriter{}, true, limitset.EndSuccess},
		{"404", live, outcomeWriter{status: 404}, true, limitset.EndSuccess},
		{"429", live, outcomeWriter{status: 429}, true, limitset.EndSuccess},
		{"500", live, outcomeWriter{status: 500}, true, limitset.EndIgnored},
		{"502", live, outcomeWriter{status: 502}, true, limitset.EndIgnored},
		{"503", live, outcomeWriter{status: 503}, true, limitset.EndDropped},
		{"504", live, outcomeWriter{status: 504}, true, limitset.EndDropped},
		{"deadline passed", past, outcomeWriter{status: 200}, true, limitset.EndDropped},
		{"client gone", gone, outcomeWriter{status: 200}, true, limitset.EndIgnored},
		{"client gone, 503", gone, outcomeWriter{status: 503}, true, limitset.EndIgnored},
		{"hijacked", live, outcomeWriter{hijacked: true}, true, limitset.EndIgnored},
		{"panic", live, outcomeWriter{status: 200}, false, limitset.EndIgnored},
	} {
		assert.Equalf(t, c.want, flightEnd(c.ctx, &c.w, c.returned), "%s", c.name)
	}
}

// TestAdaptiveFlightFreedHoweverItEnds: over a real server with a single
// place, whatever the handler answers (any status, a deadline that
// passed, a panic, Count limits settling), the place is free once the
// answer (or the broken connection) reached the client: the next request
// is served, not shed.
func TestAdaptiveFlightFreedHoweverItEnds(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	ad := fixedAdaptive(t, 1)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1000, time.Minute), mock)
	failures := newKeyed(t, ratelimit.FixedWindowPolicy(1000, time.Minute), mock)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Do") {
		case "panic":
			panic(http.ErrAbortHandler)
		case "status":
			code, _ := strconv.Atoi(r.Header.Get("X-Status"))
			w.WriteHeader(code)
		}
	})
	mw := newMW(t, []Limit{
		{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim},
		{Name: "failures", Key: KeyByHeader("X-Count"), Limiter: failures,
			Count: func(status, _ int) int {
				if status >= 400 {
					return 1
				}
				return 0
			}},
	}, WithClock(mock), WithAdaptive(ad, nil))
	deadline := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Past-Deadline") != "" {
				ctx, cancel := context.WithDeadline(r.Context(), epoch)
				defer cancel()
				r = r.WithContext(ctx)
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := loopback(t, deadline(mw.Handler(h)))
	for _, hdr := range [][]string{
		{"X-Do", "status", "X-Status", "200"},
		{"X-Do", "status", "X-Status", "404"},
		{"X-Do", "status", "X-Status", "500"},
		{"X-Do", "status", "X-Status", "503"},
		{"X-Do", "status", "X-Status", "504"},
		{"X-Do", "status", "X-Status", "200", "X-Past-Deadline", "1"},
		{"X-Do", "status", "X-Status", "503", "X-Count", "c"},
		{"X-Do", "panic", "X-Count", "c"},
		{"X-Do", "panic"},
		{"X-API-Key", "k"},
	} {
		// POST: net/http's client resends a GET whose connection broke.
		req, err := http.NewRequest("POST", srv.URL+"/", nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := srv.Client().Do(req)
		if hdr[1] == "panic" {
			require.Errorf(t, err, "%q: the panic breaks the connection", hdr)
		} else {
			require.NoErrorf(t, err, "%q", hdr)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			want := http.StatusOK
			if hdr[1] == "status" {
				want, _ = strconv.Atoi(hdr[3])
			}
			assert.Equalf(t, want, resp.StatusCode, "%q", hdr)
			assert.NotEqualf(t, shedBody, string(body), "%q was shed", hdr)
		}
		assert.Equalf(t, 0, ad.InFlight(), "%q: the place is free", hdr)
	}
	assert.Equal(t, 1000-2, remaining(t, failures, "c"), "a 503 and a panic (500) count as failures")
}

// TestAdaptiveDeniedHandler: a shed request reaches the denied handler
// with a Denial of Err ErrShed, Limit "adaptive", the Adaptive's Decision
// and RetryAfter its RetryAfter rounded up to a whole second, at least
// one, Retry-After already set.
func TestAdaptiveDeniedHandler(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	ad := fixedAdaptive(t, 1)
	g := newGate()
	var got []Denial
	mw := newMW(t, []Limit{{Key: KeyByIP(), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)}},
		WithClock(mock), WithAdaptive(ad, nil),
		WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Denial) {
			got = append(got, d)
			assert.Equal(t, "1", w.Header().Get("Retry-After"))
			w.WriteHeader(http.StatusTeapot)
		}))
	srv := loopback(t, mw.Handler(g))
	held := g.hold(t, srv)
	assert.Equal(t, http.StatusTeapot, get(t, srv).code)
	close(g.release)
	assert.Equal(t, http.StatusOK, (<-held).code)
	require.Len(t, got, 1)
	d := got[0]
	assert.True(t, errors.Is(d.Err, ErrShed))
	assert.Positive(t, d.Decision.RetryAfter)
	assert.Equal(t, max((d.Decision.RetryAfter+time.Second-1).Truncate(time.Second), time.Second),
		d.RetryAfter, "RetryAfter: the Decision's rounded up to a whole second, at least one")
	d.Decision.RetryAfter = 0 // the Adaptive's to choose
	assert.Equal(t, Denial{Limit: "adaptive", Decision: ratelimit.Decision{Limit: 1}, RetryAfter: d.RetryAfter, Err: ErrShed}, d)
}

// TestAdaptiveConfig: New refuses a nil Adaptive (a protection wired to
// nothing), and one with an Observer of its own beside WithObserver's
// (each decision counted twice); alone, its own Observer is fine.
func TestAdaptiveConfig(t *testing.T) {
	t.Parallel()
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), fakeclock.New(epoch))
	limits := []Limit{{Key: KeyByIP(), Limiter: lim}}
	var obs events
	_, err := New(limits, WithAdaptive(nil, nil))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "httplimit.WithAdaptive: the Adaptive is nil")

	observed := fixedAdaptive(t, 5, ratelimit.WithObserver(&obs))
	_, err = New(limits, WithAdaptive(observed, nil), WithObserver(&obs))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "httplimit.WithAdaptive: the Adaptive reports to an Observer of its own")
	_, err = New(limits, WithAdaptive(observed, nil))
	require.NoError(t, err)
	_, err = New(limits, WithAdaptive(fixedAdaptive(t, 5), nil), WithObserver(&obs))
	require.NoError(t, err)
}

// TestAdaptiveAlone: WithAdaptive with no rate limits is overload
// protection alone: New accepts it (without WithAdaptive, no limits is
// still an error), the place beyond the limit is shed, and a denied
// network is still refused, before the Adaptive. Real server on loopback.
func TestAdaptiveAlone(t *testing.T) {
	t.Parallel()
	_, err := New(nil)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)

	a := fixedAdaptive(t, 1)
	mw, err := New(nil, WithAdaptive(a, priorityOf))
	require.NoError(t, err)
	g := newGate()
	srv := httptest.NewServer(mw.Handler(g))
	defer srv.Close()

	held := g.hold(t, srv)
	assert.Equal(t, 1, a.InFlight())
	resp, err := srv.Client().Get(srv.URL + "/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the default ceiling is 1")
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	close(g.release)
	assert.Equal(t, http.StatusOK, (<-held).code)
	assert.Equal(t, 0, a.InFlight())

	denied, err := New(nil, WithAdaptive(a, nil), DeniedNetworks("127.0.0.0/8", "::1/128"))
	require.NoError(t, err)
	dsrv := httptest.NewServer(denied.Handler(g))
	defer dsrv.Close()
	resp, err = dsrv.Client().Get(dsrv.URL + "/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a denied network is refused before the Adaptive")
	assert.Equal(t, 0, a.InFlight())
}
