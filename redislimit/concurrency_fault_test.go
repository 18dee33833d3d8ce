package redislimit

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit/internal/testkit/faultproxy"
	"github.com/stretchr/testify/require"
)

// The concurrency limit under network faults, and its fault-free histories
// checked against a model of the semaphore with porcupine.

// ccOp is an operation of the semaphore model: an acquisition of n
// permits (id names it, for its release) or the release of id.
type ccOp struct {
	release bool
	id, n   int
}

// ccOut is what an acquisition returned.
type ccOut struct {
	allowed   bool
	remaining int
}

// ccState is the model's state: the permits held and the ids holding
// them, sorted, as a string (comparable: porcupine compares states by ==).
type ccState struct {
	total int
	ids   string
}

func (s ccState) has(id int) bool {
	return strings.Contains(s.ids, ","+strconv.Itoa(id)+",")
}

func (s ccState) with(id int) string {
	ids := []int{id}
	for f := range strings.SplitSeq(strings.Trim(s.ids, ","), ",") {
		if f != "" {
			v, _ := strconv.Atoi(f)
			ids = append(ids, v)
		}
	}
	sort.Ints(ids)
	var b strings.Builder
	b.WriteString(",")
	for _, v := range ids {
		b.WriteString(strconv.Itoa(v))
		b.WriteString(",")
	}
	return b.String()
}

// semaphoreModel is a semaphore of limit permits: an acquisition of n is
// admitted iff total+n <= limit, and says the permits then free; a release
// gives back what its acquisition took.
func semaphoreModel(limit int, sizes map[int]int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return ccState{ids: ","} },
		Step: func(state, input, output any) (bool, any) {
			s, in := state.(ccState), input.(ccOp)
			if in.release {
				if !s.has(in.id) {
					return false, s
				}
				return true, ccState{total: s.total - sizes[in.id], ids: strings.Replace(s.ids, ","+strconv.Itoa(in.id)+",", ",", 1)}
			}
			out := output.(ccOut)
			if out.allowed {
				if s.total+in.n > limit || out.remaining != limit-s.total-in.n {
					return false, s
				}
				return true, ccState{total: s.total + in.n, ids: s.with(in.id)}
			}
			return s.total+in.n > limit && out.remaining == limit-s.total, s
		},
		DescribeOperation: func(input, output any) string {
			in := input.(ccOp)
			if in.release {
				return fmt.Sprintf("release #%d", in.id)
			}
			return fmt.Sprintf("acquire #%d n=%d -> %+v", in.id, in.n, output)
		},
	}
}

