// Command overload runs a service of known capacity on a loopback port
// and sends it three times the load it can serve, in real time: first
// unprotected, then behind httplimit's adaptive concurrency limit. Half
// way through each run the service loses half its workers, as when half
// a fleet is gone. A tenth of the requests are critical.
//
// The service has 40 workers and takes 50 ms a request, so it serves 800
// requests a second; requests beyond its workers wait in its queue, so
// that too much concurrency shows up as latency. Clients give up after
// 2 s. Each second the run prints what the limit was, the p99 latency of
// the requests served, the goodput (requests answered 200 within their
// deadline, per second) and how the critical requests fared.
//
//	go run ./examples/overload
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
)

func main() {
	phase := flag.Duration("phase", 6*time.Second, "length of each of the two phases of a run")
	flag.Parse()
	if err := run(os.Stdout, *phase); err != nil {
		log.Fatal(err)
	}
}

// The service and its load.
const (
	workers     = 40
	serviceTime = 50 * time.Millisecond
	capacity    = workers * int(time.Second/serviceTime) // requests a second
	overload    = 3
	deadline    = 2 * time.Second
	critShare   = 10 // one request in critShare is critical
)

// summary is what one run measured after its first phase's first second.
type summary struct {
	goodput  [2]float64 // per phase, as a share of that phase's capacity
	p99      [2]time.Duration
	critical float64 // share of critical requests served
}

func run(out io.Writer, phase time.Duration) error {
	base, err := measure(out, "unprotected", phase, nil)
	if err != nil {
		return err
	}
	lim, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Max: 200})
	if err != nil {
		return err
	}
	prot, err := measure(out, "adaptive", phase, lim)
	if err != nil {
		return err
	}
	head := fmt.Sprintf("(%d → %d)", workers, workers/2)
	fmt.Fprintf(out, "\n%-12s %-18s %-18s %s\n", "", "goodput "+head, "p99 "+head, "critical served")
	for _, r := range []struct {
		name string
		s    summary
	}{{"unprotected", base}, {"adaptive", prot}} {
		fmt.Fprintf(out, "%-12s %3.0f%% → %3.0f%%       %-6s → %-6s   %5.1f%%\n", r.name,
			100*r.s.goodput[0], 100*r.s.goodput[1], ms(r.s.p99[0]), ms(r.s.p99[1]), 100*r.s.critical)
	}
	return nil
}

// ms prints d in milliseconds, or "-" for 0: nothing was served.
func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// service is the simulated service: a queue in front of its workers.
type service struct {
	mu      sync.Mutex
	workers int             // how many there are now
	busy    int             // how many are serving
	queue   []chan struct{} // the waiting, first come first served
}

// setWorkers changes the number of workers; busy ones finish first.
func (s *service) setWorkers(n int) {
	s.mu.Lock()
	s.workers = n
	s.mu.Unlock()
}

