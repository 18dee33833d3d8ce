package ratelimit

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"
)

// Fuzz input layout: a 5-byte configuration, then 3 bytes per operation.
//
//	cfg[0]   limit/capacity = 1 + cfg[0]%8
//	cfg[1]   token bucket refill = 1 + cfg[1]%8
//	cfg[2:4] period (per, leakEvery, window) = 1 + uint16 ns
//	cfg[4]   start offset, x 7919ns
//	op[0]    time advance, multiplied by a scale chosen by op[1]&3
//	op[1]    bit 2: peek (commit=false) instead of AllowN
//	op[2]    n = op[2] % (limit+3) - 1, so -1 .. limit+1
const (
	fuzzCfgLen = 5
	fuzzOpLen  = 3
	fuzzMaxOps = 256
)

var fuzzScales = [4]int64{1, 61, 997, 65537}

type fuzzConfig struct {
	limit  int
	refill int
	period time.Duration
	start  int64
}

type fuzzOp struct {
	advance int64
	peek    bool
	n       int
}

func decodeFuzz(data []byte) (fuzzConfig, []fuzzOp, bool) {
	if len(data) < fuzzCfgLen {
		return fuzzConfig{}, nil, false
	}
	cfg := fuzzConfig{
		limit:  1 + int(data[0]%8),
		refill: 1 + int(data[1]%8),
		period: time.Duration(1 + int64(binary.LittleEndian.Uint16(data[2:4]))),
		start:  1_699_999_200_000_000_000 + int64(data[4])*7919,
	}
	var ops []fuzzOp
	for rest := data[fuzzCfgLen:]; len(rest) >= fuzzOpLen && len(ops) < fuzzMaxOps; rest = rest[fuzzOpLen:] {
		ops = append(ops, fuzzOp{
			advance: int64(rest[0]) * fuzzScales[rest[1]&3],
			peek:    rest[1]&4 != 0,
			n:       int(rest[2]%uint8(cfg.limit+3)) - 1,
		})
	}
	return cfg, ops, true
}

// encodeFuzz builds a fuzz input, for the seed corpus.
func encodeFuzz(limit, refill int, period uint16, start byte, ops ...[3]byte) []byte {
	data := []byte{byte(limit - 1), byte(refill - 1), 0, 0, start}
	binary.LittleEndian.PutUint16(data[2:4], period-1)
	for _, op := range ops {
		data = append(data, op[:]...)
	}
	return data
}

// admission is one admitted AllowN.
type admission struct {
	at, n int64
}

// fuzzAlgo is one algorithm under the fuzzer, with the bound its admitted
// events must respect.
type fuzzAlgo struct {
	name       string
	s          sim
	exactRetry bool
	// bound returns a description of the violation, or "", after an
	// admission at now (the last entry of hist).
	bound func(hist []admission, now int64) string
	// remaining is an independent model of the quota: how many events the
	// semantics in DESIGN.md admit at now after the admissions in hist
	// (times never decrease).
	remaining func(hist []admission, now int64) int64
}

