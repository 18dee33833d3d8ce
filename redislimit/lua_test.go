package redislimit

import (
	"testing"
)

// TestDivisionHelpers checks the prelude's fdiv and cdiv against Go's
// integer division at the edges of doubles: numerators near 2^53, quotients
// just below and above integers, small and large divisors. (Below 2^53 the
// floor of a rounded double quotient is already exact; this guards the
// helpers, on which every script's rounding direction rests.)
func TestDivisionHelpers(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	src := luaPart("prelude") + luaPart("helpers") + `
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  out[#out + 1] = fdiv(a, b)
  out[#out + 1] = cdiv(a, b)
end
return out`
	rng := newRand(42)
	type pair struct{ a, b int64 }
	var cases []pair
	for _, b := range []int64{1, 2, 3, 7, 1000, 999_999_937, 1 << 26, 1<<40 + 1, 1<<52 - 1} {
		for _, a := range []int64{0, 1, b - 1, b, b + 1, 1<<53 - 2*b, 1<<53 - 2*b + 1} {
			if a >= 0 && a+b < 1<<53 {
				cases = append(cases, pair{a, b})
			}
		}
		for range 20 {
			// a = q*b + r with r in {-1, 0, 1}: quotients at integers' edges.
			q := rng.Int64N((1<<53-1)/b - 1)
			for r := int64(-1); r <= 1; r++ {
				if a := q*b + r; a >= 0 && a+b < 1<<53 {
					cases = append(cases, pair{a, b})
				}
			}
		}
	}
	args := make([]any, 0, 2*len(cases))
	for _, p := range cases {
		args = append(args, p.a, p.b)
	}
	got, err := c.Eval(bg(), src, nil, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range cases {
		floor := p.a / p.b
		ceil := floor
		if p.a%p.b != 0 {
			ceil++
		}
		if got[2*i] != floor || got[2*i+1] != ceil {
			t.Errorf("fdiv/cdiv(%d, %d) = %d, %d; want %d, %d", p.a, p.b, got[2*i], got[2*i+1], floor, ceil)
		}
	}
	t.Logf("%d cases", len(cases))
}
