package httplimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// bucketServer is this package's own middleware over a token bucket of 5
// refilling 1 a second, on a clock shared with the client. While holding,
// it keeps every request it has decided on (admitted or refused) until the
// test releases it, so that the answers come back in an order of the
// test's choice.
type bucketServer struct {
	srv *httptest.Server

	mu      sync.Mutex
	hold    bool
	held    []heldRequest
	arrived chan struct{} // one per request held
	served  map[int]int   // status -> count
}

// heldRequest is a request the server has decided on and holds.
type heldRequest struct {
	status    int
	remaining int // as the middleware reported it
	release   chan struct{}
}

// startBucketServer starts a bucketServer on loopback; keyed charges every
// client address apart (KeyByIP), otherwise all requests share one key.
func startBucketServer(t *testing.T, clk ratelimit.Clock, keyed bool) *bucketServer {
	t.Helper()
	lim, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 5), ratelimit.WithClock(clk))
	require.NoError(t, err)
	key := func(*http.Request) (string, bool) { return "all", true }
	if keyed {
		key = KeyByIP()
	}
	s := &bucketServer{arrived: make(chan struct{}, 64), served: map[int]int{}}
	denied := func(w http.ResponseWriter, r *http.Request, d Denial) {
		s.wait(w, http.StatusTooManyRequests)
		WriteDenied(w, r, d)
	}
	mw, err := New([]Limit{{Name: "bucket", Key: key, Limiter: lim}}, WithClock(clk), WithDeniedHandler(denied))
	require.NoError(t, err)
	limited := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.wait(w, http.StatusOK)
		_, _ = w.Write([]byte("ok"))
	}))
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		limited.ServeHTTP(rec, r)
		s.mu.Lock()
		s.served[rec.status]++
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// wait holds the request, when the server holds, until it is released.
func (s *bucketServer) wait(w http.ResponseWriter, status int) {
	s.mu.Lock()
	if !s.hold {
		s.mu.Unlock()
		return
	}
	rem, _ := strconv.Atoi(w.Header().Get("X-RateLimit-Remaining"))
	h := heldRequest{status: status, remaining: rem, release: make(chan struct{})}
	s.held = append(s.held, h)
	s.mu.Unlock()
	s.arrived <- struct{}{}
	<-h.release
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// The orders in which a test releases held answers.
const (
	orderCounted  = "counted"  // admitted ones as counted (most left first), refusals last
	orderReverse  = "reverse"  // admitted ones least left first, then refusals
	orderRefusals = "refusals" // refusals first, then admitted ones least left first
)

// sortHeld orders held by order.
func sortHeld(held []heldRequest, order string) {
	rank := func(h heldRequest) int {
		refused := h.status != http.StatusOK
		switch order {
		case orderCounted:
			if refused {
				return 100
			}
			return 10 - h.remaining
		case orderReverse:
			if refused {
				return 100
			}
			return h.remaining
		default:
			if refused {
				return -1
			}
			return h.remaining
		}
	}
	sort.SliceStable(held, func(i, j int) bool { return rank(held[i]) < rank(held[j]) })
}

// blindRound sends n requests at once through tr, has the server hold them
// all once decided, then releases them in order, each read by the
// transport before the next is released. It returns the statuses in the
// order released.
func (s *bucketServer) blindRound(t *testing.T, tr http.RoundTripper, n int, order string) []int {
	t.Helper()
	s.mu.Lock()
	s.hold = true
	s.mu.Unlock()
	results := make([]chan result, n)
	for i := range results {
		req, _ := http.NewRequest(http.MethodGet, s.srv.URL, nil)
		results[i] = roundTrip(tr, req)
	}
	for range n {
		select {
		case <-s.arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("the server did not see every request")
		}
	}
	s.mu.Lock()
	s.hold = false
	held := s.held
	s.held = nil
	s.mu.Unlock()
	sortHeld(held, order)
	var statuses []int
	for _, h := range held {
		close(h.release)
		// Whichever request it was, one more RoundTrip returns.
		deadline := time.Now().Add(5 * time.Second)
		for returned := false; !returned; {
			for i, ch := range results {
				if ch == nil {
					continue
				}
				select {
				case r := <-ch:
					require.NoError(t, r.err)
					statuses = append(statuses, r.resp.StatusCode)
					results[i] = nil
					returned = true
				default:
				}
			}
			if !returned {
				require.False(t, time.Now().After(deadline), "no answer came back")
				time.Sleep(time.Millisecond)
			}
		}
	}
	return statuses
}

// TestPacingTokenBucketReorderedAnswers: a blind round of requests answered
// by a token bucket of 5 (refill 1/s) in an order of the test's choice,
// then rounds sent together: none of the later requests may be refused,
// since every one is sent after the transport read answers. Before, with
// five answered in reverse order of the server's count, the transport
// took the last answer read (the first counted: 4 left, full in 1 s) and
// at that reset restored the whole limit of 5 while the bucket held 1
// token: 4 of the next 5 were answered 429. With ten (five refused) and
// the refusals read last, their reset (the Retry-After, 1 s) restored all
// 5 too. Keyed or not; the test does not depend on what the 429s' t says.
func TestPacingTokenBucketReorderedAnswers(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		for _, tc := range []struct {
			blind int
			order string
		}{
			{5, orderReverse}, {5, orderCounted},
			{10, orderReverse}, {10, orderCounted}, {10, orderRefusals},
		} {
			t.Run(fmt.Sprintf("keyed=%v/blind=%d/%s", keyed, tc.blind, tc.order), func(t *testing.T) {
				t.Parallel()
				clk := fakeclock.NewAnnouncing(pacingAligned)
				s := startBucketServer(t, clk, keyed)
				probe := &pacingProbe{base: s.srv.Client().Transport}
				tr, err := NewTransport(probe, nil, WithClock(clk))
				require.NoError(t, err)

				statuses := s.blindRound(t, tr, tc.blind, tc.order)
				require.Len(t, statuses, tc.blind)
				probe.responded.Store(true)
				blindRefused, _, _ := probe.refusals()
				require.Equal(t, tc.blind-5, blindRefused, "the bucket admits 5 of the blind round")

				// Rounds of five and of ten, sent together, all after
				// answers were read.
				run := drivePacing(t, clk, tr, s.srv.URL, 5, 1)
				run2 := drivePacing(t, clk, tr, s.srv.URL, 10, 2)
				assert.Empty(t, run.errs)
				assert.Empty(t, run2.errs)
				_, informed, _ := probe.refusals()
				if !assert.Zero(t, informed, "429s after the transport had read an answer") {
					for _, a := range probe.attempts {
						t.Log(a.blind, a.log)
					}
				}
				assert.Equal(t, 5, run.ok())
				assert.Equal(t, 20, run2.ok())
			})
		}
	}
}

// TestPacingTokenBucketConcurrent: ten goroutines, five requests each,
// through one transport to the token bucket: only requests sent before
// any answer came back may be refused (the first ten, of which the bucket
// admits five).
func TestPacingTokenBucketConcurrent(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			t.Parallel()
			clk := fakeclock.NewAnnouncing(pacingAligned)
			s := startBucketServer(t, clk, keyed)
			probe := &pacingProbe{base: s.srv.Client().Transport}
			tr, err := NewTransport(probe, nil, WithClock(clk), WithRetries(5))
			require.NoError(t, err)
			run := drivePacing(t, clk, tr, s.srv.URL, 10, 5)
			assert.Empty(t, run.errs)
			blind, informed, blindSent := probe.refusals()
			t.Logf("%d blind attempts, %d refused; %d refused after an answer; server: %v", blindSent, blind, informed, s.served)
			if !assert.Zero(t, informed, "429s after the transport had read an answer") {
				for _, a := range probe.attempts {
					t.Log(a.blind, a.log)
				}
			}
			assert.LessOrEqual(t, blind, max(0, blindSent-5), "429s among blind attempts beyond what the bucket forces")
			assert.Equal(t, 50, run.ok())
		})
	}
}
