package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// openLimiter is a KeyedLimiter that admits everything and holds no key,
// so that only the transport's own memory is measured.
type openLimiter struct{}

func (openLimiter) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true}, nil
}
func (openLimiter) WaitN(context.Context, string, int) error   { return nil }
func (openLimiter) RefundN(context.Context, string, int) error { return nil }
func (openLimiter) Peek(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true}, nil
}

// byPath keys a request by its URL path: one loopback server stands for
// any number of hosts.
func byPath(r *http.Request) (string, bool) { return r.URL.Path, true }

// TestKeyedTransportBoundsKeys: a keyed transport meeting more keys than
// WithMaxKeys holds at most that many: keys whose quota is mostly spent
// (each answered `"hourly";r=10;t=3600` of q=101) are never forgotten, so
// a request for one more key is refused, not sent, with an error matching
// ratelimit.ErrTooManyKeys, while the keys held go on; once a key holds
// nothing live (its quota is back, its backoff over) it makes room.
// Before, every key was kept: 100,000 hosts cost 45 MB.
func TestKeyedTransportBoundsKeys(t *testing.T) {
	t.Parallel()
	s, srv := startScripted(t)
	hourly := func(w http.ResponseWriter) {
		w.Header().Set("RateLimit-Policy", `"hourly";q=101;w=3600`)
		w.Header().Set("RateLimit", `"hourly";r=10;t=3600`)
		_, _ = io.WriteString(w, "ok")
	}
	for range 100 {
		s.script = append(s.script, hourly)
	}
	clk := fakeclock.NewAnnouncing(epoch)
	tr, err := NewKeyedTransport(nil, openLimiter{}, byPath, WithClock(clk), WithMaxKeys(10))
	require.NoError(t, err)
	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		return resp, err
	}
	for i := range 10 {
		_, err := get("/" + strconv.Itoa(i))
		require.NoError(t, err)
	}
	assert.Equal(t, 10, tr.pacer.Keys())
	_, err = get("/new")
	require.ErrorIs(t, err, ratelimit.ErrTooManyKeys)
	assert.Contains(t, err.Error(), "ratelimit: too many keys: 10 held")
	assert.Equal(t, int64(10), s.hits.Load(), "the request for a new key is not sent")
	_, err = get("/3") // a key held goes on
	require.NoError(t, err)
	assert.Equal(t, 10, tr.pacer.Keys())

	// An hour on, the quotas are full again: the keys hold nothing live,
	// and a new key takes the room.
	clk.Add(time.Hour)
	_, err = get("/new")
	require.NoError(t, err)
	assert.LessOrEqual(t, tr.pacer.Keys(), 10)
}

// TestKeyedTransportKeepsLiveKeysAtCap: at the cap a key whose server asked
// for a pause, or that has a request in flight, is never forgotten to make
// room (its requests would hammer that server): the new key is refused.
func TestKeyedTransportKeepsLiveKeysAtCap(t *testing.T) {
	t.Parallel()
	_, srv := startScripted(t, answer(http.StatusTooManyRequests, "Retry-After", "60"))
	clk := fakeclock.NewAnnouncing(epoch)
	tr, err := NewKeyedTransport(nil, openLimiter{}, byPath, WithClock(clk), WithMaxKeys(1))
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/paused", nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	_ = resp.Body.Close()
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/other", nil)
	_, err = tr.RoundTrip(req)
	require.ErrorIs(t, err, ratelimit.ErrTooManyKeys)
	assert.Equal(t, time.Minute, tr.PausedFor("/paused"), "the pause is kept")
	// The pause, then the backoff cap, over: the key holds nothing live.
	clk.Add(time.Minute + defaultBackoffMax)
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/other", nil)
	resp, err = tr.RoundTrip(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Zero(t, tr.PausedFor("/paused"), "forgotten")
}

// TestKeyedTransportDefaultCap: without WithMaxKeys a keyed transport
// holds 65,536 keys whose quota is spent, and refuses the next new key.
// Before, it held every key it met (100,000 hosts: 45 MB).
func TestKeyedTransportDefaultCap(t *testing.T) {
	t.Parallel()
	h := http.Header{"Ratelimit": {`"hourly";r=0;t=3600`}}
	tr, err := NewKeyedTransport(fieldsAnswer(h), openLimiter{}, byPath, WithClock(fakeclock.NewAnnouncing(epoch)))
	require.NoError(t, err)
	for i := range 1 << 16 {
		req, _ := http.NewRequest(http.MethodGet, "http://h/"+strconv.Itoa(i), nil)
		_, err := tr.RoundTrip(req)
		require.NoError(t, err, "key %d", i)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://h/one-more", nil)
	_, err = tr.RoundTrip(req)
	require.ErrorIs(t, err, ratelimit.ErrTooManyKeys)
}

func TestWithMaxKeysChecked(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1} {
		_, err := NewKeyedTransport(nil, openLimiter{}, byPath, WithMaxKeys(n))
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		assert.ErrorContains(t, err, "httplimit.WithMaxKeys must be positive, got "+strconv.Itoa(n))
	}
	_, err := NewTransport(nil, nil, WithMaxKeys(10))
	assert.ErrorContains(t, err, "httplimit.WithMaxKeys applies to NewKeyedTransport, not NewTransport")
}

// fieldsAnswer is a base RoundTripper answering every request with a 200
// carrying the given header, without a network: for measuring memory.
type fieldsAnswer http.Header

func (f fieldsAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header(f), Body: http.NoBody, Request: r}, nil
}

