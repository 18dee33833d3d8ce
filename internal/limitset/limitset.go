// Package limitset is what httplimit's middleware and grpclimit's
// interceptors share, whatever carries the request: a validated list of
// limits, the all-or-nothing decision over the limits that apply to one
// request (tiers, concurrency limits' permits, reservations of the limits
// counting by outcome, shadow mode, exempt and
// denied keys, the observer), a server's adaptive concurrency limiter
// beside the limits (Overload), the
// pacing of error reports, and the values of the rate-limit fields (the
// X-RateLimit-* and IETF RateLimit fields, Retry-After), written to a
// map[string][]string under the field names of the caller (http.Header's
// canonical names, gRPC metadata's lower-case ones).
//
// R is the request type (*http.Request, or grpclimit's call description).
// Deciding an admitted request with up to MaxInline limits allocates
// nothing of its own (ratelimit.AllowAll's bookkeeping for several
// enforced limits, and the context marking shadow calls, aside);
// WriteFields allocates the fields' values, as it documents.
//
// A typical caller, per request:
//
//	req := limitset.Request[R]{R: r, Ctx: ctx, N: cost}
//	var v limitset.Verdict[R] // on the stack: pass its address
//	switch set.Decide(&req, &v, shadowFields, attrs) {
//	case limitset.Admitted:
//		set.WriteFields(h, &limitset.GRPCNames, fields, &v)
//		if v.Counts() { // reservations: the handler may ReportCost
//			ctx = limitset.WithReportedCost(ctx)
//		}
//		if v.Holds() { // permits, reservations: for the request's life
//			defer func() { set.Release(ctx, &v, outcome) }() // its HTTP status, gRPC code
//		}
//		// then serve
//	case limitset.Pass:
//		// serve
//	case limitset.Denied:
//		set.WriteFields(h, &limitset.GRPCNames, fields, &v)
//		// refuse: v.Limit(), v.Dec, RetryAfterSeconds(v.Dec), v.Err
//	case limitset.Listed:
//		// forbid: v.Listed.Name
//	case limitset.Canceled:
//		// the caller's ctx.Err()
//	case limitset.Misconfigured:
//		// the server's own failure (500, codes.Internal): v.Limit()
//	}
package limitset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/observe"
	"github.com/rlkit/ratelimit/internal/report"
	"github.com/rlkit/ratelimit/internal/timesrc"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// MaxInline is how many applying limits a request can have before the
// decision allocates to track them (a Verdict holds that many inline).
const MaxInline = 4

// MaxKeyLen is the longest key passed to a limiter; a longer one is
// replaced by "sha256:" and its hex SHA-256 (the same in every process).
const MaxKeyLen = 128

// DigestKey returns the key passed to limiters in place of key when key
// is longer than MaxKeyLen: "sha256:" and the hex SHA-256 of key.
func DigestKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Limit is one limit a request must pass, as the public packages define
// it (httplimit.Limit, grpclimit.Limit), with the key function of R.
type Limit[R any] struct {
	Name    string
	Key     func(r R) (key string, ok bool)
	Limiter ratelimit.KeyedLimiter
	// Concurrency, instead of Limiter, makes the limit a concurrency
	// limit: Decide acquires permits (TryAcquire) once the rate limits
	// have admitted the request, and the caller holds them for the
	// request's life (Release).
	Concurrency ratelimit.ConcurrencyLimiter
	// Count, when set, counts the request by its outcome: Decide reserves
	// the request's cost (Limiter must be a ratelimit.Reserver), and
	// Release settles Count(outcome, cost): outcome the caller's (an HTTP
	// status, a gRPC code), cost what the handler reported (ReportCost),
	// else the request's cost.
	Count      func(outcome, cost int) int
	Window     time.Duration
	Shadow     bool
	ExemptKeys []string
	DeniedKeys []string
}

// Config is what a Set needs besides its limits.
type Config struct {
	// Pkg names the public package in configuration errors, as in
	// "grpclimit.Limit.Name must be unique, got \"api\" twice".
	Pkg string
	// Observer receives every decision the Set takes for its limits, each
	// Event named by the limit (see Decide); nil: none. New refuses a
	// limiter that reports to an observer of its own beside it.
	Observer ratelimit.Observer
	// Clock times the rate-limit fields and error reports; nil: real time.
	Clock ratelimit.Clock
	// Logger and ReportEvery pace error reports, at most one per limit
	// per ReportEvery (<= 0: every error is reported). The errors of a
	// limiter that logs them itself are left to it.
	Logger      report.Logger
	ReportEvery time.Duration
	// DeniedErr is the package's sentinel for a denylist refusal
	// (httplimit.ErrDenied, grpclimit.ErrDenied), the Err of the Events
	// reported for it.
	DeniedErr error
}

// Set is a validated list of limits. Safe for concurrent use.
type Set[R any] struct {
	cfg        Config
	ts         timesrc.Source
	limits     []Entry[R]
	hasShadow  bool // some limit is in shadow mode
	deniedKeys bool // some limit has DeniedKeys
	hasConc    bool // some limit is a concurrency limit
	hasCount   bool // some limit counts by outcome (Count)
}

