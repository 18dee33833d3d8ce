package redislimit

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOneReportPerFailureBehindMiddleware: a login limit on a Redis that is
// down, behind the middleware, with every default: one failure is one log
// line, one Event and one name, the Limit's, in the headers, the log and
// the Event. It used to be logged twice, "ratelimit: redis unavailable"
// by the limiter (limit "", its WithName) and "ratelimit: limiter error"
// by the middleware (limit "login"); its Event went only to the limiter's
// own observer, under the limiter's name. The limiter no longer logs
// unless given a logger (WithLogger); the middleware, which answers the
// client instead of returning the error, reports it, and its observer
// hears every decision of its limits (Home redis, OutcomeFallback). A
// limiter given a logger of its own logs instead, and the middleware
// leaves its errors to it.
func TestOneReportPerFailureBehindMiddleware(t *testing.T) {
	// Not parallel: it replaces slog.Default, where the limiter used to
	// report.
	defaults := &logRecorder{}
	old := slog.Default()
	slog.SetDefault(defaults.logger())
	t.Cleanup(func() { slog.SetDefault(old) })

	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1}) // nothing listens there
	t.Cleanup(func() { _ = client.Close() })

	for _, own := range []bool{false, true} {
		mine := &logRecorder{}
		opts := []Option{WithFailurePolicy(FailClosed), WithTimeout(100 * time.Millisecond), WithErrorReportInterval(0)}
		if own {
			opts = append(opts, WithLogger(mine.logger()))
		}
		login := mustNew(t, client, ratelimit.FixedWindowPolicy(5, time.Minute), opts...)
		mwLog := &logRecorder{}
		var obs events
		mw, err := httplimit.New([]httplimit.Limit{{Name: "login", Key: httplimit.KeyByIP(), Limiter: login}},
			httplimit.WithLogger(mwLog.logger()), httplimit.WithErrorReportInterval(0), httplimit.WithObserver(&obs))
		require.NoError(t, err)
		srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
		resp, err := srv.Client().Post(srv.URL+"/login", "text/plain", nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
		srv.Close()
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "own logger %v: fail closed", own)

		lines := defaults.len() + mine.len() + mwLog.len()
		assert.Equal(t, 1, lines, "own logger %v: log lines for one failure: default %v, limiter's %v, middleware's %v",
			own, defaults.texts(), mine.texts(), mwLog.texts())
		if own {
			if assert.Equal(t, 1, mine.len()) {
				assert.Equal(t, "ratelimit: redis unavailable", mine.records[0].Message)
			}
		} else if assert.Equal(t, 1, mwLog.len()) {
			assert.Equal(t, "login", mwLog.attrs(0)["limit"].String())
		}
		defaults.mu.Lock()
		defaults.records = nil
		defaults.mu.Unlock()

		ev := obs.Take()
		if assert.Len(t, ev, 1, "own logger %v: Events", own) {
			assert.Equal(t, "login", ev[0].Name)
			assert.Equal(t, ratelimit.HomeRedis, ev[0].Home)
			assert.Equal(t, ratelimit.OutcomeFallback, ev[0].Outcome)
			assert.Equal(t, ratelimit.FixedWindowAlgorithm, ev[0].Algorithm)
			assert.False(t, ev[0].Decision.Allowed)
			assert.ErrorIs(t, ev[0].Err, ErrUnavailable)
			assert.Positive(t, ev[0].Latency, "the round trip that failed")
		}
	}

	// A limiter with an observer of its own beside the middleware's would
	// have each decision counted twice.
	observed := mustNew(t, client, ratelimit.FixedWindowPolicy(5, time.Minute), WithObserver(&events{}))
	_, err := httplimit.New([]httplimit.Limit{{Name: "login", Key: httplimit.KeyByIP(), Limiter: observed}}, httplimit.WithObserver(&events{}))
	require.Error(t, err)
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "counted twice")
}
