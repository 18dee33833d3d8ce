package redislimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
)

// BenchmarkReserveSettle measures a reservation (ReserveN, then Settle
// with another cost: two scripts) against one AllowN (one script) on the
// same token bucket and the same local Redis, in one run: allown is the
// baseline. serial: one caller, latency per operation; parallel: 64
// goroutines, throughput. Keys cycle over 1000 clients; the bucket is large
// enough that every call admits.
func BenchmarkReserveSettle(b *testing.B) {
	_, c := startRedis(b)
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1_000_000_000, time.Second), 1_000_000_000)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	l := mustNew(b, c, p, WithPrefix(uniquePrefix(b)), WithTimeout(5*time.Second))
	allow := func(i int) {
		d, err := l.AllowN(bg(), keys[i%len(keys)], 10)
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
	reserve := func(i int) {
		r, err := l.ReserveN(bg(), keys[i%len(keys)], 10, time.Minute)
		if err != nil || !r.Allowed {
			b.Fatal(r.Decision, err)
		}
		if err := r.Settle(bg(), 7); err != nil {
			b.Fatal(err)
		}
	}
	for _, m := range []struct {
		name string
		op   func(int)
	}{{"allown", allow}, {"reservesettle", reserve}} {
		b.Run(m.name+"/serial", func(b *testing.B) {
			i := 0
			for b.Loop() {
				m.op(i)
				i++
			}
		})
		b.Run(m.name+"/parallel", func(b *testing.B) {
			b.SetParallelism(benchWorkers / max(1, runtimeGOMAXPROCS()))
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					m.op(i)
					i++
				}
			})
		})
	}
}
