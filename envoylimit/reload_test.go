package envoylimit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/rlkit/ratelimit/internal/testkit/eventrec"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func limitYAML(rpu int) string {
	return "domain: d\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + itoa(rpu) + "\n"
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

// A new configuration keeps what each key used, up to the new limit; a
// limit that is gone and comes back starts afresh.
func TestSetConfigKeepsState(t *testing.T) {
	r := serve(t, limitYAML(5))
	assert.Equal(t, 3, r.okTimes(3, "d", desc("user", "u")))
	cfg, err := envoylimit.ParseConfig("new.yaml", []byte(limitYAML(10)))
	require.NoError(t, err)
	require.NoError(t, r.svc.SetConfig(cfg))
	assert.Same(t, cfg, r.svc.Config())
	resp := r.call("d", desc("user", "u"))
	assert.Equal(t, uint32(10), resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit())
	assert.Equal(t, uint32(6), resp.Statuses[0].GetLimitRemaining(), "3 used before, 1 now")

	// Lowered below what was used: nothing left.
	cfg, err = envoylimit.ParseConfig("low.yaml", []byte(limitYAML(2)))
	require.NoError(t, err)
	require.NoError(t, r.svc.SetConfig(cfg))
	assert.Equal(t, 0, r.okTimes(1, "d", desc("user", "u")))

	// The same configuration again changes nothing.
	require.NoError(t, r.svc.SetConfig(cfg))
	assert.Equal(t, 0, r.okTimes(1, "d", desc("user", "u")))

	assert.ErrorIs(t, r.svc.SetConfig(nil), ratelimit.ErrInvalidConfig)
	assert.Same(t, cfg, r.svc.Config(), "a failed SetConfig keeps the old configuration")
}

// Watch reloads on a change of the files, keeps the old configuration on
// a bad one, and says why.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rl.yaml")
	require.NoError(t, os.WriteFile(file, []byte(limitYAML(2)), 0o644))
	mock := fakeclock.NewAnnouncing(time.Unix(0, 0))
	svc, err := envoylimit.NewService(mustLoad(t, dir), envoylimit.WithClock(mock))
	require.NoError(t, err)
	r := serveService(t, svc, mock.Mock)
	assert.Equal(t, 2, r.okTimes(3, "d", desc("user", "u")))

	ctx, cancel := context.WithCancel(context.Background())
	reloads := make(chan error)
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Watch(ctx, time.Second, func(err error) { reloads <- err }, dir)
	}()
	t.Cleanup(func() { cancel(); <-done })
	// change waits until Watch waits (it has read the files), changes
	// them and moves the clock on to Watch's next look.
	change := func(name, text string) {
		t.Helper()
		assert.Equal(t, time.Second, mock.Next(t))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
		mock.Add(time.Second)
	}

	change("rl.yaml", limitYAML(4))
	require.NoError(t, <-reloads)
	assert.Equal(t, 2, r.okTimes(3, "d", desc("user", "u")), "4 now, 2 used before")

	change("rl.yaml", limitYAML(4)+"      burst: 9\n")
	err = <-reloads
	assert.ErrorContains(t, err, "ratelimit: envoylimit: "+file+":7: burst applies to algorithm tokenbucket or leakybucket")
	assert.Equal(t, []string{"d"}, svc.Config().Domains(), "the old configuration stays")
	assert.Equal(t, 0, r.okTimes(1, "d", desc("user", "u")))

	// The fixed file and a new one.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.yaml"), []byte("domain: other\n"), 0o644))
	change("rl.yaml", limitYAML(6))
	require.NoError(t, <-reloads)
	assert.Equal(t, []string{"d", "other"}, svc.Config().Domains())
	assert.Equal(t, 2, r.okTimes(3, "d", desc("user", "u")))
}

func mustLoad(t *testing.T, paths ...string) *envoylimit.Config {
	t.Helper()
	cfg, err := envoylimit.LoadConfig(paths...)
	require.NoError(t, err)
	return cfg
}

// Every limit's decision is observed under the descriptor's path, with
// the request's values only where the configuration asks for them.
func TestObserverNames(t *testing.T) {
	var rec eventrec.Recorder
	r := serve(t, `
domain: obs
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 9}
`, envoylimit.WithObserver(&rec))
	r.call("obs", desc("user", "alice"))
	r.call("obs", desc("user", "alice"))
	r.call("obs", desc("route", "/api", "method", "GET"))
	r.call("obs", desc("ip", "10.0.0.1"))
	r.call("obs", desc("shadow", "x"))
	r.call("obs", desc("two", "x"))
	var got []string
	for _, e := range rec.Take() {
		got = append(got, e.Name+" "+e.Outcome.String())
		assert.Equal(t, ratelimit.FixedWindowAlgorithm, e.Algorithm)
	}
	assert.Equal(t, []string{
		"obs.user allowed",
		"obs.user denied",
		"obs.route_/api.method allowed",
		"obs.ip_10.0.0.1 allowed",
		"obs.shadow shadow",
		"obs.two#1 allowed",
		"obs.two#2 allowed",
	}, got)
}

// A limiter that reports to an observer of its own is refused beside
// WithObserver: every decision would be counted twice.
func TestObservedLimiterRefused(t *testing.T) {
	cfg, err := envoylimit.ParseConfig("f.yaml", []byte(perMinute))
	require.NoError(t, err)
	var rec eventrec.Recorder
	_, err = envoylimit.NewService(cfg, envoylimit.WithObserver(&rec), envoylimit.WithLimiters(func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
		return ratelimit.NewKeyed(p, ratelimit.WithObserver(&rec))
	}))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.ErrorContains(t, err, "ratelimit: envoylimit: limit d.user: ratelimit: invalid configuration: envoylimit.WithObserver: the limiter has an observer of its own")
}

// refusing refuses policies of a limit of 7.
type refusing struct{ *ratelimit.Keyed }

func (r refusing) SetPolicy(p ratelimit.Policy, mode ratelimit.Inheritance) error {
	if p.Limit == 7 {
		return errors.New("no sevens")
	}
	return r.Keyed.SetPolicy(p, mode)
}

// A reload a limiter refuses changes nothing: the policies changed before
// it are put back.
func TestSetConfigRefusedKeepsPolicies(t *testing.T) {
	two := func(a, b int) string {
		return "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: " + itoa(a) +
			"}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: " + itoa(b) + "}\n"
	}
	mock := clock.NewMock()
	r := serve(t, two(3, 3), envoylimit.WithLimiters(func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
		k, err := ratelimit.NewKeyed(p, ratelimit.WithClock(mock))
		return refusing{k}, err
	}))
	cfg, err := envoylimit.ParseConfig("f.yaml", []byte(two(5, 7)))
	require.NoError(t, err)
	assert.ErrorContains(t, r.svc.SetConfig(cfg), "no sevens")
	assert.Equal(t, 3, r.okTimes(4, "d", desc("a", "x")), "a keeps 3 an hour")
	assert.Equal(t, 3, r.okTimes(4, "d", desc("b", "x")))
}