func fuzzAlgos(t *testing.T, cfg fuzzConfig) []fuzzAlgo {
	limit := int64(cfg.limit)
	period := int64(cfg.period)
	return []fuzzAlgo{
		{
			name: "tokenbucket", exactRetry: true,
			s:         newTokenBucketSim(t, cfg.limit, cfg.refill, cfg.period),
			remaining: tokenBucketModel(limit, int64(cfg.refill), period),
			// In any [t1, t2]: at most capacity + refill*(t2-t1)/per.
			bound: func(hist []admission, now int64) string {
				var got int64
				for i := len(hist) - 1; i >= 0; i-- {
					got += hist[i].n
					span := now - hist[i].at
					if most := limit + int64(cfg.refill)*span/period; got > most {
						return fmt.Sprintf("%d admitted in [%d, %d] (%dns), bound %d", got, hist[i].at, now, span, most)
					}
				}
				return ""
			},
		},
		{
			name: "leakybucket", exactRetry: true,
			s:         newLeakyBucketSim(t, cfg.limit, cfg.period),
			remaining: leakyBucketModel(limit, period),
			// In any [t1, t2]: at most capacity + (t2-t1)/leakEvery.
			bound: func(hist []admission, now int64) string {
				var got int64
				for i := len(hist) - 1; i >= 0; i-- {
					got += hist[i].n
					span := now - hist[i].at
					if most := limit + span/period; got > most {
						return fmt.Sprintf("%d admitted in [%d, %d] (%dns), bound %d", got, hist[i].at, now, span, most)
					}
				}
				return ""
			},
		},
		{
			name: "fixedwindow", exactRetry: true,
			s:     newFixedWindowSim(t, cfg.limit, cfg.period),
			bound: alignedWindowBound(limit, period),
			remaining: func(hist []admission, now int64) int64 {
				return limit - countSince(hist, floorDiv(now, period)*period-1)
			},
		},
		{
			name: "slidinglog", exactRetry: true,
			s: newSlidingLogSim(t, cfg.limit, cfg.period),
			remaining: func(hist []admission, now int64) int64 {
				return limit - countSince(hist, now-period)
			},
			// In any half-open (t-window, t]: at most limit.
			bound: func(hist []admission, now int64) string {
				var got int64
				for i := len(hist) - 1; i >= 0 && hist[i].at > now-period; i-- {
					got += hist[i].n
				}
				if got > limit {
					return fmt.Sprintf("%d admitted in (%d, %d], limit %d", got, now-period, now, limit)
				}
				return ""
			},
		},
		{
			name: "slidingcounter", exactRetry: false,
			s:         newSlidingCounterSim(t, cfg.limit, cfg.period),
			remaining: slidingCounterModel(limit, period),
			// The estimate includes the current window's count, so each
			// aligned window holds at most limit (and any interval of one
			// window length at most 2x limit).
			bound: alignedWindowBound(limit, period),
		},
		{
			// A daily quota in a zone 1h59m59s ahead of UTC: its days
			// start at 22:00:01 UTC, a second after the fuzzer's start,
			// so timelines cross a boundary. The model is plain modular
			// arithmetic, independent of internal/calendar.
			name: "quota", exactRetry: true,
			s: newQuotaSim(t, cfg.limit, Calendar{Unit: Daily, Location: time.FixedZone("fuzz", fuzzQuotaOffset)}),
			remaining: func(hist []admission, now int64) int64 {
				return limit - countSince(hist, fuzzQuotaStart(now)-1)
			},
			bound: func(hist []admission, now int64) string {
				start := fuzzQuotaStart(now)
				if got := countSince(hist, start-1); got > limit {
					return fmt.Sprintf("%d admitted in the day from %d, limit %d", got, start, limit)
				}
				return ""
			},
		},
	}
}

// fuzzQuotaOffset is the UTC offset of the fuzzer's quota zone, in
// seconds: its midnight is 22:00:01 UTC.
const fuzzQuotaOffset = 2*3600 - 1

// fuzzQuotaStart returns the start of the fuzzer's quota day containing
// now, in Unix ns.
func fuzzQuotaStart(now int64) int64 {
	const day = int64(24 * time.Hour)
	midnight := -int64(fuzzQuotaOffset) * int64(time.Second) // a local midnight, in Unix ns
	return midnight + floorDiv(now-midnight, day)*day
}

// countSince returns the events admitted after t.
func countSince(hist []admission, t int64) int64 {
	var c int64
	for i := len(hist) - 1; i >= 0 && hist[i].at > t; i-- {
		c += hist[i].n
	}
	return c
}

