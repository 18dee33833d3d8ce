package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
)

// A login limit that counts only failures: 3 failed attempts an hour per
// user. Successful logins are never refused; after the third failure,
// the next attempt is refused with 429 before the handler runs, whatever
// the password.
func ExampleLimit_failures() {
	mock := clock.NewMock() // frozen, so that the figures are exact
	failed, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(3, time.Hour), ratelimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Limit{{
		Name:    "login",
		Key:     httplimit.KeyByHeader("X-User"),
		Limiter: failed,
		Count: func(status, _ int) int {
			if status >= 400 {
				return 1
			}
			return 0
		},
	}}, httplimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") != "secret" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
		}
	}))
	login := func(password string) {
		r := httptest.NewRequest("POST", "/login", nil)
		r.Header.Set("X-User", "alice")
		r.Header.Set("X-Password", password)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(password, w.Code, w.Header().Get("RateLimit"))
	}
	for range 3 {
		login("secret")
	}
	for range 3 {
		login("guess")
	}
	login("secret")
	// Output:
	// secret 200 "login";r=2;t=3600
	// secret 200 "login";r=2;t=3600
	// secret 200 "login";r=2;t=3600
	// guess 401 "login";r=2;t=3600
	// guess 401 "login";r=1;t=3600
	// guess 401 "login";r=0;t=3600
	// secret 429 "login";r=0;t=3600
}

// A token budget: 10,000 tokens a minute per API key. Each request
// reserves its max_tokens (WithCost) before the handler runs; the handler
// reports the tokens it used, which are charged instead.
func ExampleReportCost() {
	mock := clock.NewMock()
	tokens, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(10000, time.Minute), ratelimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Limit{{
		Name:    "tokens",
		Key:     httplimit.KeyByHeader("X-API-Key"),
		Limiter: tokens,
		Count:   func(_, cost int) int { return cost },
	}}, httplimit.WithClock(mock), httplimit.WithCost(func(*http.Request) int { return 4000 })) // max_tokens
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ... the completion used 1,250 tokens:
		if err := httplimit.ReportCost(r.Context(), 1250); err != nil {
			log.Print(err)
		}
	}))
	for range 2 {
		r := httptest.NewRequest("POST", "/v1/completions", nil)
		r.Header.Set("X-API-Key", "key-123")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		d, _ := tokens.Peek(context.Background(), "key-123", 0)
		fmt.Println(w.Code, w.Header().Get("RateLimit"), "then remaining:", d.Remaining)
	}
	// Output:
	// 200 "tokens";r=6000;t=60 then remaining: 8750
	// 200 "tokens";r=4750;t=60 then remaining: 7500
}