// TestConcurrencyLinearizable: the histories of 3 limiters (3 processes'
// worth, sharing one key) x 4 goroutines, each acquiring 1 or 2 permits
// of 3, holding them briefly and releasing, are accepted by the semaphore
// model; and the model refuses a history that overshoots.
func TestConcurrencyLinearizable(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	const limit, clients, perClient = 3, 12, 40
	prefix := uniquePrefix(t)
	ccs := make([]*Concurrency, 3)
	for i := range ccs {
		cc, err := NewConcurrency(c, limit, WithPrefix(prefix), WithTimeout(5*time.Second))
		require.NoError(t, err)
		defer cc.Close()
		ccs[i] = cc
	}
	var mu sync.Mutex
	var ops []porcupine.Operation
	sizes := map[int]int{}
	var seq atomic.Int64
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc := ccs[cl%len(ccs)]
			for i := range perClient {
				id := int(seq.Add(1))
				n := 1 + (cl+i)%2
				call := time.Now().UnixNano()
				p, d, err := cc.TryAcquire(bg(), "k", n)
				ret := time.Now().UnixNano()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				sizes[id] = n
				ops = append(ops, porcupine.Operation{ClientId: cl, Input: ccOp{id: id, n: n}, Call: call, Output: ccOut{d.Allowed, d.Remaining}, Return: ret})
				mu.Unlock()
				if !d.Allowed {
					continue
				}
				time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
				call = time.Now().UnixNano()
				p.Release()
				ret = time.Now().UnixNano()
				mu.Lock()
				ops = append(ops, porcupine.Operation{ClientId: cl, Input: ccOp{release: true, id: id}, Call: call, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	m := semaphoreModel(limit, sizes)
	res, _ := porcupine.CheckOperationsVerbose(m, ops, 60*time.Second)
	require.Equal(t, porcupine.Ok, res, "the history of %d operations is not a semaphore's", len(ops))
	admitted := 0
	for _, op := range ops {
		if o, ok := op.Output.(ccOut); ok && o.allowed {
			admitted++
		}
	}
	t.Logf("%d operations (%d admitted) accepted by the semaphore model", len(ops), admitted)

	// A history that overshoots: two holders of 2 of 3 permits at once.
	bad := []porcupine.Operation{
		{ClientId: 0, Input: ccOp{id: 1, n: 2}, Output: ccOut{true, 1}, Call: 0, Return: 1},
		{ClientId: 1, Input: ccOp{id: 2, n: 2}, Output: ccOut{true, 0}, Call: 2, Return: 3},
	}
	require.False(t, porcupine.CheckOperations(semaphoreModel(limit, map[int]int{1: 2, 2: 2}), bad), "the model accepts an overshoot")
}

// TestConcurrencyNetworkFaults: workers acquire and release through a
// fault proxy while a fault is on (latency past the timeout, a black
// hole, connection resets, replies lost after the script ran). No holder
// ever sees more than the limit in use, and once the fault is cleared
// every permit is free again within the expiry: a lost acquire reply
// leaves a member that expires, a lost release reply one that expires.
func TestConcurrencyNetworkFaults(t *testing.T) {
	t.Parallel()
	srv, direct := startRedis(t)
	const limit, expiry = 4, time.Second
	for _, sc := range []struct {
		name  string
		apply func(p *faultproxy.Proxy, stop <-chan struct{})
	}{
		{"latency", func(p *faultproxy.Proxy, _ <-chan struct{}) {
			p.Set(faultproxy.Down, faultproxy.Faults{Latency: 100 * time.Millisecond})
		}},
		{"blackhole", func(p *faultproxy.Proxy, _ <-chan struct{}) {
			p.Set(faultproxy.Up, faultproxy.Faults{BlackHole: true})
		}},
		{"reset", func(p *faultproxy.Proxy, stop <-chan struct{}) {
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
						p.ResetAll()
					}
				}
			}()
		}},
		{"lostreply", func(p *faultproxy.Proxy, _ <-chan struct{}) {
			p.MatchRequests("evalsha")
			p.DropReplies(3, faultproxy.RST)
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			proxy, err := faultproxy.New(srv.Addr())
			require.NoError(t, err)
			defer proxy.Close()
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			defer c.Close()
			prefix := uniquePrefix(t)
			cc, err := NewConcurrency(c, limit, WithPrefix(prefix), WithTimeout(50*time.Millisecond),
				WithFailurePolicy(FailClosed), WithBreaker(0), WithPermitExpiry(expiry))
			require.NoError(t, err)
			defer cc.Close()
			counter := prefix + "inuse"
			var admitted, failed, overshoot, lostHeld atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						p, d, err := cc.TryAcquire(bg(), "k", 1+(w+i)%2)
						if err != nil {
							failed.Add(1)
							time.Sleep(time.Millisecond)
							continue
						}
						if !d.Allowed {
							time.Sleep(time.Millisecond)
							continue
						}
						admitted.Add(1)
						n := int64(1 + (w+i)%2)
						if v := direct.IncrBy(bg(), counter, n).Val(); v > limit {
							overshoot.Add(1)
						}
						time.Sleep(time.Millisecond)
						if isLost(p) {
							lostHeld.Add(1)
						}
						direct.DecrBy(bg(), counter, n)
						p.Release()
					}
				}()
			}
			time.Sleep(200 * time.Millisecond) // fault-free
			faultStop := make(chan struct{})
			sc.apply(proxy, faultStop)
			time.Sleep(800 * time.Millisecond)
			close(faultStop)
			proxy.Clear()
			proxy.DropReplies(0, faultproxy.RST)
			proxy.MatchRequests("")
			time.Sleep(200 * time.Millisecond) // fault-free again
			close(stop)
			wg.Wait()
			require.Zero(t, overshoot.Load(), "a holder saw more than the limit in use")
			require.Positive(t, admitted.Load())
			// Everything held by a call whose reply was lost expires.
			start := time.Now()
			check, err := NewConcurrency(direct, limit, WithPrefix(prefix))
			require.NoError(t, err)
			defer check.Close()
			require.Eventually(t, func() bool {
				n, err := check.InFlight(bg(), "k")
				return err == nil && n == 0
			}, expiry+time.Second, 10*time.Millisecond, "permits leaked past their expiry")
			t.Logf("%s: %d admitted, %d failed, %d lost while held, free again %v after the run",
				sc.name, admitted.Load(), failed.Load(), lostHeld.Load(), time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestConcurrencyLostReplyGivenBack: an acquisition whose reply is lost
// after the script ran holds its permits on Redis for no one; the next
// renewal round (a third of the expiry) removes them, well before they
// would expire. So does a release whose reply is lost.
func TestConcurrencyLostReplyGivenBack(t *testing.T) {
	t.Parallel()
	srv, direct := startRedis(t)
	proxy, err := faultproxy.New(srv.Addr())
	require.NoError(t, err)
	defer proxy.Close()
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	const expiry = 6 * time.Second
	prefix := uniquePrefix(t)
	cc, err := NewConcurrency(c, 2, WithPrefix(prefix), WithTimeout(200*time.Millisecond), WithBreaker(0),
		WithFailurePolicy(FailClosed), WithPermitExpiry(expiry))
	require.NoError(t, err)
	defer cc.Close()
	check, err := NewConcurrency(direct, 2, WithPrefix(prefix))
	require.NoError(t, err)
	defer check.Close()
	inFlight := func() int {
		n, err := check.InFlight(bg(), "k")
		require.NoError(t, err)
		return n
	}

	// Load the scripts (a first EVALSHA is answered NOSCRIPT, unrun).
	w, _, err := cc.TryAcquire(bg(), "warm", 1)
	require.NoError(t, err)
	w.Release()
	proxy.MatchRequests("evalsha")
	proxy.DropReplies(1, faultproxy.RST)
	_, _, err = cc.TryAcquire(bg(), "k", 2)
	require.ErrorIs(t, err, ErrUnavailable)
	proxy.DropReplies(0, faultproxy.RST)
	require.Equal(t, 2, inFlight(), "the script ran: its member is held for no one")
	start := time.Now()
	require.Eventually(t, func() bool { return inFlight() == 0 }, expiry/2, 10*time.Millisecond)
	t.Logf("a lost acquire reply's permits were given back %v later (expiry %v)", time.Since(start).Round(time.Millisecond), expiry)

	p, d, err := cc.TryAcquire(bg(), "k", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	proxy.DropReplies(1, faultproxy.RST)
	p.Release()
	proxy.DropReplies(0, faultproxy.RST)
	proxy.MatchRequests("")
	start = time.Now()
	require.Eventually(t, func() bool { return inFlight() == 0 }, expiry/2, 10*time.Millisecond)
	t.Logf("a lost release reply's permits were free %v later (expiry %v)", time.Since(start).Round(time.Millisecond), expiry)
}
