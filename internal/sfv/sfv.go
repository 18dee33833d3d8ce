// Package sfv holds the syntax the header fields this module reads share:
// lists split at separators outside quoted strings (RFC 9110 quoted-string,
// RFC 8941 String, both with backslash quoted-pairs). internal/hints splits
// the rate-limit fields with it, internal/clientip the Forwarded field.
package sfv

// Cut cuts s around the first sep outside a quoted string, returning the
// text before and after it; found is false, and before is all of s, when
// there is none.
func Cut(s string, sep byte) (before, after string, found bool) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// LastElement returns where the last comma-separated element of s begins,
// scanning from the right; quoted strings may hold commas. It reports
// false when a quoted string is still open at the start of s.
func LastElement(s string) (int, bool) {
	quoted := false
	for j := len(s) - 1; j >= 0; j-- {
		c := s[j]
		if quoted {
			if c == '"' && !escapedAt(s, j) {
				quoted = false
			}
			continue
		}
		switch c {
		case '"':
			quoted = true
		case ',':
			return j + 1, true
		}
	}
	return 0, !quoted
}

// escapedAt reports whether s[j] is preceded by an odd number of
// backslashes (a quoted-pair inside a quoted string).
func escapedAt(s string, j int) bool {
	n := 0
	for j--; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}
