//go:build !go1.23

package httplimit

import "net/http"

// routePattern returns "": before Go 1.23 http.Request does not carry the
// pattern the mux matched.
func routePattern(*http.Request) string { return "" }

// requestHasPattern reports whether routePattern can see the mux's pattern.
const requestHasPattern = false
