package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// failures counts the responses >= 400.
func failures(status, _ int) int {
	if status >= 400 {
		return 1
	}
	return 0
}

// reported counts the cost the handler reported (or the request's).
func reported(_, cost int) int { return cost }

// login is a loopback login server limited by mw: X-Password "bad" is
// answered 401, anything else 200. ran counts the handlers that ran,
// failed those that answered 401. With gate set, each handler waits for
// it to close first, after signalling entered.
type login struct {
	srv         *httptest.Server
	ran, failed atomic.Int64
	gate        chan struct{}
	entered     chan struct{}
}

func newLogin(t *testing.T, mw *Middleware, gated bool) *login {
	t.Helper()
	l := &login{entered: make(chan struct{}, 128)}
	if gated {
		l.gate = make(chan struct{})
	}
	l.srv = loopback(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.ran.Add(1)
		if l.gate != nil {
			l.entered <- struct{}{}
			<-l.gate
		}
		if r.Header.Get("X-Password") == "bad" {
			l.failed.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "welcome")
	})))
	return l
}

// post sends one login attempt for user with password; it returns the
// status (0 when the request failed) and the reply's header.
func (l *login) post(user, password string) (int, http.Header) {
	req, _ := http.NewRequest("POST", l.srv.URL+"/login", nil)
	req.Header.Set("X-User", user)
	req.Header.Set("X-Password", password)
	resp, err := l.srv.Client().Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

// failureLimit is a limit of 5 failed logins an hour per user, on a clock
// that stands still: no quota comes back on its own.
func failureLimit(t *testing.T) (Limit, *ratelimit.Keyed) {
	k := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Hour), fakeclock.New(epoch))
	return Limit{Name: "login", Key: KeyByHeader("X-User"), Limiter: k, Count: failures}, k
}

// TestCountFailuresExactUnderConcurrency: with a limit of 5 failures, 64
// concurrent bad-password attempts run exactly 5 handlers (each ends in
// failure); the other 59 are refused before their handler runs, and so is
// a 65th afterwards.
func TestCountFailuresExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	lim, k := failureLimit(t)
	l := newLogin(t, newMW(t, []Limit{lim}), true)

	const attempts = 64
	codes := make(chan int, attempts)
	for range attempts {
		go func() {
			code, _ := l.post("alice", "bad")
			codes <- code
		}()
	}
	for range 5 {
		<-l.entered // 5 handlers hold the 5 reservations; the rest wait or are refused
	}
	close(l.gate)
	count := map[int]int{}
	for range attempts {
		count[<-codes]++
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: 5, http.StatusTooManyRequests: attempts - 5}, count)
	assert.EqualValues(t, 5, l.ran.Load(), "handlers run")
	assert.EqualValues(t, 5, l.failed.Load(), "handlers ended in failure")

	code, h := l.post("alice", "bad")
	assert.Equal(t, http.StatusTooManyRequests, code, "a 65th attempt")
	assert.EqualValues(t, 5, l.ran.Load(), "refused before its handler runs")
	assert.NotEmpty(t, h.Get("Retry-After"))
	assert.Equal(t, `"login";r=0;t=3600`, h.Get("RateLimit"))
	code, _ = l.post("alice", "good")
	assert.Equal(t, http.StatusTooManyRequests, code, "a spent failure limit refuses the right password too")

	d, err := k.Peek(context.Background(), "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, 0, d.Remaining)
	code, _ = l.post("bob", "good")
	assert.Equal(t, http.StatusOK, code, "another user has a limit of his own")
}

// TestCountSuccessesNeverBlocked: successful logins settle at 0, so 1,000
// of them in a row, then 1,000 from 16 concurrent clients, all succeed,
// even with 4 of the 5 failures spent (then they run one at a time:
// a request the limit would refuse while others are in flight waits for
// them to settle). One more failure spends the limit.
func TestCountSuccessesNeverBlocked(t *testing.T) {
	t.Parallel()
	lim, k := failureLimit(t)
	l := newLogin(t, newMW(t, []Limit{lim}), false)

	for i := range 1000 {
		code, h := l.post("alice", "good")
		require.Equal(t, http.StatusOK, code, "sequential login %d", i)
		if i == 0 || i == 999 {
			assert.Equal(t, `"login";r=4;t=3600`, h.Get("RateLimit"), "reserved as a possible failure; the last one settled at 0")
		}
	}
	for i := range 4 {
		code, h := l.post("alice", "bad")
		require.Equal(t, http.StatusUnauthorized, code)
		assert.Equal(t, fmt.Sprintf(`"login";r=%d;t=3600`, 4-i), h.Get("RateLimit"), "failure %d", i+1)
	}
	for _, clients := range []int{16, 64} {
		var wg sync.WaitGroup
		var refused atomic.Int64
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 1000 / clients {
					if code, _ := l.post("alice", "good"); code != http.StatusOK {
						refused.Add(1)
						t.Errorf("client %d: login answered %d", c, code)
						return
					}
				}
			}()
		}
		wg.Wait()
		assert.Zero(t, refused.Load(), "%d concurrent clients", clients)
	}
	d, err := k.Peek(context.Background(), "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, 1, d.Remaining, "4 failures counted, no success")

	code, _ := l.post("alice", "bad")
	require.Equal(t, http.StatusUnauthorized, code)
	ran := l.ran.Load()
	code, _ = l.post("alice", "good")
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Equal(t, ran, l.ran.Load())
}

