//go:build go1.23

package httplimit

import "net/http"

// routePattern returns the pattern the mux matched for r, if any
// (http.Request.Pattern, Go 1.23).
func routePattern(r *http.Request) string { return r.Pattern }

// requestHasPattern reports whether routePattern can see the mux's pattern.
const requestHasPattern = true
