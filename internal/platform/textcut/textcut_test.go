package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPrefix(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abc", 3, "abc"},
		{"ascii", "abcdef", 4, "abcd"},
		{"zero", "abc", 0, ""},
		{"negative", "abc", -3, ""},
		{"empty", "", 0, ""},
		// é is 2 bytes, 世 3 and 🙂 4: a cut inside one backs off to its start.
		{"inside two bytes", "aé", 2, "a"},
		{"after two bytes", "aéb", 3, "aé"},
		{"inside three bytes", "a世b", 2, "a"},
		{"inside three bytes, last byte", "a世b", 3, "a"},
		{"inside four bytes", "🙂x", 3, ""},
		{"after four bytes", "🙂x", 4, "🙂"},
		// Invalid UTF-8 is cut where asked: continuation bytes are backed
		// off from, a lone one at the start leaves nothing.
		{"lone continuation bytes", "\x80\x80\x80", 2, ""},
		{"invalid lead byte", "a\xffb", 2, "a\xff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Prefix(tc.s, tc.n); got != tc.want {
				t.Errorf("Prefix(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}

func TestBytes(t *testing.T) {
	const marker = " ... (truncated)"
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"short", "abc", 20, "abc"},
		{"exact", strings.Repeat("a", 20), 20, strings.Repeat("a", 20)},
		{"one over", strings.Repeat("a", 21), 20, "aaaa" + marker},
		{"rune at the cut", "aaaé" + strings.Repeat("b", 20), 20, "aaa" + marker},
		{"marker longer than n", strings.Repeat("a", 30), 4, marker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Bytes(tc.s, tc.n, marker); got != tc.want {
				t.Errorf("Bytes(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}

// A hostile size: every cut of a long multi-byte string is valid UTF-8 and
// within the bound.
func TestBytesLongMultibyte(t *testing.T) {
	s := strings.Repeat("é世🙂", 5000)
	for n := 0; n < 64; n++ {
		got := Bytes(s, 4096-n, "...")
		if len(got) > 4096-n || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
			t.Fatalf("Bytes(long, %d): %d bytes, valid %v, ends %q", 4096-n, len(got), utf8.ValidString(got), got[len(got)-5:])
		}
	}
}