// TestCountReportedCost: a token limit reserves the request's estimate
// (WithCost) and settles what the handler reports with ReportCost: less
// gives back, more charges the overrun; no report settles the estimate.
func TestCountReportedCost(t *testing.T) {
	t.Parallel()
	k := newKeyed(t, ratelimit.FixedWindowPolicy(1000, time.Hour), fakeclock.New(epoch))
	mw := newMW(t, []Limit{{Name: "tokens", Key: KeyByHeader("X-API-Key"), Limiter: k, Count: reported}},
		WithCost(func(*http.Request) int { return 100 })) // max_tokens, say
	srv := loopback(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-Used"); u != "" {
			var n int
			_, _ = fmt.Sscan(u, &n)
			require.NoError(t, ReportCost(r.Context(), n))
		}
		_, _ = io.WriteString(w, "done")
	})))
	remaining := func() int {
		d, err := k.Peek(context.Background(), "a", 0)
		require.NoError(t, err)
		return d.Remaining
	}
	r := get(t, srv, "X-API-Key", "a", "X-Used", "30")
	assert.Equal(t, http.StatusOK, r.code)
	assert.Equal(t, `"tokens";r=900;t=3600`, r.header.Get("RateLimit"), "the estimate reserved")
	assert.Equal(t, 970, remaining(), "settled at the 30 reported")
	get(t, srv, "X-API-Key", "a", "X-Used", "250")
	assert.Equal(t, 720, remaining(), "an overrun of 150 charged")
	get(t, srv, "X-API-Key", "a")
	assert.Equal(t, 620, remaining(), "no report: the estimate")
	get(t, srv, "X-API-Key", "a", "X-Used", "0")
	assert.Equal(t, 620, remaining(), "0 reported: nothing")
}

// TestCountSettledOnPanicAndClientGone: a handler that panics counts as
// 500 (a failure), and one whose client went away is settled when it
// returns, with what it reported.
func TestCountSettledOnPanicAndClientGone(t *testing.T) {
	t.Parallel()
	failK := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Hour), fakeclock.New(epoch))
	tokK := newKeyed(t, ratelimit.FixedWindowPolicy(1000, time.Hour), fakeclock.New(epoch))
	mw := newMW(t, []Limit{
		{Name: "failures", Key: KeyByHeader("X-User"), Limiter: failK, Count: failures},
		{Name: "tokens", Key: KeyByHeader("X-User"), Limiter: tokK, Count: reported},
	}, WithCost(func(*http.Request) int { return 1 }))
	entered, served := make(chan struct{}, 1), make(chan struct{}, 1)
	inner := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/wait":
			entered <- struct{}{}
			<-r.Context().Done()
			require.NoError(t, ReportCost(r.Context(), 7))
		}
	}))
	srv := loopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { served <- struct{}{} }()
		inner.ServeHTTP(w, r)
	}))
	peek := func(k *ratelimit.Keyed) int {
		d, err := k.Peek(context.Background(), "u", 0)
		require.NoError(t, err)
		return d.Remaining
	}

	req, _ := http.NewRequest("GET", srv.URL+"/panic", nil)
	req.Header.Set("X-User", "u")
	_, err := srv.Client().Do(req)
	assert.Error(t, err, "the connection is aborted")
	<-served
	assert.Equal(t, 4, peek(failK), "a panic is a failure")
	assert.Equal(t, 999, peek(tokK), "at the request's cost")

	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL+"/wait", nil)
	req.Header.Set("X-User", "u")
	done := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-entered
	cancel()
	assert.Error(t, <-done)
	<-served
	assert.Equal(t, 4, peek(failK), "the handler wrote nothing: 200, no failure")
	assert.Equal(t, 992, peek(tokK), "the 7 reported after the client left")
}

