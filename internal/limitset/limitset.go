// Package limitset is what httplimit's middleware and grpclimit's
// interceptors share, whatever carries the request: a validated list of
// limits, the all-or-nothing decision over the limits that apply to one
// request (tiers, shadow mode, exempt and denied keys, the observer), the
// pacing of error reports, and the values of the rate-limit fields (the
// X-RateLimit-* and IETF RateLimit fields, Retry-After), written to a
// map[string][]string under the field names of the caller (http.Header's
// canonical names, gRPC metadata's lower-case ones).
//
// R is the request type (*http.Request, or grpclimit's call description).
// Nothing here allocates on the path of an admitted request with up to
// MaxInline limits.
package limitset

import (
	"context"
	"log/slog"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/report"
)

// MaxInline is how many applying limits a request can have before the
// decision allocates to track them; callers size their Charge buffers
// with it.
const MaxInline = 4

// MaxKeyLen is the longest key passed to a limiter; a longer one is
// replaced by "sha256:" and its hex SHA-256 (the same in every process).
const MaxKeyLen = 128

// Limit is one limit a request must pass, as the public packages define
// it (httplimit.Limit, grpclimit.Limit), with the key function of R.
type Limit[R any] struct {
	Name       string
	Key        func(r R) (key string, ok bool)
	Limiter    ratelimit.KeyedLimiter
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
	// Observer receives exemptions and denylist refusals (the limiters
	// report their own decisions); nil: none.
	Observer ratelimit.Observer
	// Clock times the rate-limit fields and error reports; nil: real time.
	Clock ratelimit.Clock
	// Logger and ReportEvery pace error reports, at most one per limit
	// per ReportEvery.
	Logger      report.Logger
	ReportEvery time.Duration
	// DeniedErr is the package's sentinel for a denylist refusal
	// (httplimit.ErrDenied, grpclimit.ErrDenied), the Err of the Events
	// reported for it.
	DeniedErr error
}

// Set is a validated list of limits. Safe for concurrent use.
type Set[R any] struct {
	// filled in by New
}

// Entry is one limit of a Set, ready to serve.
type Entry[R any] struct {
	Limit[R]
	// more, unexported
}

// New validates limits and returns their Set. It returns an error
// wrapping ratelimit.ErrInvalidConfig, naming cfg.Pkg, when limits is
// empty, a Limit has no Key or no Limiter (a typed nil counts as none), a
// negative Window, a name that is not printable ASCII or repeats another
// ("default" for an empty name), or an ExemptKeys entry also in its
// DeniedKeys (the message names the index, never the key).
func New[R any](cfg Config, limits []Limit[R]) (*Set[R], error) {
	panic("limitset: not built yet")
}

// Limits returns the Set's entries, in the order given to New.
func (s *Set[R]) Limits() []Entry[R] { panic("limitset: not built yet") }

// Request is one request to decide.
type Request[R any] struct {
	R   R
	Ctx context.Context
	// N is the request's cost; N <= 0 makes it exempt from every limit.
	N int
	// AllShadow treats every limit as in shadow mode (an override).
	AllShadow bool
	// Exempt makes the request exempt from every limit (an exempt
	// network, an override); the DeniedKeys of enforced limits still
	// refuse it.
	Exempt bool
}

// Outcome is what Decide settled for a request.
type Outcome uint8

const (
	// Pass: no limit applies, or the request is exempt; serve it without
	// rate-limit fields (exemptions were reported to the observer).
	Pass Outcome = iota
	// Admitted: serve it; Verdict.From >= 0 says which Decision to
	// report in the fields (WriteFields).
	Admitted
	// Denied: an enforced limit refused it (or failed closed, with
	// Verdict.Err); answer with the denial (WriteFields sets Retry-After
	// and, unless Verdict.Failed, the quota fields).
	Denied
	// Listed: a denylist (a limit's DeniedKeys) refused it; Verdict.Listed
	// names the limit. Answer "forbidden", no rate-limit fields. Reported
	// to the observer as OutcomeDenied.
	Listed
	// Canceled: the request's context ended before the limiters could
	// decide; its error is the caller's: neither admit it nor report it.
	Canceled
)