// tokenBucketModel replays hist in exact rationals: the bucket starts full,
// gains refill/per tokens per ns up to capacity, and loses what is
// admitted. The quota is the whole tokens held.
func tokenBucketModel(capacity, refill, per int64) func([]admission, int64) int64 {
	return func(hist []admission, now int64) int64 {
		tokens := new(big.Rat).SetInt64(capacity)
		full := new(big.Rat).SetInt64(capacity)
		last := int64(math.MinInt64)
		step := func(t int64) {
			if last != math.MinInt64 && t > last {
				tokens.Add(tokens, new(big.Rat).SetFrac(big.NewInt(refill*(t-last)), big.NewInt(per)))
				if tokens.Cmp(full) > 0 {
					tokens.Set(full)
				}
			}
			last = t
		}
		for _, a := range hist {
			step(a.at)
			tokens.Sub(tokens, new(big.Rat).SetInt64(a.n))
		}
		step(now)
		if tokens.Sign() <= 0 {
			return 0
		}
		return new(big.Int).Quo(tokens.Num(), tokens.Denom()).Int64()
	}
}

// leakyBucketModel replays hist: each event adds leakEvery ns of level,
// the level drains 1ns per ns, and the quota is the whole events that
// still fit in capacity x leakEvery.
func leakyBucketModel(capacity, every int64) func([]admission, int64) int64 {
	return func(hist []admission, now int64) int64 {
		var level, last int64
		for _, a := range hist {
			level = max(level-(a.at-last), 0) + a.n*every
			last = a.at
		}
		if len(hist) > 0 {
			level = max(level-(now-last), 0)
		}
		return (capacity*every - level) / every
	}
}

// slidingCounterModel computes the largest m >= 0 with
// prev*(w-e)/w + cur + m <= limit from the admissions in the current and
// previous aligned windows.
func slidingCounterModel(limit, w int64) func([]admission, int64) int64 {
	return func(hist []admission, now int64) int64 {
		k := floorDiv(now, w)
		start := k * w
		cur := countSince(hist, start-1)
		prev := countSince(hist, start-w-1) - cur
		e := now - start
		// (cur+m)*w + prev*(w-e) <= limit*w
		m := floorDiv(limit*w-prev*(w-e), w) - cur
		return max(m, 0)
	}
}

// alignedWindowBound checks at most limit admitted per window aligned to
// the Unix epoch.
func alignedWindowBound(limit, window int64) func([]admission, int64) string {
	return func(hist []admission, now int64) string {
		k := floorDiv(now, window)
		var got int64
		for i := len(hist) - 1; i >= 0 && floorDiv(hist[i].at, window) == k; i-- {
			got += hist[i].n
		}
		if got > limit {
			return fmt.Sprintf("%d admitted in window [%d, %d), limit %d", got, k*window, (k+1)*window, limit)
		}
		return ""
	}
}

