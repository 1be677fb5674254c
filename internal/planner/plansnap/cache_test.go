package plansnap

import "testing"

// The cache decodes a Node's annotations once while their text stays, again
// when it changes, and forgets a Node not read for a whole sweep.
func TestCache(t *testing.T) {
	c := NewCache()
	one := `[{"index":0,"uuid":"GPU-0","model":"H100-SXM5-80GB","migMode":"Enabled"}]`
	two := `[{"index":0,"uuid":"GPU-0","model":"H100-SXM5-80GB","migMode":"Enabled"},{"index":1,"uuid":"GPU-1","model":"H100-SXM5-80GB","migMode":"Enabled"}]`

	a, err := c.entry("n").decodeLayout(one, nil)
	if err != nil || len(a) != 1 {
		t.Fatalf("decode: %v, %v", a, err)
	}
	b, _ := c.entry("n").decodeLayout(one, nil)
	if &a[0] != &b[0] {
		t.Error("the same text was decoded again")
	}
	if b, _ := c.entry("n").decodeLayout(two, nil); len(b) != 2 {
		t.Errorf("a changed annotation gave %v", b)
	}
	if _, err := c.entry("n").decodeLayout("{", nil); err == nil {
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
	if l, err := none.entry("n").decodeLayout(one, nil); err != nil || len(l) != 1 {
		t.Errorf("no cache: %v, %v", l, err)
	}
}
