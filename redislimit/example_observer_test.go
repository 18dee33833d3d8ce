package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/redislimit"
)

// ExampleWithObserver counts every decision of a Redis limiter by outcome,
// as a metrics adapter would (package otellimit does it for
// OpenTelemetry). Events carry the limit's name, never the key.
func ExampleWithObserver() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()

	observer := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
		fmt.Printf("%s/%s: %s, n=%d, remaining %d\n", e.Home, e.Name, e.Outcome, e.N, e.Decision.Remaining)
	})
	limiter, err := redislimit.New(client, ratelimit.FixedWindowPolicy(2, time.Hour),
		redislimit.WithName("login"),
		redislimit.WithObserver(observer),
		redislimit.WithPrefix(fmt.Sprintf("example:%d:", time.Now().UnixNano())))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		limiter.Allow(context.Background(), "alice")
	}
	// Output:
	// redis/login: allowed, n=1, remaining 1
	// redis/login: allowed, n=1, remaining 0
	// redis/login: denied, n=1, remaining 0
}

// ExampleWithBreaker shows a Redis that refuses connections: the first
// call tries it and fails, then the breaker answers every call at once
// with the failure policy's Decision (here FailClosed: a denial) until the
// cooldown has passed and a call tries Redis again.
func ExampleWithBreaker() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // nothing listens there
	defer client.Close()

	limiter, err := redislimit.New(client, ratelimit.FixedWindowPolicy(10, time.Second),
		redislimit.WithFailurePolicy(redislimit.FailClosed),
		redislimit.WithBreaker(time.Minute),
		redislimit.WithTimeout(20*time.Millisecond),
		redislimit.WithLogger(nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range 3 {
		d, err := limiter.AllowN(context.Background(), "alice", 1)
		fmt.Printf("call %d: allowed %t, unavailable %t, breaker open %t\n",
			i+1, d.Allowed, errors.Is(err, redislimit.ErrUnavailable), errors.Is(err, redislimit.ErrBreakerOpen))
	}
	// Output:
	// call 1: allowed false, unavailable true, breaker open false
	// call 2: allowed false, unavailable true, breaker open true
	// call 3: allowed false, unavailable true, breaker open true
}

// ExampleWithLogger sends a limiter's reports of Redis failures to a
// log/slog logger of its own. Ten failures make one report (at most one per
// WithErrorReportInterval); the next would say how many were left out.
func ExampleWithLogger() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // nothing listens there
	defer client.Close()

	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		// Leave out the time, and the error, whose text names the
		// machine's own cause (here "connection refused").
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "error" {
				return slog.Attr{}
			}
			return a
		},
	}))
	limiter, err := redislimit.New(client, ratelimit.FixedWindowPolicy(10, time.Second),
		redislimit.WithName("login"),
		redislimit.WithLogger(logger),
		redislimit.WithErrorReportInterval(time.Minute),
		redislimit.WithTimeout(20*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 10 {
		limiter.Allow(context.Background(), "alice") // FailOpen: admitted
	}
	// Output:
	// level=ERROR msg="ratelimit: redis unavailable" limit=login algorithm=fixedwindow suppressed=0
}

// ExampleWithReplicaAck asks for one replica's acknowledgement of every
// admission. The examples' server has no replica, so the first call's
// admission is never acknowledged: the caller gets the failure policy
// (FailClosed, a denial) with ErrNotReplicated, although the master did
// charge the event. The second call is Redis's own denial, returned as it
// is. With a replica attached, both would be Redis's decisions.
func ExampleWithReplicaAck() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := redislimit.New(client, ratelimit.FixedWindowPolicy(1, time.Hour),
		redislimit.WithReplicaAck(1, 10*time.Millisecond),
		redislimit.WithTimeout(500*time.Millisecond),
		redislimit.WithFailurePolicy(redislimit.FailClosed),
		redislimit.WithBreaker(0),
		redislimit.WithLogger(nil),
		redislimit.WithPrefix(fmt.Sprintf("example:%d:", time.Now().UnixNano())))
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range 2 {
		d, err := limiter.AllowN(context.Background(), "alice", 1)
		fmt.Printf("call %d: allowed %t, remaining %d, not replicated %t\n",
			i+1, d.Allowed, d.Remaining, errors.Is(err, redislimit.ErrNotReplicated))
	}
	// Output:
	// call 1: allowed false, remaining 0, not replicated true
	// call 2: allowed false, remaining 0, not replicated false
}