// checkFuzzOps runs ops on a and checks every invariant after each.
func checkFuzzOps(t *testing.T, cfg fuzzConfig, a fuzzAlgo, ops []fuzzOp) {
	t.Helper()
	s := a.s
	limit := int(s.limit())
	now := cfg.start
	var hist []admission
	fail := func(i int, op fuzzOp, format string, args ...any) {
		t.Helper()
		verb := "AllowN"
		if op.peek {
			verb = "Peek"
		}
		t.Fatalf("%s (limit %d, refill %d, period %v): op %d %s(%d) at %d: %s",
			a.name, cfg.limit, cfg.refill, cfg.period, i, verb, op.n, now-cfg.start, fmt.Sprintf(format, args...))
	}
	for i, op := range ops {
		now += op.advance
		before := s.clone().quota(now)
		peeked := s.clone().allowN(now, op.n, false)
		d := s.allowN(now, op.n, !op.peek)
		after := s.clone().quota(now)

		if d != peeked {
			fail(i, op, "= %+v, but Peek = %+v", d, peeked)
		}
		if d.Limit != limit {
			fail(i, op, "= %+v, Limit want %d", d, limit)
		}
		if d.Remaining < 0 || d.Remaining > d.Limit {
			fail(i, op, "= %+v, Remaining out of [0, Limit]", d)
		}
		if d.ResetAfter < 0 {
			fail(i, op, "= %+v, negative ResetAfter", d)
		}
		if (d.Remaining == d.Limit) != (d.ResetAfter == 0) {
			fail(i, op, "= %+v, full quota iff ResetAfter 0", d)
		}
		valid := op.n >= 1 && op.n <= limit
		switch {
		case !valid:
			if d.Allowed || d.RetryAfter != RetryNever {
				fail(i, op, "= %+v, want a denial with RetryNever", d)
			}
			if d.Remaining != before.Remaining || d.ResetAfter != before.ResetAfter {
				fail(i, op, "= %+v, want the quota %+v", d, before)
			}
		case d.Allowed:
			if d.RetryAfter != 0 {
				fail(i, op, "= %+v, RetryAfter on an allow", d)
			}
			if d.Remaining != before.Remaining-op.n {
				fail(i, op, "= %+v, Remaining want %d - %d", d, before.Remaining, op.n)
			}
		default:
			if d.RetryAfter <= 0 || d.RetryAfter == RetryNever {
				fail(i, op, "= %+v, RetryAfter must be finite and > 0 on a denial", d)
			}
			if d.Remaining != before.Remaining || d.ResetAfter != before.ResetAfter {
				fail(i, op, "= %+v, want the quota %+v", d, before)
			}
			if d.Remaining >= op.n {
				fail(i, op, "= %+v, denied with Remaining >= n", d)
			}
		}

		// The state after: AllowN changed it only by admitting; Peek and
		// denials not at all.
		if d.Allowed && !op.peek {
			if after.Remaining != d.Remaining || after.ResetAfter != d.ResetAfter {
				fail(i, op, "= %+v, but Peek(0) right after = %+v", d, after)
			}
			hist = append(hist, admission{at: now, n: int64(op.n)})
			if msg := a.bound(hist, now); msg != "" {
				fail(i, op, "= %+v: %s", d, msg)
			}
		} else if after != before {
			fail(i, op, "= %+v changed the quota from %+v to %+v", d, before, after)
		}

		// Remaining matches the independent model of the semantics.
		if want := a.remaining(hist, now); int64(after.Remaining) != want {
			fail(i, op, "= %+v, Peek(0) after = %+v, model says Remaining %d", d, after, want)
		}

		// Remaining is exactly what would be admitted now.
		if r := after.Remaining; r > 0 {
			if got := s.clone().allowN(now, r, false); !got.Allowed {
				fail(i, op, "Remaining %d, but Peek(%d) = %+v", r, r, got)
			}
		}
		if r := after.Remaining; r < limit {
			if got := s.clone().allowN(now, r+1, false); got.Allowed {
				fail(i, op, "Remaining %d, but Peek(%d) = %+v", r, r+1, got)
			}
		}

		// ResetAfter is exact: full then, not 1ns before.
		if ra := int64(after.ResetAfter); ra > 0 {
			if got := s.clone().quota(now + ra); got.Remaining != limit {
				fail(i, op, "ResetAfter %d, but Peek(0) then = %+v", ra, got)
			}
			if got := s.clone().quota(now + ra - 1); got.Remaining == limit {
				fail(i, op, "ResetAfter %d, but Peek(0) 1ns before = %+v", ra, got)
			}
		}

		// RetryAfter: the same request succeeds then and, for the exact
		// algorithms, not 1ns before.
		if valid && !d.Allowed {
			ra := int64(d.RetryAfter)
			if got := s.clone().allowN(now+ra, op.n, false); !got.Allowed {
				fail(i, op, "= %+v, but Peek(%d) RetryAfter later = %+v", d, op.n, got)
			}
			if a.exactRetry {
				if got := s.clone().allowN(now+ra-1, op.n, false); got.Allowed {
					fail(i, op, "= %+v, but Peek(%d) 1ns before RetryAfter = %+v", d, op.n, got)
				}
			}
		}
	}
}

