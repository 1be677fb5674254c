package migconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/migflex/migflex/internal/domain/yamldoc"
)

// Parse reads a mig.config document (YAML or JSON) in any of the three forms
// described in the package documentation. Problems with the document as a
// whole (YAML syntax, its limits, version, unknown top-level fields) are
// Parse's error; a problem inside one configuration (an unknown field, a
// malformed profile, a key given twice) is that configuration's Err and
// leaves the others usable, as one file is shared by many nodes. Each
// problem names where it is.
//
// Its work is bounded by the limits in limits.go whatever data holds: a
// document beyond them fails with one short error before it is decoded, and
// at most MaxErrors problems are spelled out per document and per
// configuration.
func Parse(data []byte) (*Spec, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty mig.config")
	}
	root, err := checkSize(data)
	if err != nil {
		return nil, err
	}
	doc, err := yamldoc.Decode(data)
	if err != nil {
		return nil, err
	}
	p := &parser{dups: findDuplicates(root)}
	p.cur = &p.doc
	for _, d := range p.dups.doc {
		p.fail("", "%s", d)
	}
	spec := p.spec(doc)
	if err := p.doc.err(); err != nil {
		return nil, err
	}
	return spec, nil
}

// parser walks the decoded document and collects the errors it finds: the
// document's, and each configuration's on its own.
type parser struct {
	doc errorList
	// cur is where fail adds: doc, or the configuration being read.
	cur  *errorList
	dups duplicates
}

func (p *parser) fail(path, format string, args ...any) {
	if p.cur.len() >= MaxErrors {
		p.cur.extra++ // not spelled out: skip formatting it
		return
	}
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	p.cur.add(errors.New(msg))
}

// fields checks that m has only known keys and all required ones.
func (p *parser) fields(path string, m map[string]any, known, required []string) {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(known, k) {
			p.fail(path, "unknown field %s (known: %s)", quote(k), strings.Join(known, ", "))
		}
	}
	for _, k := range required {
		if _, ok := m[k]; !ok {
			p.fail(path, "missing required field %q", k)
		}
	}
}

func (p *parser) spec(doc any) *Spec {
	m, ok := doc.(map[string]any)
	if !ok {
		p.fail("", "document must be a map with version and mig-configs, got %s", kind(doc))
		return nil
	}
	p.fields("", m, []string{"version", "mig-configs"}, []string{"version", "mig-configs"})
	spec := &Spec{Configs: map[string]Config{}}
	if v, ok := m["version"]; ok {
		s, isString := v.(string)
		switch {
		case !isString:
			p.fail("version", "must be the string %q, got %s", Version, kind(v))
		case s != Version:
			p.fail("version", "unsupported version %s (want %q)", quote(s), Version)
		default:
			spec.Version = s
		}
	}
	v, ok := m["mig-configs"]
	if !ok {
		return spec
	}
	configs, ok := v.(map[string]any)
	if !ok {
		p.fail("mig-configs", "must be a map of configuration name to a list of entries, got %s", kind(v))
		return spec
	}
	switch {
	case len(configs) == 0:
		p.fail("mig-configs", "no configurations")
	case len(configs) > MaxConfigs:
		p.fail("mig-configs", "%d configurations, more than the limit of %d (migconfig.MaxConfigs)%s", len(configs), MaxConfigs, limitsHint)
		return spec
	}
	for _, name := range sortedKeys(configs) {
		spec.Configs[name] = p.config(name, configs[name])
	}
	return spec
}

// config reads one configuration; what is wrong with it is its own Err.
func (p *parser) config(name string, v any) Config {
	var errs errorList
	p.cur = &errs
	defer func() { p.cur = &p.doc }()
	path := "mig-configs." + clipName(name)
	for _, d := range p.dups.configs[name] {
		p.fail(path, "%s", d)
	}
	c := Config{Name: name}
	list, ok := v.([]any)
	switch {
	case strings.TrimSpace(name) == "":
		p.fail("mig-configs", "empty configuration name")
	case !ok:
		p.fail(path, "must be a list of entries, got %s", kind(v))
	case len(list) == 0:
		p.fail(path, "no entries")
	case len(list) > MaxEntries:
		p.fail(path, "%d entries, more than the limit of %d", len(list), MaxEntries)
	default:
		for i, item := range list {
			c.Entries = append(c.Entries, p.entry(fmt.Sprintf("%s[%d]", path, i), item))
		}
	}
	if c.Err = errs.err(); c.Err != nil {
		c.Entries = nil
	}
	return c
}

