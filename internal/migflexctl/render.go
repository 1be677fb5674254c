package migflexctl

import (
	"strings"
	"unicode/utf8"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// width is the terminal width the text output is laid out for.
const width = 80

// style colours words on a terminal; its zero value colours nothing.
type style struct{ on bool }

var colors = style{on: true}

// ANSI colours, each escape the same length so that a tabwriter column
// of coloured cells stays aligned (plain cells use the default colour).
const (
	ansiRed     = "\x1b[31m"
	ansiGreen   = "\x1b[32m"
	ansiYellow  = "\x1b[33m"
	ansiDefault = "\x1b[39m"
	ansiReset   = "\x1b[0m"
)

func (s style) paint(code, text string) string {
	if !s.on {
		return text
	}
	return code + text + ansiReset
}

// state colours a config state: success green, failed red, pending yellow.
func (s style) state(v string) string {
	switch v {
	case nodeinfo.StateSuccess:
		return s.paint(ansiGreen, v)
	case nodeinfo.StateFailed:
		return s.paint(ansiRed, v)
	case nodeinfo.StatePending:
		return s.paint(ansiYellow, v)
	}
	return s.paint(ansiDefault, v)
}

// health colours a device's health; every value is painted, so the
// column stays aligned.
func (s style) health(v string) string {
	switch v {
	case nodeinfo.HealthHealthy:
		return s.paint(ansiGreen, v)
	case nodeinfo.HealthUnhealthy:
		return s.paint(ansiRed, v)
	}
	return s.paint(ansiDefault, v)
}

// clip cuts s to at most n runes, ending with "…" when cut.
func clip(s string, n int) string {
	if n < 1 {
		n = 1
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// wrap breaks text into lines of at most width runes, the first
// starting with first and the rest with an indent as wide; a line in
// text starts a new line.
func wrap(first, text string) []string {
	indent := strings.Repeat(" ", utf8.RuneCountInString(first))
	var out []string
	prefix := first
	for _, para := range strings.Split(strings.TrimSpace(text), "\n") {
		line := prefix
		empty := true
		for _, word := range strings.Fields(para) {
			if !empty && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width {
				out = append(out, line)
				line, empty = indent, true
			}
			// A word wider than a line (a CEL expression's term) is
			// broken where the line ends.
			for room := width - utf8.RuneCountInString(line); empty && room > 0 && utf8.RuneCountInString(word) > room; room = width - len(indent) {
				r := []rune(word)
				out = append(out, line+string(r[:room]))
				line, word = indent, string(r[room:])
			}
			if !empty {
				line += " "
			}
			line += word
			empty = false
		}
		out = append(out, line)
		prefix = indent
	}
	return out
}

// shortID is a device UUID cut for an 80-column table ("MIG-5c1b2a0e…");
// -o wide shows it whole.
func shortID(id string, wide bool) string {
	if id == "" {
		return "-"
	}
	if wide {
		return id
	}
	return clip(id, 13)
}