var errBench = errors.New("bench")

// BenchmarkKeyedTransportKeyBytes reports the memory a keyed transport
// holds per key (bytes/key): 10,000 keys, each answered with a quota in
// use for an hour, the key strings themselves excluded. "hourly" is
// `"hourly";r=100;t=3600` alone (one quota, no limit stated); "middleware"
// is what this package's middleware sends (RateLimit, RateLimit-Policy and
// X-RateLimit-*: two quotas and a limit).
func BenchmarkKeyedTransportKeyBytes(b *testing.B) {
	const keys = 10_000
	paths := make([]*http.Request, keys)
	for i := range paths {
		paths[i], _ = http.NewRequest(http.MethodGet, "http://h/"+strconv.Itoa(i)+".example.com", nil)
	}
	for _, bc := range []struct {
		name string
		h    http.Header
	}{
		{"hourly", http.Header{"Ratelimit": {`"hourly";r=100;t=3600`}}},
		{"middleware", http.Header{
			"Ratelimit":             {`"api";r=100;t=3600`},
			"Ratelimit-Policy":      {`"api";q=101;w=3600`},
			"X-Ratelimit-Limit":     {"101"},
			"X-Ratelimit-Remaining": {"100"},
			"X-Ratelimit-Reset":     {strconv.FormatInt(epoch.Add(time.Hour).Unix(), 10)},
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var total float64
			for range b.N {
				tr, err := NewKeyedTransport(fieldsAnswer(bc.h), openLimiter{}, byPath, WithClock(fakeclock.NewAnnouncing(epoch)))
				if err != nil {
					b.Fatal(err)
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for _, req := range paths {
					if _, err := tr.RoundTrip(req); err != nil {
						b.Fatal(errBench, err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if tr.pacer.Keys() != keys {
					b.Fatalf("%d keys held, want %d", tr.pacer.Keys(), keys)
				}
				total += float64(after.HeapAlloc) - float64(before.HeapAlloc)
				runtime.KeepAlive(tr)
			}
			b.ReportMetric(total/float64(b.N)/keys, "bytes/key")
		})
	}
}

// TestKeyedTransportForgetsHealthyKeysAtCap: at the cap, keys whose
// servers said they have plenty left (r=100 of 101, or r=100 with no limit
// stated) and that wait for nothing make room for new keys: 200 hosts
// through a cap of 100 all get their answer, and at most 100 keys are held.
// Before, each such key counted as live for an hour and the 101st host got
// ErrTooManyKeys. A key nearly spent (r=10 of 101) or paused is kept.
func TestKeyedTransportForgetsHealthyKeysAtCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header http.Header
	}{
		{"limit stated", http.Header{"Ratelimit-Policy": {`"hourly";q=101;w=3600`}, "Ratelimit": {`"hourly";r=100;t=3600`}}},
		{"no limit stated", http.Header{"Ratelimit": {`"hourly";r=100;t=3600`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := NewKeyedTransport(fieldsAnswer(tc.header), openLimiter{}, byPath, WithClock(fakeclock.NewAnnouncing(epoch)), WithMaxKeys(100))
			require.NoError(t, err)
			for i := range 200 {
				req, _ := http.NewRequest(http.MethodGet, "http://h/"+strconv.Itoa(i), nil)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err, "key %d", i)
				_ = resp.Body.Close()
				require.LessOrEqual(t, tr.pacer.Keys(), 100)
			}
		})
	}
	t.Run("nearly spent", func(t *testing.T) {
		t.Parallel()
		h := http.Header{"Ratelimit-Policy": {`"hourly";q=101;w=3600`}, "Ratelimit": {`"hourly";r=10;t=3600`}}
		tr, err := NewKeyedTransport(fieldsAnswer(h), openLimiter{}, byPath, WithClock(fakeclock.NewAnnouncing(epoch)), WithMaxKeys(100))
		require.NoError(t, err)
		for i := range 100 {
			req, _ := http.NewRequest(http.MethodGet, "http://h/"+strconv.Itoa(i), nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
		}
		req, _ := http.NewRequest(http.MethodGet, "http://h/new", nil)
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ratelimit.ErrTooManyKeys)
	})
}
