package plansnap

import (
	"sync"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/solver"
)

// Cache keeps the decoded layout and profiles annotations of each Node
// from one reading of the fleet to the next: a round reads every Node,
// and at thousands of them decoding the same JSON again was most of its
// time and garbage. An entry is used while the annotation's text is the
// same (an informer hands the same string back while the Node does not
// change, which compares at once). What it returns is shared: callers
// must not change it.
//
// Entries of Nodes not read since the last Sweep but one are dropped.
type Cache struct {
	mu        sync.Mutex
	cur, prev map[string]*decoded
}

type decoded struct {
	layoutRaw, profilesRaw string
	layout                 []nodeinfo.GPU
	layoutErr              error
	models                 []solver.Model
	profilesErr            error
	hasLayout, hasProfiles bool
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{cur: map[string]*decoded{}, prev: map[string]*decoded{}}
}

// Sweep starts a new reading of the fleet: entries not read since the
// previous Sweep are dropped.
func (c *Cache) Sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, make(map[string]*decoded, len(c.cur))
}

func (c *Cache) entry(node string) *decoded {
	if c == nil {
		return &decoded{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.cur[node]
	if d == nil {
		d = c.prev[node]
		if d == nil {
			d = &decoded{}
		}
		c.cur[node] = d
	}
	return d
}

// layout decodes raw with parse (nodeinfo.ParseLayout when nil), or
// returns what it decoded from the same text.
func (d *decoded) decodeLayout(raw string, parse func(string) ([]nodeinfo.GPU, error)) ([]nodeinfo.GPU, error) {
	if d.hasLayout && d.layoutRaw == raw {
		return d.layout, d.layoutErr
	}
	if parse == nil {
		parse = nodeinfo.ParseLayout
	}
	l, err := parse(raw)
	d.layoutRaw, d.layout, d.layoutErr, d.hasLayout = raw, l, err, true
	return l, err
}

// decodeProfiles decodes raw into planner models, or returns what it
// decoded from the same text.
func (d *decoded) decodeProfiles(raw string) ([]solver.Model, error) {
	if d.hasProfiles && d.profilesRaw == raw {
		return d.models, d.profilesErr
	}
	models, err := nodeinfo.ParseProfiles(raw)
	var out []solver.Model
	for _, m := range models {
		out = append(out, solver.Model{Name: m.Name, Profiles: m.MIGProfiles()})
	}
	d.profilesRaw, d.models, d.profilesErr, d.hasProfiles = raw, out, err, true
	return out, err
}
