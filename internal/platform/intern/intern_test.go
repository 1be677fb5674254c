package intern

import (
	"reflect"
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
	if len(tab.v.seen) > 2 {
		t.Errorf("%d strings kept, bound 2", len(tab.v.seen))
	}
}

func TestValues(t *testing.T) {
	tab := NewValues[map[string]int64](2)
	first := map[string]int64{"a": 1}
	if got := tab.Value("a=1", first); !sameMap(got, first) {
		t.Fatal("the first value under a key was not kept")
	}
	if got := tab.Value("a=1", map[string]int64{"a": 1}); !sameMap(got, first) {
		t.Error("an equal value was kept twice")
	}
	tab.Value("b=1", map[string]int64{"b": 1})
	// Full: a third key starts the table over.
	tab.Value("c=1", map[string]int64{"c": 1})
	if got := tab.Value("a=1", map[string]int64{"a": 1}); sameMap(got, first) {
		t.Error("the table kept more than its bound")
	}
	if len(tab.seen) > 2 {
		t.Errorf("%d values kept, bound 2", len(tab.seen))
	}
}

// sameMap tells whether a and b are one map, not two equal ones.
func sameMap(a, b map[string]int64) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
