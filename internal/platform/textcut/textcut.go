// Package textcut cuts text to a size in bytes without splitting a UTF-8
// sequence, the one way every message, reason, Event and quote that echoes
// unbounded input is bounded. It is pure.
package textcut

import "unicode/utf8"

// Prefix returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 sequence: s itself when it is short enough, "" when n
// is not positive.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Bytes returns s when it has at most n bytes, and otherwise its Prefix
// followed by marker (" ... (truncated)", "..."), n bytes at most in all
// when marker fits in n.
func Bytes(s string, n int, marker string) string {
	if len(s) <= n {
		return s
	}
	return Prefix(s, n-len(marker)) + marker
}
