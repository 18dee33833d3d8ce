package httplimit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The header dialects a dialectServer speaks. The draft-6, draft-7 and
// draft-8 shapes are the ones express-rate-limit (v8) writes for its
// standardHeaders modes of those names; x-epoch is its legacy X-RateLimit
// set (and GitHub's); x-delta is the same set with a delay in seconds, as
// some APIs send it; several is draft-8 with two policies in one field, as
// two stacked express-rate-limit instances append them; bare is a gateway
// that refuses with a plain 429.
//
// The newest published IETF draft (-11) still names the RateLimit
// parameters r and t, as draft-8 does, so there is no separate mode for
// it. (An unpublished editor's copy renames them a and w; no mode follows
// that until it is published.)
const (
	modeDraft6  = "draft-6"
	modeDraft7  = "draft-7"
	modeDraft8  = "draft-8"
	modeXDelta  = "x-delta"
	modeXEpoch  = "x-epoch"
	modeSeveral = "several"
	modeBare    = "bare"
)

// pacingModes are the modes in the order the study reports them.
var pacingModes = []string{modeDraft6, modeDraft7, modeDraft8, modeXDelta, modeXEpoch, modeSeveral, modeBare}

// The study's clock starts. aligned is a whole second, so that every
// window ends on a whole second; offset is 0.4 s later, so that a reset
// written as a whole Unix second (x-epoch) is up to 0.6 s late.
var (
	pacingAligned = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pacingOffset  = pacingAligned.Add(400 * time.Millisecond)
)

// dialectPolicy is a quota of q requests per window w.
type dialectPolicy struct {
	q int
	w time.Duration
}

// name is the policy's name in the draft-8 fields, as express-rate-limit
// makes it by default: "5-in-3sec".
func (p dialectPolicy) name() string {
	return fmt.Sprintf("%d-in-%dsec", p.q, ceilSeconds(p.w))
}

// defaultPolicies are the policies of mode unless the test names others:
// 5 per 3 s, and for several also 8 per 30 s, which binds from the 8th
// request on.
func defaultPolicies(mode string) []dialectPolicy {
	if mode == modeSeveral {
		return []dialectPolicy{{5, 3 * time.Second}, {8, 30 * time.Second}}
	}
	return []dialectPolicy{{5, 3 * time.Second}}
}

// dialectWindow is one policy's current fixed window.
type dialectWindow struct {
	dialectPolicy
	end   time.Time // zero until the first request
	count int       // requests counted in the window, refused ones too
}

// serverArrival is one request as the server saw it.
type serverArrival struct {
	at     time.Time // on the mock clock
	status int
}

// hostileHint makes a dialectServer lie: every answer says the quota is
// spent (remaining 0) and carries reset in place of the true reset value
// of its fields (in every item, for several). When retryAfter is set the
// first answer is a 429 carrying it as Retry-After; every other answer is
// a 200, whatever the count.
type hostileHint struct {
	reset      string // "" keeps the true value
	retryAfter string
}

// dialectServer is a fixed-window limiter in front of a handler answering
// "ok", written the way express-rate-limit's memory store works, for one
// client: each policy's window starts with the first request after the
// previous window ended (a request at exactly the end starts a new one),
// and every request is counted, refused ones too (express-rate-limit's
// default: skipFailedRequests is off, and it increments before it
// compares). A request is answered 200 while every policy's count is at
// most its quota, else 429. Both carry the fields of the mode; a 429 also
// carries Retry-After (delay-seconds rounded up, until every window that
// is full has ended) unless noRetryAfter is set or the mode is bare. Time
// is read from clk, and the Date field is written from it too, so that a
// client correcting for latency with Date sees the mock's time.
type dialectServer struct {
	mode         string
	noRetryAfter bool
	clk          ratelimit.Clock

	mu       sync.Mutex
	hostile  *hostileHint // nil: an honest server; set with lie
	windows  []dialectWindow
	arrivals []serverArrival
}

