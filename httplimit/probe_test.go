package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// gateServer is a loopback server that holds every request until the test
// answers it: each arrival is announced on arrived, and answered by the
// function the test sends on its reply channel.
type gateServer struct {
	srv     *httptest.Server
	hits    atomic.Int64
	arrived chan gateRequest
}

type gateRequest struct {
	reply chan func(w http.ResponseWriter) // nil func: hang up (a network error for the client)
}

func startGate(t *testing.T) *gateServer {
	g := &gateServer{arrived: make(chan gateRequest, 64)}
	quit := make(chan struct{})
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.hits.Add(1)
		req := gateRequest{reply: make(chan func(http.ResponseWriter), 1)}
		g.arrived <- req
		select {
		case f := <-req.reply:
			if f == nil {
				panic(http.ErrAbortHandler) // the connection is cut: no answer
			}
			f(w)
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(g.srv.Close)
	t.Cleanup(func() { close(quit) }) // first: the held requests end
	return g
}

// next returns the next request to arrive, failing t after a few seconds.
func (g *gateServer) next(t *testing.T) gateRequest {
	t.Helper()
	select {
	case r := <-g.arrived:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no request arrived")
		return gateRequest{}
	}
}

// none fails t if a request is waiting to be answered or arrives within a
// short while.
func (g *gateServer) none(t *testing.T) {
	t.Helper()
	select {
	case <-g.arrived:
		t.Fatalf("a request reached the server; %d so far", g.hits.Load())
	case <-time.After(50 * time.Millisecond):
	}
}

// TestTransportCappedPauseEndsWithOneProbe: a server asking for a day's
// pause, capped at 10 s (WithMaxPause): when the cap has passed, one
// request goes out and the others wait for its answer, then go by what it
// says. Before, all 20 waiting requests reached the server at once.
func TestTransportCappedPauseEndsWithOneProbe(t *testing.T) {
	t.Parallel()
	const waiting = 20
	for _, tc := range []struct {
		name  string
		pause func(w http.ResponseWriter) // the first answer
	}{
		{"retry-after", answer(http.StatusTooManyRequests, "Retry-After", "86400")},
		{"spent quota", answer(http.StatusOK, "RateLimit", `"daily";r=0;t=86400`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t)
			clk := fakeclock.NewAnnouncing(epoch)
			tr, err := NewTransport(nil, nil, WithClock(clk), WithMaxPause(10*time.Second))
			require.NoError(t, err)
			first := roundTrip(tr, mustGet(t, g.srv.URL))
			g.next(t).reply <- tc.pause
			require.NoError(t, (<-first).err)

			ctx, cancel := context.WithCancel(context.Background())
			results := make(chan result, waiting)
			for range waiting {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.srv.URL, nil)
				go func() { results <- <-roundTrip(tr, req) }()
			}
			for range waiting {
				require.Equal(t, 10*time.Second, clk.Next(t), "each waits for the capped pause")
			}
			clk.Add(10 * time.Second)
			probe := g.next(t)
			g.none(t)
			assert.Equal(t, int64(2), g.hits.Load(), "one probe when the cap has passed")
			// The probe's answer: 3 left for a minute. Three go, the rest
			// wait for the reset.
			probe.reply <- answer(http.StatusOK, "RateLimit", `"daily";r=3;t=60`)
			for range 3 {
				g.next(t).reply <- answer(http.StatusOK, "RateLimit", `"daily";r=0;t=60`)
			}
			for range 4 {
				r := <-results
				require.NoError(t, r.err)
				assert.Equal(t, http.StatusOK, r.resp.StatusCode)
			}
			g.none(t)
			assert.Equal(t, int64(5), g.hits.Load(), "the probe and the three its answer allowed")
			cancel() // the other 16 wait for the reset
			for range waiting - 4 {
				assert.ErrorIs(t, (<-results).err, context.Canceled)
			}
		})
	}
}

// TestTransportProbeWithoutAnswer: when the probe gets no answer (the
// connection cut, its context cancelled) the next waiting request probes,
// one at a time; a probe that hangs holds the others only as long again
// as the pause it ended, then the next probes.
func TestTransportProbeWithoutAnswer(t *testing.T) {
	t.Parallel()
	for _, failure := range []string{"cut", "cancelled", "hang"} {
		t.Run(failure, func(t *testing.T) {
			t.Parallel()
			g := startGate(t)
			clk := fakeclock.NewAnnouncing(epoch)
			// No connection reused, so that net/http does not send a
			// request again on a fresh one when its connection is cut.
			base := &http.Transport{DisableKeepAlives: true}
			t.Cleanup(base.CloseIdleConnections)
			tr, err := NewTransport(base, nil, WithClock(clk))
			require.NoError(t, err)
			first := roundTrip(tr, mustGet(t, g.srv.URL))
			g.next(t).reply <- answer(http.StatusTooManyRequests, "Retry-After", "5")
			require.NoError(t, (<-first).err)

			// The probe-to-be has a context of its own; two others wait.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.srv.URL, nil)
			probeDone := roundTrip(tr, req)
			require.Equal(t, 5*time.Second, clk.Next(t))
			others := make(chan result, 2)
			for range 2 {
				go func() { others <- <-roundTrip(tr, mustGet(t, g.srv.URL)) }()
				require.Equal(t, 5*time.Second, clk.Next(t))
			}
			clk.Add(5 * time.Second)
			probe := g.next(t)
			// The two others wait for the probe's answer, at most 5 s.
			for range 2 {
				require.Equal(t, 5*time.Second, clk.Next(t))
			}
			g.none(t)
			switch failure {
			case "cut":
				probe.reply <- nil
				assert.Error(t, (<-probeDone).err)
			case "cancelled":
				cancel()
				assert.ErrorIs(t, (<-probeDone).err, context.Canceled)
			case "hang":
				clk.Add(5 * time.Second)
			}
			second := g.next(t)
			g.none(t)
			assert.Equal(t, int64(3), g.hits.Load(), "the next probe, alone")
			second.reply <- answer(http.StatusOK)
			g.next(t).reply <- answer(http.StatusOK)
			for range 2 {
				r := <-others
				require.NoError(t, r.err)
				assert.Equal(t, http.StatusOK, r.resp.StatusCode)
			}
			if failure == "hang" {
				probe.reply <- answer(http.StatusOK)
				require.NoError(t, (<-probeDone).err)
			}
		})
	}
}

func mustGet(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return req
}
