// Package apiwarn collects the warnings the API server sends back (the
// Warning headers of its responses) so that tests can fail when migflex
// sends an API or a field the server calls deprecated: the check the
// deprecation policy gives a cluster operator before an upgrade removes it.
//
// Warnings arrive two ways: through client-go, as a rest.Config's
// WarningHandlerWithContext (a Collector is one), and as the "Warning:"
// lines kubectl and helm print on stderr for the same headers (AddOutput).
package apiwarn

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Warning is one warning and where it came from (a client, or the command
// that printed it).
type Warning struct {
	Source  string
	Message string
}

func (w Warning) String() string { return fmt.Sprintf("%s: %s", w.Source, w.Message) }

// deprecation matches the API server's wording for a deprecated API or
// field: "<group/version> <Kind> is deprecated in v1.X+, unavailable in
// v1.Y+; use ...", a field "deprecated since v1.X", an annotation
// "non-functional in v1.X+".
var deprecation = regexp.MustCompile(`(?i)\bdeprecated\b|non-functional in v1\.|unavailable in v1\.`)

// IsDeprecation reports whether message names a deprecated API or field.
func IsDeprecation(message string) bool { return deprecation.MatchString(message) }

// Collector keeps every warning it is given; safe for concurrent use.
type Collector struct {
	// Source names the client whose headers HandleWarningHeaderWithContext
	// receives.
	Source string

	mu   sync.Mutex
	seen []Warning
}

// HandleWarningHeaderWithContext implements rest.WarningHandlerWithContext.
// Only code 299 carries a warning (RFC 7234); client-go passes no other.
func (c *Collector) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, message string) {
	if code != 299 || message == "" {
		return
	}
	c.add(Warning{Source: c.Source, Message: message})
}

// AddOutput records the warnings in a command's stderr: kubectl prints
// each as "Warning: <message>"; helm, through client-go's default
// handler, as a klog line ending in `"Warning: <message>"` or
// `Warning: <message>`.
func (c *Collector) AddOutput(source, stderr string) {
	for _, line := range strings.Split(stderr, "\n") {
		_, msg, ok := strings.Cut(line, "Warning: ")
		if !ok {
			continue
		}
		c.add(Warning{Source: source, Message: strings.TrimSuffix(strings.TrimSpace(msg), `"`)})
	}
}

func (c *Collector) add(w Warning) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, w)
}

// All returns every warning collected so far.
func (c *Collector) All() []Warning {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Warning(nil), c.seen...)
}

// Take returns every warning collected so far and forgets them.
func (c *Collector) Take() []Warning {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.seen
	c.seen = nil
	return out
}

// Deprecations returns the warnings in ws that name a deprecated API or
// field.
func Deprecations(ws []Warning) []Warning {
	var out []Warning
	for _, w := range ws {
		if IsDeprecation(w.Message) {
			out = append(out, w)
		}
	}
	return out
}
