package intern

import (
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

func TestTable(t *testing.T) {
	tab := New(2)
	a := strings.Repeat("x", 100)
	first := tab.String(a)
	// A collection between the two, which would drop a canonical value
	// unique.Make handed out.
	runtime.GC()
	if got := tab.String(strings.Clone(a)); unsafe.StringData(got) != unsafe.StringData(first) {
		t.Error("an equal string was kept twice")
	}
	tab.String("b")
	// Full: a third distinct string starts the table over.
	tab.String("c")
	if got := tab.String(strings.Clone(a)); unsafe.StringData(got) == unsafe.StringData(first) {
		t.Error("the table kept more than its bound")
	}
	if len(tab.seen) > 2 {
		t.Errorf("%d strings kept, bound 2", len(tab.seen))
	}
}
