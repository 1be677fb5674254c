// Package intern keeps one copy of strings that many cached objects
// repeat, such as the profile table every Node of a GPU model publishes.
//
// unique.Make(s).Value() alone does not do it for a cache: the runtime
// drops a canonical value once no Handle to it is left, though strings
// taken from it live on, so after each collection the next equal string
// becomes a new copy, and a cache filled over many collections keeps
// about one per object. A Table keeps its strings until it is full; Weak
// is unique's canonical copy, for text decoded once and kept by few
// objects, or text whose variety no bound could cap (label values).
package intern

import (
	"sync"
	"unique"
)

// Weak returns the canonical copy of s while one is held: the runtime's
// table keeps its entries weakly, so a text no object keeps leaves it, and
// one interned again after a collection dropped its entry may become a
// second copy, which costs memory, not correctness.
func Weak(s string) string { return unique.Make(s).Value() }

// Table keeps up to max distinct strings; when a new one would pass max
// it starts over, so that text that does not repeat (a hostile or
// unusual fleet's) costs at most max strings, not the whole cache.
type Table struct {
	mu   sync.Mutex
	max  int
	seen map[string]string
}

// New returns a Table of at most max strings.
func New(max int) *Table { return &Table{max: max} }

// String returns the Table's copy of s, keeping s when it has none.
func (t *Table) String(s string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.seen[s]; ok {
		return v
	}
	if t.seen == nil || len(t.seen) >= t.max {
		t.seen = make(map[string]string, min(t.max, 16))
	}
	t.seen[s] = s
	return s
}