// startDialectServer starts a loopback dialectServer, closed when t ends.
// With no policies it uses defaultPolicies(mode).
func startDialectServer(t testing.TB, mode string, clk ratelimit.Clock, noRetryAfter bool, policies ...dialectPolicy) (*dialectServer, *httptest.Server) {
	t.Helper()
	if len(policies) == 0 {
		policies = defaultPolicies(mode)
	}
	s := &dialectServer{mode: mode, noRetryAfter: noRetryAfter, clk: clk}
	for _, p := range policies {
		s.windows = append(s.windows, dialectWindow{dialectPolicy: p})
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

// windowState is what one policy's fields say about one answer.
type windowState struct {
	dialectPolicy
	remaining int
	end       time.Time
}

func (s *dialectServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := s.clk.Now()

	s.mu.Lock()
	status := http.StatusOK
	states := make([]windowState, len(s.windows))
	var retryAt time.Time // when every full window has ended
	for i := range s.windows {
		win := &s.windows[i]
		if win.end.IsZero() || !now.Before(win.end) {
			win.end, win.count = now.Add(win.w), 0
		}
		win.count++
		if win.count > win.q {
			status = http.StatusTooManyRequests
		}
		if win.count >= win.q && win.end.After(retryAt) {
			retryAt = win.end
		}
		states[i] = windowState{dialectPolicy: win.dialectPolicy, remaining: max(win.q-win.count, 0), end: win.end}
	}
	retryAfter := strconv.FormatInt(ceilSeconds(retryAt.Sub(now)), 10)
	reset := func(st windowState) string { return strconv.FormatInt(ceilSeconds(st.end.Sub(now)), 10) }
	if s.mode == modeXEpoch {
		reset = func(st windowState) string { return strconv.FormatInt(ceilUnix(st.end), 10) }
	}
	if h := s.hostile; h != nil {
		status = http.StatusOK
		if h.retryAfter != "" && len(s.arrivals) == 0 {
			status, retryAfter = http.StatusTooManyRequests, h.retryAfter
		}
		for i := range states {
			states[i].remaining = 0
		}
		if h.reset != "" {
			reset = func(windowState) string { return h.reset }
		}
	}
	s.arrivals = append(s.arrivals, serverArrival{at: now, status: status})
	s.mu.Unlock()

	hdr := w.Header()
	hdr.Set("Date", now.UTC().Format(http.TimeFormat))
	writeDialectFields(hdr, s.mode, states, reset, partitionKey(r.RemoteAddr))
	if status == http.StatusTooManyRequests && !s.noRetryAfter && s.mode != modeBare {
		hdr.Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	if status == http.StatusOK {
		_, _ = io.WriteString(w, "ok")
	} else {
		_, _ = io.WriteString(w, "Too Many Requests")
	}
}

// writeDialectFields sets the rate-limit fields of mode on h: those of
// states[0], or, for several, of every state. reset gives a state's reset
// value as the mode writes it.
func writeDialectFields(h http.Header, mode string, states []windowState, reset func(windowState) string, pk string) {
	st := states[0]
	q, w, rem := strconv.Itoa(st.q), strconv.FormatInt(ceilSeconds(st.w), 10), strconv.Itoa(st.remaining)
	switch mode {
	case modeDraft6:
		h.Set("RateLimit-Policy", q+";w="+w)
		h.Set("RateLimit-Limit", q)
		h.Set("RateLimit-Remaining", rem)
		h.Set("RateLimit-Reset", reset(st))
	case modeDraft7:
		h.Set("RateLimit-Policy", q+";w="+w)
		h.Set("RateLimit", "limit="+q+", remaining="+rem+", reset="+reset(st))
	case modeDraft8, modeSeveral:
		// express-rate-limit's spacing: a space after each ';', and
		// stacked limiters' items joined by ", ".
		var policy, limit []string
		for _, st := range states {
			name := strconv.Quote(st.name())
			policy = append(policy, fmt.Sprintf("%s; q=%d; w=%d; pk=:%s:", name, st.q, ceilSeconds(st.w), pk))
			limit = append(limit, fmt.Sprintf("%s; r=%d; t=%s", name, st.remaining, reset(st)))
		}
		h.Set("RateLimit-Policy", strings.Join(policy, ", "))
		h.Set("RateLimit", strings.Join(limit, ", "))
	case modeXDelta, modeXEpoch:
		h.Set("X-RateLimit-Limit", q)
		h.Set("X-RateLimit-Remaining", rem)
		h.Set("X-RateLimit-Reset", reset(st))
	case modeBare:
	default:
		panic("dialectServer: unknown mode " + mode)
	}
}

// partitionKey is the pk parameter express-rate-limit writes for a client
// keyed by its IP: the base64 of the first 12 hex digits of the SHA-256 of
// the key.
func partitionKey(remoteAddr string) string {
	ip, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		ip = remoteAddr
	}
	sum := sha256.Sum256([]byte(ip))
	return base64.StdEncoding.EncodeToString([]byte(hex.EncodeToString(sum[:])[:12]))
}

// ceilSeconds is d in whole seconds rounded up, and at least 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ceilUnix is t's Unix time in whole seconds rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// lie makes s answer as h says from now on.
func (s *dialectServer) lie(h hostileHint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hostile = &h
}

// Arrivals returns the requests the server has seen, in order.
func (s *dialectServer) Arrivals() []serverArrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]serverArrival(nil), s.arrivals...)
}

