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
// Values does for other values what Table does for strings.
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
type Table struct{ v Values[string] }

// New returns a Table of at most max strings.
func New(max int) *Table { return &Table{v: Values[string]{max: max}} }

// String returns the Table's copy of s, keeping s when it has none.
func (t *Table) String(s string) string { return t.v.Value(s, s) }

// Values is a Table for values other than strings, such as the maps that
// most Nodes of a fleet hold equal (their GPUs' allocatable counts), kept
// by a key the caller derives from the value: one copy then serves every
// holder. The values are shared, so their holders must treat them as
// read-only, as an informer's objects are.
type Values[V any] struct {
	mu   sync.Mutex
	max  int
	seen map[string]V
}

// NewValues returns a Values of at most max keys.
func NewValues[V any](max int) *Values[V] { return &Values[V]{max: max} }

// Value returns the value kept under key, keeping v under it when there
// is none.
func (t *Values[V]) Value(key string, v V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if kept, ok := t.seen[key]; ok {
		return kept
	}
	if t.seen == nil || len(t.seen) >= t.max {
		t.seen = make(map[string]V, min(t.max, 16))
	}
	t.seen[key] = v
	return v
}
