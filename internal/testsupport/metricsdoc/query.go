package metricsdoc

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// keywords are PromQL's words that are neither functions (always followed
// by a parenthesis) nor metrics.
var keywords = []string{"and", "or", "unless", "bool", "offset", "on", "ignoring", "group_left", "group_right", "by", "without", "atan2", "inf", "nan"}

// QueryMetrics returns the metric names a PromQL expression selects,
// sorted, each once: the identifiers left once strings, label matchers
// ({...}), ranges ([...]), label lists (by, without, on, ignoring,
// group_left, group_right (...)), numbers, keywords and function calls are
// taken out. It reads the expressions migflex ships (alerts, dashboard
// panels), not every PromQL: Grafana's $variables are to be substituted
// first, and a name selected as {__name__="..."} is not seen.
func QueryMetrics(expr string) ([]string, error) {
	var names []string
	s := []rune(expr)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#': // a comment runs to the end of the line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '{' || c == '[':
			end, err := skipGroup(s, i)
			if err != nil {
				return nil, err
			}
			i = end
		case unicode.IsDigit(c) || (c == '.' && i+1 < len(s) && unicode.IsDigit(s[i+1])):
			for i < len(s) && (unicode.IsLetter(s[i]) || unicode.IsDigit(s[i]) || s[i] == '.' || s[i] == '_' ||
				((s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E'))) {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(s) && isIdent(s[i]) {
				i++
			}
			word := string(s[start:i])
			next := i
			for next < len(s) && unicode.IsSpace(s[next]) {
				next++
			}
			switch lower := strings.ToLower(word); {
			case slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, lower):
				if next < len(s) && s[next] == '(' {
					end, err := skipGroup(s, next)
					if err != nil {
						return nil, err
					}
					i = end
				}
			case slices.Contains(keywords, lower):
			case next < len(s) && s[next] == '(', followedByClause(s, next):
				// a function, or an aggregation (sum by (le) (...))
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
		default:
			i++
		}
	}
	slices.Sort(names)
	return names, nil
}

// followedByClause says whether the word at i is by or without: what
// comes before it is an aggregation.
func followedByClause(s []rune, i int) bool {
	j := i
	for j < len(s) && isIdent(s[j]) {
		j++
	}
	w := strings.ToLower(string(s[i:j]))
	return w == "by" || w == "without"
}

func isIdentStart(c rune) bool { return unicode.IsLetter(c) || c == '_' || c == ':' }
func isIdent(c rune) bool      { return isIdentStart(c) || unicode.IsDigit(c) }

// skipString returns the index after the string literal starting at i.
func skipString(s []rune, i int) (int, error) {
	quote := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && quote != '`':
			j++
		case s[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d", i)
}

// skipGroup returns the index after the bracket that closes the one at i,
// strings inside included.
func skipGroup(s []rune, i int) (int, error) {
	closing := map[rune]rune{'{': '}', '[': ']', '(': ')'}
	var stack []rune
	for j := i; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case closing[c] != 0:
			stack = append(stack, closing[c])
		case c == '}' || c == ']' || c == ')':
			if len(stack) == 0 || stack[len(stack)-1] != c {
				return 0, fmt.Errorf("unbalanced %q at offset %d", c, j)
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unclosed %q at offset %d", s[i], i)
}

// Series are the names of the series a documented metric exposes:
// histograms as <name>_bucket, _sum and _count, summaries as the name
// and its _sum and _count, others as the name.
func Series(documented map[string]Metric) map[string]string {
	out := map[string]string{}
	for name, m := range documented {
		switch m.Type {
		case "histogram":
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				out[name+suffix] = name
			}
		case "summary":
			for _, suffix := range []string{"", "_sum", "_count"} {
				out[name+suffix] = name
			}
		default:
			out[name] = name
		}
	}
	return out
}