// TestCountAllOrNothing: a request a rate limit refuses reserves nothing
// in a limit counting by outcome, and one such limit refusing gives back
// what the others took.
func TestCountAllOrNothing(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(epoch)
	perIP := newKeyed(t, ratelimit.FixedWindowPolicy(3, time.Hour), clk)
	fails := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Hour), clk)
	tokens := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Hour), clk)
	mw := newMW(t, []Limit{
		{Name: "ip", Key: KeyByHeader("X-IP"), Limiter: perIP},
		{Name: "tokens", Key: KeyByHeader("X-User"), Limiter: tokens, Count: reported},
		{Name: "failures", Key: KeyByHeader("X-User"), Limiter: fails, Count: failures},
	})
	var ran atomic.Int64
	srv := loopback(t, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		w.WriteHeader(http.StatusForbidden)
	})))
	peek := func(k *ratelimit.Keyed, key string) int {
		d, err := k.Peek(context.Background(), key, 0)
		require.NoError(t, err)
		return d.Remaining
	}
	assert.Equal(t, http.StatusForbidden, get(t, srv, "X-IP", "ip1", "X-User", "u").code)
	assert.Equal(t, 0, peek(fails, "u"))
	r := get(t, srv, "X-IP", "ip1", "X-User", "u")
	assert.Equal(t, http.StatusTooManyRequests, r.code)
	assert.Contains(t, r.body, `rate limit \"failures\" exceeded`)
	assert.EqualValues(t, 1, ran.Load())
	assert.Equal(t, 2, peek(perIP, "ip1"), "the refused request was refunded")
	assert.Equal(t, 99, peek(tokens, "u"), "and its token reservation given back")

	for _, u := range []string{"v", "w", "y"} {
		assert.Equal(t, http.StatusForbidden, get(t, srv, "X-IP", "ip2", "X-User", u).code) // ip2 spent by then
	}
	assert.Equal(t, http.StatusTooManyRequests, get(t, srv, "X-IP", "ip2", "X-User", "x").code)
	assert.Equal(t, 1, peek(fails, "x"), "refused by the rate limit: nothing reserved")
	assert.Equal(t, 100, peek(tokens, "x"))
}

// TestCountConfigErrors: Count needs a limiter that can reserve.
func TestCountConfigErrors(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(epoch)
	log := newKeyed(t, ratelimit.SlidingLogPolicy(5, time.Minute), clk)
	for name, l := range map[string]Limit{
		"sliding log":    {Name: "login", Key: KeyByHeader("X-User"), Limiter: log, Count: failures},
		"not a Reserver": {Name: "login", Key: KeyByHeader("X-User"), Limiter: allowOnly{}, Count: failures},
		"concurrency":    {Name: "login", Key: KeyByHeader("X-User"), Concurrency: newConc(t, 2), Count: failures},
	} {
		_, err := New([]Limit{l})
		require.Error(t, err, name)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), `"login"`, name)
		assert.Contains(t, err.Error(), "httplimit.Limit.", name)
	}
}

// allowOnly is a KeyedLimiter that cannot reserve.
type allowOnly struct{ ratelimit.KeyedLimiter }

// TestReportCost: a negative cost is an error; outside a counted request
// a report does nothing.
func TestReportCost(t *testing.T) {
	t.Parallel()
	err := ReportCost(context.Background(), -1)
	assert.True(t, errors.Is(err, ratelimit.ErrInvalidN), "%v", err)
	assert.Contains(t, err.Error(), "httplimit.ReportCost")
	assert.NoError(t, ReportCost(context.Background(), 5))
}

// TestCountTiered: a *ratelimit.Tiered counts by outcome in the request's
// tier; a tier whose limiter cannot reserve is the server's
// misconfiguration (500), the handler not run.
func TestCountTiered(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(epoch)
	log := newKeyed(t, ratelimit.SlidingLogPolicy(5, time.Hour), clk)
	tiered, err := ratelimit.NewTiered(func(_ context.Context, key string) string {
		if key == "old" {
			return "log"
		}
		return "free"
	}, map[string]ratelimit.KeyedLimiter{"free": newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Hour), clk), "log": log})
	require.NoError(t, err)
	l := newLogin(t, newMW(t, []Limit{{Name: "login", Key: KeyByHeader("X-User"), Limiter: tiered, Count: failures}}), false)
	for range 2 {
		code, _ := l.post("alice", "bad")
		require.Equal(t, http.StatusUnauthorized, code)
	}
	code, _ := l.post("alice", "good")
	assert.Equal(t, http.StatusTooManyRequests, code, "2 failures spend the free tier")
	ran := l.ran.Load()
	code, _ = l.post("old", "good")
	assert.Equal(t, http.StatusInternalServerError, code, "a sliding log tier cannot reserve")
	assert.Equal(t, ran, l.ran.Load())
}