// Verdict is the decision for one request and where it came from. Its
// zero value is ready for Decide; Decide resets it.
type Verdict[R any] struct {
	// Dec is the Decision to report: the denying limit's, else the most
	// restrictive of the applying ones.
	Dec ratelimit.Decision
	// From is the index in Charges of Dec's limit; -1 when none.
	From int
	// Failed: Dec came with an error (a failure policy's Decision, an
	// unknown tier): no quota was measured, report no quota fields.
	Failed bool
	// Err is the enforced limits' error, if any (already reported).
	Err error
	// Listed is the limit whose DeniedKeys refused the request (Listed
	// outcome); nil otherwise.
	Listed *Entry[R]
	// Charges are the limits that applied, enforced ones first;
	// Enforced of them are enforced, the rest shadow.
	Charges  []Charge[R]
	Enforced int

	buf [MaxInline]Charge[R]
}

// Charge is one limit applying to one request.
type Charge[R any] struct {
	Entry   *Entry[R]
	Limiter ratelimit.KeyedLimiter // Entry's limiter, or the request's tier of it
	Key     string
	// unexported: err, listed
}

// Decide runs the limits over one request: exemptions and denylists,
// then the enforced limits all or nothing (ratelimit.AllowAll; a
// *ratelimit.Tiered resolved once to the request's tier), then, when
// they admit, the shadow limits (their limiters called with a context
// marked as shadow). Limiter errors are reported through cfg.Logger,
// paced, with attrs added to each report (such as the method); never
// the key. With compete (shadow headers, or when no enforced limit
// applies) a more restrictive shadow Decision becomes the one to report.
func (s *Set[R]) Decide(req *Request[R], v *Verdict[R], shadowFields bool, attrs func() []slog.Attr) Outcome {
	panic("limitset: not built yet")
}

// FieldSet selects the rate-limit fields to write (httplimit.HeaderSet
// and grpclimit's set convert to it).
type FieldSet uint8

// The field sets; Retry-After is written on every denial that can be
// retried, whatever the set.
const (
	XRateLimitFields FieldSet = 1 << iota
	IETFFields
	NoFields  FieldSet = 0
	AllFields          = XRateLimitFields | IETFFields
)

// FieldNames are the keys the fields are stored under.
type FieldNames struct {
	XLimit, XRemaining, XReset, Policy, RateLimit, RetryAfter string
}

// HTTPNames are the canonical http.Header keys; GRPCNames gRPC metadata's
// lower-case keys ("x-ratelimit-limit", "ratelimit-policy", "ratelimit",
// "retry-after", ...).
var (
	HTTPNames = FieldNames{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit", "Retry-After"}
	GRPCNames = FieldNames{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy", "ratelimit", "retry-after"}
)

// WriteFields sets on h the fields of set for v's Decision (as the
// middleware writes them: X-RateLimit-Reset in Unix seconds rounded up,
// RateLimit-Policy with the limit's window at the Set's clock now,
// Retry-After on a retryable denial), under names. A Failed verdict
// writes only Retry-After. A shadow limit's denial is reported as an
// admission. It does nothing when v.From < 0. Beyond cached constant
// values it allocates one string and one []string backing array.
func (s *Set[R]) WriteFields(h map[string][]string, names *FieldNames, set FieldSet, v *Verdict[R]) {
	panic("limitset: not built yet")
}

// RetryAfterSeconds returns the Retry-After value, in seconds, for a
// denied Decision: RetryAfter rounded up to a whole second, and at least
// 1. It returns 0 for an admitted Decision and for one that can never
// succeed (ratelimit.RetryNever).
func RetryAfterSeconds(d ratelimit.Decision) int64 { panic("limitset: not built yet") }

// ObserveAll reports to the observer, for every limit, that the request
// was let through as exempt (ratelimit.OutcomeExempt) or refused by a
// denylist (ratelimit.OutcomeDenied); for a denied client network. No-op
// without an observer.
func (s *Set[R]) ObserveAll(ctx context.Context, o ratelimit.Outcome, n int) {
	panic("limitset: not built yet")
}
