package limitset

import "strings"

// AppendKeyPart appends s, the i-th part of a combined key (the key
// helpers' Combine), to b: parts are separated by '|', and a '|' or '\'
// within a part is escaped with '\', so that distinct lists of parts
// never make the same key.
func AppendKeyPart(b *strings.Builder, i int, s string) {
	if i > 0 {
		b.WriteByte('|')
	}
	if !strings.ContainsAny(s, `|\`) {
		b.WriteString(s)
		return
	}
	for j := 0; j < len(s); j++ {
		if s[j] == '|' || s[j] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[j])
	}
}
