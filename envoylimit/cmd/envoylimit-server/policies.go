package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/redislimit"
)

// policyHistory keeps, in Redis beside the counters, the last policies
// each limit ran under, oldest first, so that a process started after a
// change of the configuration (a restart, a new replica) converts the keys
// as a running process's reload does (redislimit.WithPrevious) instead of
// starting every key afresh: redislimit names a key by its policy.
type policyHistory struct {
	client redis.UniversalClient
	prefix string
}

// historyLen is how many policies a limit's history keeps: redislimit
// converts state from the last four.
const historyLen = 8

// pushPolicy appends a policy to a history unless it is already the last.
var pushPolicy = redis.NewScript(`
local last = redis.call('LINDEX', KEYS[1], -1)
if last ~= ARGV[1] then
  redis.call('RPUSH', KEYS[1], ARGV[1])
  redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
end
return 0`)

func (h policyHistory) key(hashedName string) string { return h.prefix + "policies:" + hashedName }

// previous returns the options that name a limit's earlier policies, for
// a limiter of policy p.
func (h policyHistory) previous(ctx context.Context, hashedName string, p ratelimit.Policy) ([]redislimit.Option, error) {
	encoded, err := h.client.LRange(ctx, h.key(hashedName), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the policy history of a limit: %w", err)
	}
	if n := len(encoded); n > 0 && encoded[n-1] == encodePolicy(p) {
		encoded = encoded[:n-1] // p is in force already: its predecessors only
	}
	var opts []redislimit.Option
	for _, e := range encoded {
		prev, err := decodePolicy(e)
		if err != nil {
			return nil, err
		}
		opts = append(opts, redislimit.WithPrevious(prev, ratelimit.KeepUsed))
	}
	return opts, nil
}

func (h policyHistory) record(ctx context.Context, hashedName string, p ratelimit.Policy) error {
	return pushPolicy.Run(ctx, h.client, []string{h.key(hashedName)}, encodePolicy(p), historyLen).Err()
}

// recordedLimiter is a Redis limiter whose policy changes (a reload's)
// are recorded in its history.
type recordedLimiter struct {
	*redislimit.Limiter
	history    policyHistory
	hashedName string
}

// SetPolicy changes the policy and records it.
func (l recordedLimiter) SetPolicy(p ratelimit.Policy, mode ratelimit.Inheritance) error {
	if err := l.Limiter.SetPolicy(p, mode); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return l.history.record(ctx, l.hashedName, p)
}

// encodePolicy writes p as one line: its fields, '|'-separated.
func encodePolicy(p ratelimit.Policy) string {
	loc := ""
	if p.Calendar.Location != nil {
		loc = p.Calendar.Location.String()
	}
	c := p.Calendar
	return fmt.Sprintf("%d|%d|%d|%d|%d|%s|%d|%d|%d|%d", p.Algorithm, p.Limit, p.Refill, int64(p.Period),
		c.Unit, loc, c.Hour, c.Minute, c.WeekStart, c.MonthDay)
}

func decodePolicy(s string) (ratelimit.Policy, error) {
	f := strings.Split(s, "|")
	if len(f) != 10 {
		return ratelimit.Policy{}, fmt.Errorf("a recorded policy %q has %d fields, want 10", s, len(f))
	}
	var n [10]int64 // every field but the zone (5) is a number
	for i, v := range f {
		if i == 5 {
			continue
		}
		var err error
		if n[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return ratelimit.Policy{}, fmt.Errorf("a recorded policy %q: %w", s, err)
		}
	}
	p := ratelimit.Policy{
		Algorithm: ratelimit.Algorithm(n[0]), Limit: int(n[1]), Refill: int(n[2]), Period: time.Duration(n[3]),
		Calendar: ratelimit.Calendar{Unit: ratelimit.CalendarUnit(n[4]), Hour: int(n[6]), Minute: int(n[7]),
			WeekStart: time.Weekday(n[8]), MonthDay: int(n[9])},
	}
	if f[5] != "" {
		loc, err := time.LoadLocation(f[5])
		if err != nil {
			return p, fmt.Errorf("a recorded policy %q: %w", s, err)
		}
		p.Calendar.Location = loc
	}
	return p, p.Validate()
}
