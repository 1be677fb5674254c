package plansnap

import (
	"reflect"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/test/bench/scale"
)

// The cache decodes a Node's annotations once while their text stays, again
// when it changes, and forgets a Node not read for a whole sweep.
func TestCache(t *testing.T) {
	c := NewCache()
	one := `[{"index":0,"uuid":"GPU-0","model":"H100-SXM5-80GB","migMode":"Enabled"}]`
	two := `[{"index":0,"uuid":"GPU-0","model":"H100-SXM5-80GB","migMode":"Enabled"},{"index":1,"uuid":"GPU-1","model":"H100-SXM5-80GB","migMode":"Enabled"}]`

	a, err := c.entry("n").decodeLayout(one)
	if err != nil || len(a) != 1 {
		t.Fatalf("decode: %v, %v", a, err)
	}
	b, _ := c.entry("n").decodeLayout(one)
	if &a[0] != &b[0] {
		t.Error("the same text was decoded again")
	}
	if b, _ := c.entry("n").decodeLayout(two); len(b) != 2 {
		t.Errorf("a changed annotation gave %v", b)
	}
	if _, err := c.entry("n").decodeLayout("{"); err == nil {
		t.Error("no error for a malformed layout")
	}

	c.Sweep()
	kept := c.entry("n")
	c.Sweep()
	if c.entry("n") != kept {
		t.Error("a node read in the last sweep was forgotten")
	}
	c.Sweep()
	c.Sweep()
	if c.entry("n") == kept {
		t.Error("a node not read for a sweep was kept")
	}
	var none *Cache
	if l, err := none.entry("n").decodeLayout(one); err != nil || len(l) != 1 {
		t.Errorf("no cache: %v, %v", l, err)
	}
}

// Nodes publishing the same profile table share one decoding of it, kept
// while some Node reads it and dropped a whole sweep after the last.
func TestCacheSharesProfileTables(t *testing.T) {
	ann, _, err := scale.Annotations(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	text := ann[nodeinfo.AnnotationProfiles]
	c := NewCache()
	a, err := c.profiles(text)
	if err != nil || len(a) == 0 {
		t.Fatalf("decode: %v, %v", a, err)
	}
	// Another Node's copy of the text: equal, not the same string.
	b, _ := c.profiles(strings.Clone(text))
	if &a[0] != &b[0] {
		t.Error("the same table was decoded again for another Node")
	}
	want, _ := decodeProfiles(text)
	if !reflect.DeepEqual(a, want) {
		t.Errorf("shared table %+v, want %+v", a, want)
	}
	if _, err := c.profiles("{"); err == nil {
		t.Error("no error for a malformed table")
	}
	c.Sweep()
	if b, _ := c.profiles(text); &a[0] != &b[0] {
		t.Error("a table read in the last sweep was decoded again")
	}
	c.Sweep()
	c.Sweep()
	if b, _ := c.profiles(text); &a[0] == &b[0] {
		t.Error("a table no Node read for a sweep was kept")
	}
	var none *Cache
	if m, err := none.profiles(text); err != nil || !reflect.DeepEqual(m, want) {
		t.Errorf("no cache: %v, %v", m, err)
	}
}
