package redislimit

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
)

// BenchmarkKey measures the Redis key name of one key, hashed (the
// default) and plain (WithPlainKeys): the part of a decision's cost that
// key hashing adds.
func BenchmarkKey(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 10)
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"hashed", nil}, {"plain", []Option{WithPlainKeys()}}} {
		l, err := New(c, p, tc.opts...)
		if err != nil {
			b.Fatal(err)
		}
		for _, key := range []string{"user42", "sk_live_0123456789abcdefghijklmnopqrstuvwxyz"} {
			b.Run(tc.name+"/len"+itoa(len(key)), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_ = l.Key(key)
				}
			})
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