func (p *parser) entry(path string, v any) Entry {
	var e Entry
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(path, "entry must be a map with devices, mig-enabled and mig-devices, got %s", kind(v))
		return e
	}
	p.fields(path, m, []string{"devices", "device-filter", "mig-enabled", "mig-devices"}, []string{"devices", "mig-enabled"})
	if v, ok := m["devices"]; ok {
		e.AllDevices, e.Devices = p.devices(path+".devices", v)
	}
	if v, ok := m["device-filter"]; ok {
		e.DeviceFilter = p.deviceFilter(path+".device-filter", v)
	}
	if v, ok := m["mig-enabled"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			p.fail(path+".mig-enabled", "must be true or false, got %s", kind(v))
		}
		e.MigEnabled = b
	}
	devs, hasDevs := m["mig-devices"]
	if devs == nil {
		hasDevs = false
	}
	if hasDevs {
		e.Profiles, e.Placements = p.migDevices(path+".mig-devices", devs)
	}
	enabled, enabledIsBool := m["mig-enabled"].(bool)
	switch {
	case !enabledIsBool:
	case enabled && !hasDevs:
		p.fail(path, "missing required field \"mig-devices\" when mig-enabled is true (use mig-devices: {} for MIG without instances)")
	case !enabled && (len(e.Profiles) > 0 || len(e.Placements) > 0):
		p.fail(path, "mig-devices given with mig-enabled: false")
	}
	return e
}

func (p *parser) devices(path string, v any) (all bool, idx []int) {
	switch d := v.(type) {
	case string:
		if d != "all" {
			p.fail(path, "must be \"all\" or a list of GPU indices, got the string %s", quote(d))
		}
		return d == "all", nil
	case []any:
		// An empty list selects no GPU, as in mig-parted; Validate says
		// so. An index listed twice is listed once.
		if len(d) > MaxDevices {
			p.fail(path, "%d GPU indices, more than the limit of %d", len(d), MaxDevices)
			return false, nil
		}
		idx = []int{}
		seen := map[int]bool{}
		for i, item := range d {
			n, ok := p.index(fmt.Sprintf("%s[%d]", path, i), item)
			if ok && !seen[n] {
				seen[n] = true
				idx = append(idx, n)
			}
		}
		return false, idx
	default:
		p.fail(path, "must be \"all\" or a list of GPU indices, got %s", kind(v))
		return false, nil
	}
}

