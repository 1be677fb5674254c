package fallback

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/platform/textcut"
)

// Bounds on what the decision writes, so that no input makes a message, a
// warning or a log line grow with it. The API server keeps at most 4096
// characters of warnings per request and cuts each to 256 once over.
const (
	// maxListed is how many items a list in a message names before "and N more".
	maxListed = 4
	// maxQuoted is the most bytes of a pod-supplied string a message
	// quotes: names are not validated before mutating admission.
	maxQuoted = 64
	// maxWarning is the most bytes of one warning.
	maxWarning = 1000
	// maxMessage is the most bytes of a denial message.
	maxMessage = 4096
)

// quote returns s in double quotes when it is short and printable, as %q
// does, and otherwise its first bytes (on a rune boundary) and how many
// more there were.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	p := textcut.Prefix(s, maxQuoted)
	return fmt.Sprintf("%s...(%d more bytes)", strconv.Quote(p), len(s)-len(p))
}

// name is a resource name for a message: as it is when it parses (short
// and plain by construction), quoted and clipped otherwise.
func name(r corev1.ResourceName) string {
	if _, ok := ParseResource(r); ok {
		return string(r)
	}
	return quote(string(r))
}

// listed joins the first maxListed items and says how many more there were.
func listed(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:maxListed], ", "), len(items)-maxListed)
}

// count is "1 node", "2 nodes".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// clip cuts s to at most n bytes on a rune boundary, ending in "...".
func clip(s string, n int) string { return textcut.Bytes(s, n, "...") }