// acquire waits for a worker, or until ctx is done.
func (s *service) acquire(ctx context.Context) bool {
	s.mu.Lock()
	if s.busy < s.workers {
		s.busy++
		s.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	s.queue = append(s.queue, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if i := slices.Index(s.queue, ch); i >= 0 {
			s.queue = slices.Delete(s.queue, i, i+1)
			return false
		}
		s.busy-- // granted as it gave up: give the worker on
		s.grantLocked()
		return false
	}
}

func (s *service) release() {
	s.mu.Lock()
	s.busy--
	s.grantLocked()
	s.mu.Unlock()
}

func (s *service) grantLocked() {
	for s.busy < s.workers && len(s.queue) > 0 {
		close(s.queue[0])
		s.queue = s.queue[1:]
		s.busy++
	}
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.acquire(r.Context()) {
		return
	}
	defer s.release()
	t := time.NewTimer(serviceTime)
	defer t.Stop()
	select {
	case <-t.C:
		io.WriteString(w, "ok\n")
	case <-r.Context().Done():
	}
}

// measure runs one protected or unprotected service under load for two
// phases and prints a line a second.
func measure(out io.Writer, name string, phase time.Duration, lim *ratelimit.Adaptive) (summary, error) {
	svc := &service{workers: workers}
	var h http.Handler = svc
	if lim != nil {
		mw, err := httplimit.New(nil, httplimit.WithAdaptive(lim, priority))
		if err != nil {
			return summary{}, err
		}
		h = mw.Handler(svc)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return summary{}, err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, MaxConnsPerHost: 0}}
	defer client.CloseIdleConnections()

	fmt.Fprintf(out, "%s: %d workers, %d ms a request, %d requests/s offered (%d× capacity)\n",
		name, workers, serviceTime.Milliseconds(), overload*capacity, overload)
	fmt.Fprintf(out, "%4s %7s %9s %9s %9s %10s\n", "s", "workers", "limit", "p99", "goodput", "critical")

	var (
		mu     sync.Mutex
		sec    = map[int]*second{}
		inFly  sync.WaitGroup
		start  = time.Now()
		total  = 2 * phase
		every  = time.Second / time.Duration(overload*capacity)
		halved atomic.Bool
	)
	record := func(at time.Time, lat time.Duration, ok, crit bool) {
		mu.Lock()
		defer mu.Unlock()
		i := int(at.Sub(start) / time.Second)
		s := sec[i]
		if s == nil {
			s = &second{}
			sec[i] = s
		}
		if ok {
			s.good++
			s.lat = append(s.lat, lat)
		}
		if crit {
			s.crit++
			if ok {
				s.critOK++
			}
		}
	}
	// The load: open loop, one request every 1/(3 × capacity) s.
	next := start
	for n := 0; ; n++ {
		next = next.Add(every)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		if time.Since(start) >= total {
			break
		}
		if !halved.Load() && time.Since(start) >= phase {
			halved.Store(true)
			svc.setWorkers(workers / 2)
		}
		crit := n%critShare == 0
		inFly.Add(1)
		go func() {
			defer inFly.Done()
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if crit {
				req.Header.Set("Priority", "critical")
			}
			t0 := time.Now()
			resp, err := client.Do(req)
			ok := false
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = err == nil && resp.StatusCode == http.StatusOK
			} else if !errors.Is(err, context.DeadlineExceeded) {
				log.Printf("request: %v", err)
			}
			record(time.Now(), time.Since(t0), ok, crit)
		}()
		if n%int(overload*capacity) == 0 && n > 0 {
			limit := "-"
			if lim != nil {
				limit = fmt.Sprint(lim.Limit())
			}
			printSecond(out, &mu, sec, int(time.Since(start)/time.Second)-1, halved.Load(), limit)
		}
	}
	inFly.Wait()
	printSecond(out, &mu, sec, int(total/time.Second)-1, true, "-")

	// The summary: each phase without its first second (the settling).
	var sum summary
	var crit, critOK int
	mu.Lock()
	defer mu.Unlock()
	for p := 0; p < 2; p++ {
		var lat []time.Duration
		good, secs := 0, 0
		for i := p*int(phase/time.Second) + 1; i < (p+1)*int(phase/time.Second); i++ {
			if s := sec[i]; s != nil {
				good += s.good
				lat = append(lat, s.lat...)
				crit += s.crit
				critOK += s.critOK
			}
			secs++
		}
		c := float64(capacity)
		if p == 1 {
			c /= 2
		}
		if secs > 0 {
			sum.goodput[p] = float64(good) / float64(secs) / c
		}
		sum.p99[p] = p99(lat)
	}
	if crit > 0 {
		sum.critical = float64(critOK) / float64(crit)
	}
	fmt.Fprintln(out)
	return sum, nil
}

// second is what one second of a run saw, by the time the answers came.
type second struct {
	good, crit, critOK int
	lat                []time.Duration
}

func printSecond(out io.Writer, mu *sync.Mutex, sec map[int]*second, i int, halved bool, limit string) {
	mu.Lock()
	defer mu.Unlock()
	s := sec[i]
	if s == nil || i < 0 {
		return
	}
	w := workers
	if halved {
		w /= 2
	}
	crit := "-"
	if s.crit > 0 {
		crit = fmt.Sprintf("%.0f%%", 100*float64(s.critOK)/float64(s.crit))
	}
	fmt.Fprintf(out, "%4d %7d %9s %9s %8d/s %10s\n", i+1, w, limit, ms(p99(s.lat)), s.good, crit)
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// priority reads the request's priority from its Priority field.
func priority(r *http.Request) ratelimit.Priority {
	if r.Header.Get("Priority") == "critical" {
		return ratelimit.PriorityCritical
	}
	return ratelimit.PriorityDefault
}