// deviceFilter reads device-filter as mig-parted does: absent, "" or []
// match every GPU; otherwise a PCI id string or a list of them, each
// "0x<device><vendor>" with an optional ":0x<subsystem device><vendor>".
// A string that is not such an id is kept and matches no GPU (mig-parted
// tolerates model names there); Validate says when an entry matched
// nothing. A number is taken as the id an unquoted hex literal is in YAML.
func (p *parser) deviceFilter(path string, v any) []DeviceID {
	var items []any
	switch d := v.(type) {
	case nil:
		return nil
	case string:
		if d == "" {
			return nil
		}
		items = []any{d}
	case json.Number:
		items = []any{d}
	case []any:
		if len(d) > MaxDevices {
			p.fail(path, "%d device ids, more than the limit of %d", len(d), MaxDevices)
			return nil
		}
		items = d
	default:
		p.fail(path, "must be a PCI device id like \"0x233010DE\" or a list of them, got %s", kind(v))
		return nil
	}
	var ids []DeviceID
	seen := map[DeviceID]bool{}
	_, isList := v.([]any)
	for i, item := range items {
		ipath := path
		if isList {
			ipath = fmt.Sprintf("%s[%d]", path, i)
		}
		var id DeviceID
		switch it := item.(type) {
		case string:
			id = ParseDeviceID(it)
		case json.Number:
			n, err := strconv.ParseUint(it.String(), 10, 32)
			if err != nil {
				p.fail(ipath, "%s is not a 32-bit PCI device id", describe(it))
				continue
			}
			id = DeviceID{Device: uint32(n), Valid: true, Text: fmt.Sprintf("0x%08X", n)}
		default:
			p.fail(ipath, "must be a PCI device id like \"0x233010DE\", got %s", kind(item))
			continue
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

func (p *parser) migDevices(path string, v any) (map[string]int, []Placement) {
	profiles := map[string]int{}
	var placements []Placement
	switch d := v.(type) {
	case map[string]any: // mig-parted: profile -> count
		zeros := 0
		for _, name := range sortedKeys(d) {
			ipath := fmt.Sprintf("%s[%s]", path, quote(name))
			canonical, err := profileOf(name)
			if err != nil {
				p.fail(path, "%v", err)
				continue
			}
			n, ok := p.integer(ipath, d[name], 0, "a count")
			switch {
			case !ok:
			case n == 0:
				zeros++ // none of these, as mig-parted reads it
			default:
				profiles[canonical] += n
			}
		}
		if zeros > 0 && zeros == len(d) {
			p.fail(path, "every count is 0 (for MIG without instances write mig-devices: {})")
		}
	case []any: // list form, Run:ai form, or a mix
		for i, item := range d {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			switch it := item.(type) {
			case string:
				canonical, err := profileOf(it)
				if err != nil {
					p.fail(ipath, "%v", err)
					continue
				}
				profiles[canonical]++
			case map[string]any:
				if pl, pinned, ok := p.placement(ipath, it); ok {
					if pinned {
						placements = append(placements, pl)
					} else {
						profiles[pl.Profile]++
					}
				}
			default:
				p.fail(ipath, "must be a profile name or {name, position, size}, got %s", kind(item))
			}
		}
	default:
		p.fail(path, "must be a map of profile to count or a list of profiles, got %s", kind(v))
	}
	if len(profiles) == 0 {
		profiles = nil
	}
	return profiles, placements
}

// placement reads the Run:ai item {name, position, size}; position and size
// come together, and without them the item is just a profile name.
func (p *parser) placement(path string, m map[string]any) (pl Placement, pinned, ok bool) {
	errsBefore := p.cur.len()
	p.fields(path, m, []string{"name", "position", "size"}, []string{"name"})
	if v, has := m["name"]; has {
		name, isString := v.(string)
		if !isString {
			p.fail(path+".name", "must be a profile name, got %s", kind(v))
		} else if canonical, err := profileOf(name); err != nil {
			p.fail(path+".name", "%v", err)
		} else {
			pl.Profile = canonical
		}
	}
	pos, hasPos := m["position"]
	size, hasSize := m["size"]
	switch {
	case hasPos && !hasSize:
		p.fail(path, "position without size (give both, in memory slices, or neither)")
	case hasSize && !hasPos:
		p.fail(path, "size without position (give both, in memory slices, or neither)")
	case hasPos && hasSize:
		pinned = true
		pl.Start, _ = p.integer(path+".position", pos, 0, "a memory-slice start")
		pl.Size, _ = p.integer(path+".size", size, 1, "a size in memory slices")
	}
	return pl, pinned, p.cur.len() == errsBefore
}

// index reads a GPU index: a whole number, or a string of decimal digits
// as Run:ai and fake-gpu-operator write them (devices: ["0"]: their
// devices field is a list of strings).
func (p *parser) index(path string, v any) (int, bool) {
	var digits string
	switch d := v.(type) {
	case json.Number:
		digits = d.String()
	case string:
		digits = d
	}
	if digits != "" && strings.Trim(digits, "0123456789") == "" {
		if n, err := strconv.ParseInt(digits, 10, 32); err == nil {
			return int(n), true
		}
	}
	given := describe(v)
	switch v.(type) {
	case string:
		given = "the string " + given
	case json.Number:
		given = "the number " + given
	}
	hint := ""
	if v == "all" {
		hint = " (for every GPU, write devices: all instead of a list)"
	}
	p.fail(path, "a GPU index must be a whole number from 0 to %d, written 3 or \"3\", got %s%s", math.MaxInt32, given, hint)
	return 0, false
}

// integer reads a whole number no smaller than minimum.
func (p *parser) integer(path string, v any, minimum int, what string) (int, bool) {
	num, isNum := v.(json.Number)
	var n int64
	var err error
	if isNum {
		n, err = strconv.ParseInt(num.String(), 10, 32)
	}
	if !isNum || err != nil || n < int64(minimum) {
		p.fail(path, "%s must be a whole number from %d to %d, got %s", what, minimum, math.MaxInt32, describe(v))
		return 0, false
	}
	return int(n), true
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// kind names the type of a decoded value for an error message.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "true/false"
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}

// describe shows a scalar's value, or the kind of anything else.
func describe(v any) string {
	switch d := v.(type) {
	case string:
		return quote(d)
	case json.Number:
		if s := d.String(); len(s) > maxQuoted {
			return s[:maxQuoted] + "..."
		}
		return d.String()
	case bool:
		return strconv.FormatBool(d)
	}
	return kind(v)
}
