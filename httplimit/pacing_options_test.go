// The pacing tests of WithBackoff and WithPolicyShaping.

package httplimit

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPacingBackoff: against a gateway that refuses with a bare 429 (no
// Retry-After, no fields), the Transport backs off per key: after the
// k-th consecutive refusal the next request waits a random time in
// [first/2, min(ceiling, first*2^k)], never nothing.
func TestPacingBackoff(t *testing.T) {
	t.Parallel()
	const first, ceiling = time.Second, 8 * time.Second
	for _, n := range []int{12, 30} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			t.Parallel()
			o := studyPacing(t, modeBare, false, pacingAligned, n, WithBackoff(first, ceiling))
			gaps := checkBackoffGaps(t, o.arrivals, first, ceiling)
			ks := make([]int, 0, len(gaps))
			for k := range gaps {
				ks = append(ks, k)
			}
			sort.Ints(ks)
			for _, k := range ks {
				t.Logf("gaps after consecutive 429 #%d: %v", k, gaps[k])
			}
			t.Log(o.row)
		})
	}
}

// TestPacingBackoffJitter: the backoff is jittered. A gateway that refuses
// everything is asked 204 times, one attempt per request (no retries: the
// key's pause holds the next request back); the 200 pauses drawn from the
// widest range, [first/2, ceiling] (k >= 3), are not all equal and fall on
// both sides of its middle. (A backoff without jitter waits the ceiling
// every time; a uniform one misses one half with probability 2^-199.)
func TestPacingBackoffJitter(t *testing.T) {
	t.Parallel()
	const first, ceiling, requests = time.Second, 8 * time.Second, 204
	clk := fakeclock.NewAnnouncing(pacingAligned)
	s, srv := startDialectServer(t, modeBare, clk, false, dialectPolicy{q: 0, w: time.Hour})
	tr, err := NewTransport(srv.Client().Transport, nil, WithClock(clk), WithBackoff(first, ceiling))
	require.NoError(t, err)
	run := drivePacing(t, clk, tr, srv.URL, 1, requests)
	assert.Empty(t, run.errs, "RoundTrip errors")
	arrivals := s.Arrivals()
	require.Len(t, arrivals, requests, "attempts")
	gaps := checkBackoffGaps(t, arrivals, first, ceiling)
	var capped []time.Duration
	for k, g := range gaps {
		if backoffCeiling(first, ceiling, k) == ceiling {
			capped = append(capped, g...)
		}
	}
	require.Len(t, capped, requests-4, "pauses drawn from [first/2, ceiling]")
	mid := (first/2 + ceiling) / 2
	lo, hi := capped[0], capped[0]
	below := 0
	for _, g := range capped {
		lo, hi = min(lo, g), max(hi, g)
		if g < mid {
			below++
		}
	}
	t.Logf("%d capped pauses: min %v, max %v, %d below %v", len(capped), lo, hi, below, mid)
	assert.NotEqual(t, lo, hi, "every pause the same: no jitter")
	assert.True(t, below > 0 && below < len(capped), "all %d pauses on one side of %v", len(capped), mid)
}

// TestPacingPolicyShaping: with WithPolicyShaping(true) the Transport
// spaces a key's requests by the policy the server advertises, at least
// w/q apart (3 s / 5 = 600 ms), and is still never refused.
func TestPacingPolicyShaping(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modeDraft6, modeDraft7, modeDraft8} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			o := studyPacing(t, mode, false, pacingAligned, 12, WithPolicyShaping(true))
			r := o.row
			assert.Zero(t, r.blind+r.late, "429s")
			assert.Equal(t, r.n, r.ok, "requests served")
			p := defaultPolicies(mode)[0]
			spacing := p.w / time.Duration(p.q)
			for i := 0; i+1 < len(o.arrivals); i++ {
				if gap := o.arrivals[i+1].at.Sub(o.arrivals[i].at); gap < spacing {
					t.Errorf("requests %d and %d %v apart, want at least %v", i, i+1, gap, spacing)
				}
			}
			t.Log(r)
		})
	}
}