// Entry is one limit of a Set, ready to serve.
type Entry[R any] struct {
	Limit[R]
	tiered tierer       // Limiter, when it picks a limiter per key
	ph     policyHolder // Limiter, when it tells its policy and is not a Tiered
	info   observe.Info // Limiter's, as its home describes it
	sfName []byte       // Name as an RFC 8941 String
	consts constCache
	wins   windowCache
	rep    report.Throttle

	flights *flights // for a limit counting by outcome (Count); else nil

	exemptKeys keySet // ExemptKeys; nil when none
	deniedKeys keySet // DeniedKeys; nil when none
	lists      bool   // exemptKeys or deniedKeys is set
}

// tierer is what limitset uses of a *ratelimit.Tiered, which charges each
// key in the limiter of its tier: a request's tier is resolved once, in
// gather, and that limiter decides, labels and times the request.
type tierer interface {
	Tier(ctx context.Context, key string) (string, ratelimit.KeyedLimiter, error)
}

// policyHolder is implemented by limiters that can say which policy they
// run, such as *ratelimit.Keyed.
type policyHolder interface {
	Policy() ratelimit.Policy
}

// New validates limits and returns their Set. It returns an error
// wrapping ratelimit.ErrInvalidConfig, naming cfg.Pkg, when limits is
// empty, a Limit has no Key, neither or both of Limiter and Concurrency (a
// typed nil counts as none), a negative Window or a Window on a
// concurrency limit (which has none), a name that is not printable ASCII or repeats another
// ("default" for an empty name), an ExemptKeys entry also in its
// DeniedKeys (the message names the index, never the key), or a limiter
// that reports to an observer of its own (ratelimit.WithObserver, for
// itself or a tier) when cfg.Observer is set: each of its decisions would
// be counted twice. It copies the limits and their key lists.
func New[R any](cfg Config, limits []Limit[R]) (*Set[R], error) {
	pkg := cfg.Pkg
	if len(limits) == 0 {
		return nil, configError("%s.New: limits must not be empty, got %d", pkg, len(limits))
	}
	s := &Set[R]{cfg: cfg, ts: timesrc.New(cfg.Clock), limits: make([]Entry[R], len(limits))}
	names := make(map[string]bool, len(limits))
	for i, l := range limits {
		if l.Name == "" {
			l.Name = "default"
		}
		if !ValidName(l.Name) {
			return nil, configError("%s.Limit.Name must be printable ASCII, got %q", pkg, l.Name)
		}
		if names[l.Name] {
			return nil, configError("%s.Limit.Name must be unique, got %q twice", pkg, l.Name)
		}
		names[l.Name] = true
		if l.Key == nil {
			return nil, configError("%s.Limit.Key of limit %q must not be nil, got nil", pkg, l.Name)
		}
		if err := checkLimiters(pkg, &l); err != nil {
			return nil, err
		}
		if l.Window < 0 {
			return nil, configError("%s.Limit.Window of limit %q must not be negative, got %v", pkg, l.Name, l.Window)
		}
		if err := checkCount(pkg, &l); err != nil {
			return nil, err
		}
		if l.Concurrency != nil && l.Window != 0 {
			return nil, configError("%s.Limit.Window of limit %q must be zero for a concurrency limit, which has no window, got %v", pkg, l.Name, l.Window)
		}
		e := &s.limits[i]
		e.Limit = l
		e.ExemptKeys = append([]string(nil), l.ExemptKeys...)
		e.DeniedKeys = append([]string(nil), l.DeniedKeys...)
		// Only a *ratelimit.Tiered itself: a user's type that embeds one has
		// Tier promoted but decides through its own AllowN.
		if t, ok := l.Limiter.(*ratelimit.Tiered); ok && t != nil {
			e.tiered = t
		} else {
			e.ph, _ = l.Limiter.(policyHolder)
		}
		field := "Limiter"
		if l.Concurrency != nil {
			e.info, field = observe.Describe(l.Concurrency), "Concurrency"
			s.hasConc = true
		} else {
			e.info = observe.Describe(l.Limiter)
		}
		if cfg.Observer != nil && e.info.Observed {
			return nil, configError("%s.Limit.%s of limit %q reports to an Observer of its own (ratelimit.WithObserver, on it or one of its tiers) beside %s.WithObserver's: each of its decisions would be counted twice; give the observer to %s.WithObserver alone, which reports every decision of the limit under its name", pkg, field, l.Name, pkg, pkg)
		}
		if l.Count != nil {
			e.flights = new(flights)
		}
		e.sfName = appendSFString(nil, l.Name)
		if err := e.checkKeyLists(pkg); err != nil {
			return nil, err
		}
		s.hasShadow = s.hasShadow || l.Shadow
		s.hasCount = s.hasCount || l.Count != nil
		s.deniedKeys = s.deniedKeys || e.deniedKeys != nil
	}
	return s, nil
}

