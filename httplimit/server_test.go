package httplimit

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// TestLoopbackConcurrent runs a real server on a loopback port and many
// concurrent real clients: per API key exactly the limit is admitted, the
// rest get 429, every request gets exactly one answer, and the handler
// runs exactly once per admitted request.
func TestLoopbackConcurrent(t *testing.T) {
	t.Parallel()
	const (
		keys      = 4
		perKey    = 37  // admitted per key per window
		perIP     = 120 // a second, looser dimension over all keys
		clients   = 64
		perClient = 12 // requests per client: 768 in all
	)
	mock := fakeclock.New(epoch) // frozen time: one window for the whole test
	byKey := newKeyed(t, ratelimit.SlidingLogPolicy(perKey, time.Minute), mock)
	byIP := newKeyed(t, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), perIP), mock)
	var served [keys]atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var k int
		_, _ = fmt.Sscanf(r.Header.Get("X-API-Key"), "key-%d", &k)
		served[k].Add(1)
		_, _ = io.WriteString(w, "ok")
	})
	mw := newMW(t, []Limit{
		{Name: "key", Key: KeyByHeader("X-API-Key"), Limiter: byKey},
		{Name: "ip", Key: KeyByIP(), Limiter: byIP},
	}, WithClock(mock))
	mux := http.NewServeMux()
	mux.Handle("GET /work", mw.Handler(handler))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		admitted [keys]int
		wg       sync.WaitGroup
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := c % keys
			for range perClient {
				req, _ := http.NewRequest("GET", srv.URL+"/work", nil)
				req.Header.Set("X-API-Key", fmt.Sprintf("key-%d", key))
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("request: %v", err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				if resp.StatusCode == 200 {
					admitted[key]++
					if string(body) != "ok" {
						t.Errorf("200 body %q", body)
					}
				} else if resp.Header.Get("Retry-After") == "" {
					t.Errorf("%d without Retry-After", resp.StatusCode)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	total := clients * perClient
	wantOK := min(keys*perKey, perIP)
	if statuses[200] != wantOK || statuses[429] != total-wantOK || len(statuses) != 2 {
		t.Errorf("statuses = %v, want %d x 200 and %d x 429", statuses, wantOK, total-wantOK)
	}
	var handled int64
	for k := range keys {
		handled += served[k].Load()
		if int64(admitted[k]) != served[k].Load() {
			t.Errorf("key %d: clients saw %d admitted, handler ran %d times", k, admitted[k], served[k].Load())
		}
		if admitted[k] > perKey {
			t.Errorf("key %d: %d admitted, limit %d", k, admitted[k], perKey)
		}
	}
	if handled != int64(wantOK) {
		t.Errorf("handler ran %d times, want %d", handled, wantOK)
	}
}

// TestLoopbackWindows: with a single dimension, exactly the limit passes in
// each window, across several windows on the mock clock.
func TestLoopbackWindows(t *testing.T) {
	t.Parallel()
	const limit, clients, perClient = 25, 40, 3
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(limit, time.Second), mock)
	var handled atomic.Int64
	srv := httptest.NewServer(newMW(t, []Limit{{Key: KeyByIP(), Limiter: lim}}, WithClock(mock)).Handler(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handled.Add(1) })))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	t.Cleanup(client.CloseIdleConnections)
	for window := range 3 {
		var ok, denied atomic.Int64
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perClient {
					resp, err := client.Get(srv.URL)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					switch resp.StatusCode {
					case 200:
						ok.Add(1)
					case 429:
						denied.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if ok.Load() != limit || denied.Load() != clients*perClient-limit {
			t.Errorf("window %d: %d admitted, %d denied; want %d and %d", window, ok.Load(), denied.Load(), limit, clients*perClient-limit)
		}
		mock.Add(time.Second)
	}
	if handled.Load() != 3*limit {
		t.Errorf("handler ran %d times, want %d", handled.Load(), 3*limit)
	}
}