// FuzzAllowN runs random sequences of (advance, n) on every algorithm,
// driven through decide with explicit times, and checks the invariants:
// never above the limit in any window the algorithm promises, Remaining in
// [0, Limit] and exact, RetryAfter 0 on an allow and > 0 on a denial, and
// exact RetryAfter and ResetAfter.
func FuzzAllowN(f *testing.F) {
	// Bursts at one instant, then small steps.
	f.Add(encodeFuzz(3, 2, 1000, 0, [3]byte{0, 0, 3}, [3]byte{0, 0, 1}, [3]byte{0, 0, 3}, [3]byte{1, 2, 1}, [3]byte{1, 2, 1}, [3]byte{200, 0, 2}))
	// Invalid n mixed with peeks.
	f.Add(encodeFuzz(4, 1, 7, 1, [3]byte{0, 0, 0}, [3]byte{0, 4, 6}, [3]byte{3, 0, 5}, [3]byte{3, 4, 2}, [3]byte{9, 0, 3}))
	// Slow trickle across many windows.
	f.Add(encodeFuzz(2, 3, 300, 9, [3]byte{100, 1, 1}, [3]byte{100, 1, 1}, [3]byte{100, 1, 1}, [3]byte{100, 1, 1}, [3]byte{100, 1, 2}, [3]byte{5, 1, 2}))
	// Long idle gaps and full-limit requests.
	f.Add(encodeFuzz(8, 8, 65535, 200, [3]byte{255, 3, 9}, [3]byte{0, 0, 9}, [3]byte{255, 3, 9}, [3]byte{1, 0, 1}, [3]byte{255, 3, 5}))
	// Period of 1ns.
	f.Add(encodeFuzz(1, 1, 1, 0, [3]byte{0, 0, 2}, [3]byte{0, 0, 2}, [3]byte{1, 0, 2}, [3]byte{2, 0, 2}, [3]byte{1, 4, 2}))
	// Boundary: the limit just before a window edge and again right after.
	f.Add(encodeFuzz(5, 5, 1000, 0, [3]byte{250, 0, 6}, [3]byte{1, 0, 6}, [3]byte{1, 0, 1}, [3]byte{2, 0, 6}, [3]byte{0, 0, 1}))
	// Full-limit requests 16.7ms apart for 1.2s: the quota's day ends
	// a second after the start.
	crossing := make([][3]byte, 72)
	for i := range crossing {
		crossing[i] = [3]byte{255, 3, 4}
	}
	f.Add(encodeFuzz(3, 1, 1000, 0, crossing...))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, ops, ok := decodeFuzz(data)
		if !ok {
			return
		}
		for _, a := range fuzzAlgos(t, cfg) {
			checkFuzzOps(t, cfg, a, ops)
		}
	})
}

// TestFuzzDecode pins the fuzz input format so the seeds mean what they
// say.
func TestFuzzDecode(t *testing.T) {
	t.Parallel()
	cfg, ops, ok := decodeFuzz(encodeFuzz(3, 2, 1000, 1, [3]byte{7, 2, 4}, [3]byte{1, 4, 0}))
	if !ok {
		t.Fatal("decodeFuzz refused a valid input")
	}
	want := fuzzConfig{limit: 3, refill: 2, period: 1000, start: 1_699_999_200_000_000_000 + 7919}
	if cfg != want {
		t.Errorf("decodeFuzz config = %+v, want %+v", cfg, want)
	}
	wantOps := []fuzzOp{{advance: 7 * 997, n: 3}, {advance: 1, peek: true, n: -1}}
	if fmt.Sprint(ops) != fmt.Sprint(wantOps) {
		t.Errorf("decodeFuzz ops = %+v, want %+v", ops, wantOps)
	}
	if _, _, ok := decodeFuzz([]byte{1, 2, 3}); ok {
		t.Error("decodeFuzz accepted a short input")
	}
}