// Counts returns how many requests the server answered 200 and 429.
func (s *dialectServer) Counts() (ok, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.arrivals {
		if a.status == http.StatusOK {
			ok++
		} else {
			refused++
		}
	}
	return ok, refused
}

// Policies returns the server's policies.
func (s *dialectServer) Policies() []dialectPolicy {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]dialectPolicy, len(s.windows))
	for i, w := range s.windows {
		ps[i] = w.dialectPolicy
	}
	return ps
}

// TestDialectServer checks the harness itself: the fields, statuses and
// windows of every mode, step by step on the mock clock.
func TestDialectServer(t *testing.T) {
	t.Parallel()
	// express-rate-limit's own test value for the key "foo".
	assert.Equal(t, "MmMyNmI0NmI2OGZm", partitionKey("foo"))
	pk := partitionKey("127.0.0.1:1") // the loopback client's key

	type step struct {
		advance time.Duration // before the request
		status  int
		hdr     map[string]string // "" means absent
	}
	ok := func(hdr map[string]string) step { return step{status: 200, hdr: hdr} }
	refused := func(hdr map[string]string) step { return step{status: 429, hdr: hdr} }
	after := func(d time.Duration, s step) step { s.advance = d; return s }
	times := func(n int, s step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	seq := func(parts ...any) []step {
		var out []step
		for _, p := range parts {
			switch p := p.(type) {
			case step:
				out = append(out, p)
			case []step:
				out = append(out, p...)
			}
		}
		return out
	}
	d6 := func(rem, reset string) map[string]string {
		return map[string]string{"RateLimit-Policy": "5;w=3", "RateLimit-Limit": "5", "RateLimit-Remaining": rem, "RateLimit-Reset": reset}
	}
	d8 := func(r, tt string) map[string]string {
		return map[string]string{
			"RateLimit-Policy": `"5-in-3sec"; q=5; w=3; pk=:` + pk + `:`,
			"RateLimit":        `"5-in-3sec"; r=` + r + `; t=` + tt,
		}
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	unix := pacingAligned.Unix()
	covered := map[string]bool{}
	for _, tc := range []struct {
		name  string
		mode  string
		noRA  bool
		start time.Time
		steps []step
		lie   *hostileHint
	}{
		{"draft-6", modeDraft6, false, pacingAligned, seq(
			ok(d6("4", "3")), times(3, ok(nil)), ok(d6("0", "3")),
			refused(with(d6("0", "3"), "Retry-After", "3")),
			after(1500*time.Millisecond, refused(with(d6("0", "2"), "Retry-After", "2"))), // refused ones count, and the window does not move
			after(1500*time.Millisecond, ok(d6("4", "3"))),                                // a new window at exactly the end
		), nil},
		{"draft-7", modeDraft7, false, pacingAligned, seq(
			ok(map[string]string{"RateLimit-Policy": "5;w=3", "RateLimit": "limit=5, remaining=4, reset=3", "Retry-After": ""}),
			times(4, ok(nil)),
			refused(map[string]string{"RateLimit": "limit=5, remaining=0, reset=3", "Retry-After": "3"}),
		), nil},
		{"draft-8", modeDraft8, false, pacingAligned, seq(
			ok(d8("4", "3")), times(3, ok(nil)), ok(d8("0", "3")),
			after(time.Second, refused(with(d8("0", "2"), "Retry-After", "2"))),
		), nil},
		{"draft-8 no Retry-After", modeDraft8, true, pacingAligned, seq(
			times(5, ok(nil)), refused(with(d8("0", "3"), "Retry-After", "")),
		), nil},
		{"x-delta", modeXDelta, false, pacingAligned, seq(
			ok(map[string]string{"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4", "X-RateLimit-Reset": "3", "RateLimit": "", "RateLimit-Policy": ""}),
			times(4, ok(nil)),
			after(2500*time.Millisecond, refused(map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1", "Retry-After": "1"})),
		), nil},
		{"x-epoch", modeXEpoch, false, pacingAligned, seq(
			ok(map[string]string{"X-RateLimit-Remaining": "4", "X-RateLimit-Reset": fmt.Sprint(unix + 3)}),
			times(4, ok(nil)),
			refused(map[string]string{"X-RateLimit-Reset": fmt.Sprint(unix + 3), "Retry-After": "3"}),
		), nil},
		{"x-epoch offset", modeXEpoch, false, pacingOffset, seq(
			ok(map[string]string{"X-RateLimit-Reset": fmt.Sprint(unix + 4), "Date": pacingAligned.Format(http.TimeFormat)}), // 3.4 s rounded up
			times(4, ok(nil)),
			refused(map[string]string{"X-RateLimit-Reset": fmt.Sprint(unix + 4), "Retry-After": "3"}),
		), nil},
		{"x-epoch offset no Retry-After", modeXEpoch, true, pacingOffset, seq(
			times(5, ok(nil)), refused(map[string]string{"X-RateLimit-Remaining": "0", "Retry-After": ""}),
		), nil},
		{"several", modeSeveral, false, pacingAligned, seq(
			ok(map[string]string{
				"RateLimit-Policy": `"5-in-3sec"; q=5; w=3; pk=:` + pk + `:, "8-in-30sec"; q=8; w=30; pk=:` + pk + `:`,
				"RateLimit":        `"5-in-3sec"; r=4; t=3, "8-in-30sec"; r=7; t=30`,
			}),
			times(4, ok(nil)),
			after(3*time.Second, ok(map[string]string{"RateLimit": `"5-in-3sec"; r=4; t=3, "8-in-30sec"; r=2; t=27`})),
			ok(nil),
			ok(map[string]string{"RateLimit": `"5-in-3sec"; r=2; t=3, "8-in-30sec"; r=0; t=27`}), // the 8th: the long policy is spent
			refused(map[string]string{"RateLimit": `"5-in-3sec"; r=1; t=3, "8-in-30sec"; r=0; t=27`, "Retry-After": "27"}),
			after(27*time.Second, ok(map[string]string{"RateLimit": `"5-in-3sec"; r=4; t=3, "8-in-30sec"; r=7; t=30`})),
		), nil},
		{"draft-8 lying", modeDraft8, false, pacingAligned, seq(
			refused(with(d8("0", "abc"), "Retry-After", "1000000000000")),
			times(7, ok(with(d8("0", "abc"), "Retry-After", ""))), // past the quota: a liar's status ignores it
		), &hostileHint{reset: "abc", retryAfter: "1000000000000"}},
		{"x-epoch lying", modeXEpoch, false, pacingAligned, seq(
			ok(map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": fmt.Sprint(unix + 3)}), // reset kept
		), &hostileHint{}},
		{"bare", modeBare, false, pacingAligned, seq(
			ok(map[string]string{"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Remaining": "", "RateLimit-Remaining": "", "Retry-After": ""}),
			times(4, ok(nil)),
			refused(map[string]string{"RateLimit": "", "RateLimit-Policy": "", "X-RateLimit-Remaining": "", "RateLimit-Remaining": "", "Retry-After": ""}),
		), nil},
	} {
		covered[tc.mode] = true
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := fakeclock.NewAnnouncing(tc.start)
			s, srv := startDialectServer(t, tc.mode, clk, tc.noRA)
			if tc.lie != nil {
				s.lie(*tc.lie)
			}
			client := srv.Client()
			var want []serverArrival
			for i, st := range tc.steps {
				clk.Add(st.advance)
				resp, err := client.Get(srv.URL)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				assert.Equal(t, st.status, resp.StatusCode, "request %d", i+1)
				for k, v := range st.hdr {
					assert.Equal(t, v, resp.Header.Get(k), "request %d: %s", i+1, k)
				}
				want = append(want, serverArrival{at: clk.Now(), status: st.status})
			}
			assert.Equal(t, want, s.Arrivals())
		})
	}
	for _, mode := range pacingModes {
		assert.True(t, covered[mode], "mode %s not checked", mode)
	}
}
