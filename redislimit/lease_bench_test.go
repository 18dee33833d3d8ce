package redislimit

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
)

// leaseBenchPolicies are the policies BenchmarkLease runs: every leasable
// algorithm, with limits that a few seconds at a few million decisions per
// second do not exhaust, so that the benchmark measures admissions.
func leaseBenchPolicies() []ratelimit.Policy {
	return []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(100_000_000, time.Second), 100_000_000),
		ratelimit.LeakyBucketPolicy(100_000_000, time.Microsecond),
		ratelimit.FixedWindowPolicy(1_000_000_000, time.Second),
		ratelimit.SlidingCounterPolicy(1_000_000_000, time.Second),
		ratelimit.QuotaPolicy(1<<50, ratelimit.Calendar{Unit: ratelimit.Daily}),
	}
}

// BenchmarkLease measures one hot key decided by 64 goroutines of one
// process, with leases (hotkey-64g) and, in the same run, without
// (nolease-hotkey-64g, one script per decision): decisions/s is the
// throughput, admitted/op the share admitted.
//
//	go test -run '^$' -bench BenchmarkLease -benchtime 1s -count 3 -cpu 2 ./redislimit
func BenchmarkLease(b *testing.B) {
	_, c := startRedis(b)
	for _, p := range leaseBenchPolicies() {
		for _, mode := range []struct {
			name string
			opts []Option
		}{
			{"hotkey-64g", []Option{WithLeases(LeaseConfig{})}},
			{"nolease-hotkey-64g", nil},
		} {
			l := mustNew(b, c, p, append(mode.opts, WithPrefix(uniquePrefix(b)), WithTimeout(time.Second))...)
			b.Run(p.Algorithm.String()+"/"+mode.name, func(b *testing.B) {
				benchHotKey(b, l)
			})
			if err := l.ReleaseLeases(bg()); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// benchHotKey runs AllowN on one key from benchWorkers goroutines.
func benchHotKey(b *testing.B, l *Limiter) {
	var errs, admitted atomic.Int64
	var first atomic.Value
	b.ReportAllocs()
	b.SetParallelism(max(benchWorkers/runtimeGOMAXPROCS(), 1))
	b.RunParallel(func(pb *testing.PB) {
		ctx := bg()
		ok := int64(0)
		for pb.Next() {
			d, err := l.AllowN(ctx, "hot", 1)
			if err != nil && errs.Add(1) == 1 {
				first.Store(err)
			}
			if d.Allowed {
				ok++
			}
		}
		admitted.Add(ok)
	})
	if n := errs.Load(); n > 0 {
		b.Fatalf("%d errors, first: %v", n, first.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
}
