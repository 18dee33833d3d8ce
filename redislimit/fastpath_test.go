package redislimit

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestFastPathAgreesWithGeneralPath runs each algorithm's decision script
// with and without its fast path (lua/<algorithm>/fast.lua) on a real
// redis-server, from the same stored state, time, parameters and mode, on
// random and adversarial states (negative, leading zeros, exponents,
// 2^53 +- 1, skew edges, expired, future and garbage block keys, every
// mode): the reply, the stored value and its TTL must be the same. The
// fast path may only decide earlier, never differently.
func TestFastPathAgreesWithGeneralPath(t *testing.T) {
	_, c := startRedis(t)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(1))
	algs := []string{"tokenbucket", "leakybucket", "fixedwindow", "slidingcounter", "quota"}
	iters := 3000
	for _, alg := range algs {
		slots := map[string]string{"refund": alg + "/refund"}
		fast := redis.NewScript(assemble(slots, "prelude", alg+"/fast", "helpers", alg+"/state", "nochain", "decision", alg+"/decide"))
		gen := redis.NewScript(assemble(slots, "prelude", "helpers", alg+"/state", "nochain", "decision", alg+"/decide"))
		mism := 0
		for i := 0; i < iters && mism < 5; i++ {
			now := int64(1800000000000000) + rng.Int63n(1e12)
			limit := int64(1 + rng.Intn(10))
			if rng.Intn(4) == 0 {
				limit = int64(1 + rng.Intn(1000000))
			}
			n := rng.Int63n(limit + 2)
			var params []any
			var nums []int64
			nums = append(nums, now, now-1, now+1, 0, limit, limit+1, 1, 2, 9007199254740991, 9007199254740992, 9007199254740993)
			switch alg {
			case "tokenbucket":
				p := int64(1 + rng.Intn(5))
				r := int64(1 + rng.Intn(3))
				if rng.Intn(3) == 0 {
					p = int64(1 + rng.Intn(1000000))
				}
				params = []any{limit, r, p}
				full := limit * p
				nums = append(nums, full, full+1, full-1, now+full/r, now+full/r+1, now+60000000, now+60000001, now-full/r, p, r)
			case "leakybucket":
				every := int64(1 + rng.Intn(100))
				if rng.Intn(3) == 0 {
					every = int64(1 + rng.Intn(100000000))
				}
				params = []any{limit, every}
				span := limit * every
				nums = append(nums, now+span, now+span+1, now+2*span, now+2*span+1, now+span+60000000, now+span+60000001, now-span, now+every)
			case "fixedwindow", "slidingcounter":
				w := int64(1 + rng.Intn(100))
				if rng.Intn(2) == 0 {
					w = int64(1 + rng.Intn(100000000))
				}
				params = []any{limit, w}
				k := now / w
				nums = append(nums, k, k-1, k+1, k-2, k+2, w)
			case "quota":
				per := int64(1 + rng.Intn(100000000))
				base := now - rng.Int63n(per)
				b := []int64{base - per, base, base + per, base + 2*per, base + 3*per}
				if rng.Intn(10) == 0 {
					off := rng.Int63n(3*per) - per
					for j := range b {
						b[j] += off
					}
				}
				params = []any{limit, b[0], b[1], b[2], b[3], b[4]}
				nums = append(nums, b[0], b[1], b[2], b[3], b[4], base+per/2, base+2*per+per, base+60000000, now+60000000, now+60000001, base-60000000)
			}
			pick := func() string {
				x := nums[rng.Intn(len(nums))]
				switch rng.Intn(12) {
				case 0:
					return "-" + strconv.FormatInt(x, 10)
				case 1:
					return "0" + strconv.FormatInt(x, 10)
				case 2:
					return strconv.FormatInt(x+rng.Int63n(5)-2, 10)
				case 3:
					return "1e3"
				}
				return strconv.FormatInt(x, 10)
			}
			var state string
			hasState := true
			switch alg {
			case "leakybucket":
				state = pick()
			case "tokenbucket", "fixedwindow":
				state = pick() + " " + pick()
			default:
				state = pick() + " " + pick() + " " + pick()
			}
			if rng.Intn(10) == 0 {
				hasState = false
			}
			block := ""
			switch rng.Intn(6) {
			case 0:
				block = strconv.FormatInt(now+1000, 10)
			case 1:
				block = strconv.FormatInt(now-1, 10)
			case 2:
				block = "garbage"
			}
			mode := "1"
			if rng.Intn(8) == 0 {
				mode = []string{"0", "x", "n", "p"}[rng.Intn(4)]
			}
			nowArg := strconv.FormatInt(now, 10)
			args := append([]any{nowArg, n}, params...)
			args = append(args, mode)
			run := func(s *redis.Script, tag string) (any, string, int64, error) {
				k1, k2 := "zz:"+tag+":s", "zz:"+tag+":b"
				c.Del(ctx, k1, k2)
				if hasState {
					c.Set(ctx, k1, state, 0)
				}
				if block != "" {
					c.Set(ctx, k2, block, 0)
				}
				// The script and the reads in one transaction: the TTL is read
				// the moment the script set it, however loaded the machine
				// (read apart, it decayed by the scheduling delay between
				// them, and the two paths' TTLs once differed by 70 ms).
				var run *redis.Cmd
				var get *redis.StringCmd
				var pttl *redis.DurationCmd
				_, _ = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					run = s.Eval(ctx, p, []string{k1, k2}, args...)
					get = p.Get(ctx, k1)
					pttl = p.PTTL(ctx, k1)
					return nil
				})
				v, err := run.Result()
				got, _ := get.Result()
				ttl, _ := pttl.Result()
				return v, got, int64(ttl / 1e6), err
			}
			v1, s1, t1, e1 := run(fast, "f")
			v2, s2, t2, e2 := run(gen, "g")
			d := t1 - t2
			if !reflect.DeepEqual(v1, v2) || s1 != s2 || d > 50 || d < -50 || fmt.Sprint(e1) != fmt.Sprint(e2) {
				mism++
				t.Errorf("%s: params %v n %d mode %s state %q(has %v) block %q now %d:\n fast %v %q ttl %d err %v\n gen  %v %q ttl %d err %v", alg, params, n, mode, state, hasState, block, now, v1, s1, t1, e1, v2, s2, t2, e2)
			}
		}
	}
}
