package lincheck

import (
	"fmt"
	"maps"

	"github.com/anishathalye/porcupine"
)

// SemInput is one operation on one key of a concurrency limiter: an
// acquisition of N permits (TryAcquire, which never waits) by the holder
// ID, or the release of what ID holds. IDs are unique per acquisition.
type SemInput struct {
	Acquire bool
	ID      int
	N       int
}

// SemOutput is what an acquisition returned: whether it was admitted and
// the Remaining its Decision reported. A release returns the zero
// SemOutput.
type SemOutput struct {
	Allowed   bool
	Remaining int
}

// SemaphoreModel is the sequential specification of one key of a
// concurrency limiter with limit permits: an acquisition of n is admitted
// exactly when what is held plus n is at most limit, and reports the
// permits free after it; a release gives back what its holder holds (once;
// a release of nothing held changes nothing). The state is the map of
// holders to their permits, copied on each step.
func SemaphoreModel(limit int) porcupine.Model {
	held := func(s map[int]int) int {
		sum := 0
		for _, n := range s {
			sum += n
		}
		return sum
	}
	return porcupine.Model{
		Init: func() any { return map[int]int{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(map[int]int), input.(SemInput), output.(SemOutput)
			if !in.Acquire {
				if _, ok := s[in.ID]; !ok {
					return true, s
				}
				next := maps.Clone(s)
				delete(next, in.ID)
				return true, next
			}
			h := held(s)
			if h+in.N > limit {
				return !out.Allowed && out.Remaining == limit-h, s
			}
			if !out.Allowed || out.Remaining != limit-h-in.N {
				return false, s
			}
			next := maps.Clone(s)
			next[in.ID] = in.N
			return true, next
		},
		Equal: func(a, b any) bool { return maps.Equal(a.(map[int]int), b.(map[int]int)) },
		DescribeOperation: func(input, output any) string {
			in, out := input.(SemInput), output.(SemOutput)
			if !in.Acquire {
				return fmt.Sprintf("release #%d", in.ID)
			}
			return fmt.Sprintf("acquire #%d n=%d -> %v, %d free", in.ID, in.N, out.Allowed, out.Remaining)
		},
		DescribeState: func(state any) string { return fmt.Sprint(state) },
	}
}