// checkLimiters refuses a Limit without exactly one of Limiter and
// Concurrency (a typed nil counts as none); it clears a typed nil of the
// one left unset.
func checkLimiters[R any](pkg string, l *Limit[R]) error {
	rate := l.Limiter != nil && !typednil.Is(l.Limiter)
	conc := l.Concurrency != nil && !typednil.Is(l.Concurrency)
	switch {
	case rate && conc:
		return configError("%s.Limit of limit %q must have one of Limiter and Concurrency, got both", pkg, l.Name)
	case !rate && !conc:
		if l.Concurrency != nil {
			return configError("%s.Limit.Concurrency of limit %q must not be nil, got %T", pkg, l.Name, l.Concurrency)
		}
		return configError("%s.Limit.Limiter of limit %q must not be nil, got %T", pkg, l.Name, l.Limiter)
	case conc:
		l.Limiter = nil
	default:
		l.Concurrency = nil
	}
	return nil
}

// checkCount refuses a Limit with Count whose limiter cannot reserve: a
// concurrency limit, a limiter that is not a ratelimit.Reserver, or one
// that runs the sliding log (which cannot settle exactly).
func checkCount[R any](pkg string, l *Limit[R]) error {
	if l.Count == nil {
		return nil
	}
	if l.Concurrency != nil {
		return configError("%s.Limit.Count of limit %q must be nil for a concurrency limit, which holds permits, not counts", pkg, l.Name)
	}
	if _, ok := l.Limiter.(ratelimit.Reserver); !ok {
		return configError("%s.Limit.Limiter of limit %q is a %T, which cannot reserve (it is not a ratelimit.Reserver): a limit with Count needs one", pkg, l.Name, l.Limiter)
	}
	if ph, ok := l.Limiter.(policyHolder); ok && ph.Policy().Algorithm == ratelimit.SlidingLogAlgorithm {
		return configError("%s.Limit.Limiter of limit %q runs the sliding log, which cannot settle a reservation exactly: a limit with Count needs another algorithm", pkg, l.Name)
	}
	return nil
}

// Limits returns the Set's entries, in the order given to New. The
// caller must not change them.
func (s *Set[R]) Limits() []Entry[R] { return s.limits }

// Now returns the time on the Set's clock (Config.Clock), in Unix
// nanoseconds.
func (s *Set[R]) Now() int64 { return s.ts.Now() }

// configError builds a configuration error; format names the package and
// the argument.
func configError(format string, args ...any) error {
	return errs.Config(ratelimit.ErrInvalidConfig, format, args...)
}

// ValidName reports whether name can be a limit's name, sent as an RFC
// 8941 String in the RateLimit fields: printable ASCII only.
func ValidName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// appendSFString appends s as an RFC 8941 String ("..." with \ and "
// escaped). s has been checked by ValidName.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// keySet is a set of keys; nil is empty.
type keySet map[string]struct{}

// newKeySet returns the set of keys, nil when there are none.
func newKeySet(keys []string) keySet {
	if len(keys) == 0 {
		return nil
	}
	s := make(keySet, len(keys))
	for _, k := range keys {
		s[k] = struct{}{}
	}
	return s
}

// has reports whether s holds key.
func (s keySet) has(key string) bool {
	_, ok := s[key]
	return ok
}

// checkKeyLists builds e's key sets, refusing ExemptKeys that repeat
// DeniedKeys. The message names the index, never the key (keys may be
// secret).
func (e *Entry[R]) checkKeyLists(pkg string) error {
	e.exemptKeys, e.deniedKeys = newKeySet(e.ExemptKeys), newKeySet(e.DeniedKeys)
	for i, k := range e.ExemptKeys {
		if e.deniedKeys.has(k) {
			return configError("%s.Limit.ExemptKeys of limit %q must not repeat a key of its DeniedKeys, got one at index %d", pkg, e.Name, i)
		}
	}
	e.lists = e.exemptKeys != nil || e.deniedKeys != nil
	return nil
}

// DenialMessage is the message of a denial by the limit named limit, the
// same in httplimit's 429 body and grpclimit's status: never when the
// request can never succeed (quota, when positive, is the limit it
// exceeds), else retrySecs is the announced wait in seconds (0 for a
// concurrency limit that is full: nobody knows when a holder will end).
// concurrent says the limit is a concurrency limit.
func DenialMessage(limit string, concurrent, never bool, quota int, retrySecs int64) string {
	if concurrent {
		switch {
		case never && quota > 0:
			return fmt.Sprintf("request cost exceeds concurrency limit %q (quota %d in flight): it can never succeed, do not retry", limit, quota)
		case never:
			return fmt.Sprintf("request refused by concurrency limit %q: it can never succeed, do not retry", limit)
		case retrySecs > 0:
			return fmt.Sprintf("concurrency limit %q exceeded, retry in %d s", limit, retrySecs)
		default:
			return fmt.Sprintf("concurrency limit %q exceeded: too many requests in flight, retry once one ends", limit)
		}
	}
	switch {
	case never && quota > 0:
		return fmt.Sprintf("request cost exceeds rate limit %q (quota %d): it can never succeed, do not retry", limit, quota)
	case never:
		return fmt.Sprintf("request refused by rate limit %q: it can never succeed, do not retry", limit)
	default:
		return fmt.Sprintf("rate limit %q exceeded, retry in %d s", limit, retrySecs)
	}
}
