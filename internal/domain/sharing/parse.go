package sharing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/yamldoc"
)

// Parse reads a device plugin config file (YAML or JSON) and returns its
// sharing section. An empty document, or one without sharing, shares
// nothing. Any problem fails the whole document: the error lists every
// problem found, each with its path and the value at fault.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("sharing config: %d bytes, more than the %d allowed", len(data), MaxBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return &Config{Strategy: StrategyNone}, nil
	}
	doc, err := yamldoc.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("sharing config: %w", err)
	}
	p := &parser{}
	cfg := p.document(doc)
	if len(p.errs) > 0 {
		return nil, fmt.Errorf("sharing config: %w", errors.Join(p.errs...))
	}
	return cfg, nil
}

type parser struct{ errs []error }

func (p *parser) fail(path, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// topLevel are the device plugin's top-level keys; all but version and
// sharing belong to it alone.
var topLevel = []string{"version", "flags", "resources", "sharing", "imex"}

func (p *parser) document(doc any) *Config {
	cfg := &Config{Strategy: StrategyNone}
	if doc == nil {
		return cfg
	}
	m, ok := doc.(map[string]any)
	if !ok {
		p.fail("(document)", "must be a map with version and sharing, got %s", kind(doc))
		return nil
	}
	p.known("(document)", m, topLevel)
	if v, ok := m["version"]; ok {
		if s, isString := v.(string); !isString || s != Version {
			p.fail("version", "unsupported version %s (want %q)", show(v), Version)
		}
	}
	v, ok := m["sharing"]
	if !ok || v == nil {
		return cfg
	}
	sh, ok := v.(map[string]any)
	if !ok {
		p.fail("sharing", "must be a map with timeSlicing or mps, got %s", kind(v))
		return nil
	}
	p.known("sharing", sh, []string{"timeSlicing", "mps"})
	// An empty section is no section, as in the device plugin.
	ts, mps := sh["timeSlicing"], sh["mps"]
	hasTS, hasMPS := ts != nil, mps != nil
	switch {
	case hasTS && hasMPS:
		p.fail("sharing", "timeSlicing and mps are mutually exclusive; keep one")
		return nil
	case hasTS:
		p.section(cfg, "sharing.timeSlicing", StrategyTimeSlicing, ts)
	case hasMPS:
		p.section(cfg, "sharing.mps", StrategyMPS, mps)
	}
	return cfg
}

// section reads timeSlicing or mps into cfg.
func (p *parser) section(cfg *Config, path string, strategy Strategy, v any) {
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(path, "must be a map with resources, got %s", kind(v))
		return
	}
	p.known(path, m, []string{"renameByDefault", "failRequestsGreaterThanOne", "resources"})
	renameByDefault := p.boolean(path, "renameByDefault", m, false)
	// NVIDIA's loader keeps MPS's historical refusal of requests above one
	// unless the file relaxes it.
	cfg.FailRequestsGreaterThanOne = p.boolean(path, "failRequestsGreaterThanOne", m, strategy == StrategyMPS)
	list, ok := m["resources"].([]any)
	switch {
	case m["resources"] == nil:
		p.fail(path+".resources", "missing: name at least one resource to share")
		return
	case !ok:
		p.fail(path+".resources", "must be a list, got %s", kind(m["resources"]))
		return
	case len(list) == 0:
		p.fail(path+".resources", "empty: name at least one resource to share")
		return
	}
	names := map[corev1.ResourceName]string{}
	renames := map[corev1.ResourceName]string{}
	for i, item := range list {
		rpath := fmt.Sprintf("%s.resources[%d]", path, i)
		r, ok := p.resource(rpath, strategy, renameByDefault, item)
		if !ok {
			continue
		}
		if prev, dup := names[r.Name]; dup {
			p.fail(rpath+".name", "%q is also shared by %s", r.Name, prev)
			continue
		}
		names[r.Name] = rpath
		if r.Rename != "" {
			if prev, dup := renames[r.Rename]; dup {
				p.fail(rpath+".rename", "%q is also the rename of %s", r.Rename, prev)
				continue
			}
			renames[r.Rename] = rpath
		}
		cfg.Resources = append(cfg.Resources, r)
	}
	// A rename that is another shared resource's name would serve two
	// kinds of device under one name.
	for _, r := range cfg.Resources {
		if other, clash := names[r.Rename]; clash {
			p.fail(renames[r.Rename]+".rename", "%q is the name of %s", r.Rename, other)
		}
	}
	if len(p.errs) == 0 {
		cfg.Strategy = strategy
	}
}

func (p *parser) resource(path string, strategy Strategy, renameByDefault bool, v any) (Resource, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(path, "must be a map with name and replicas, got %s", kind(v))
		return Resource{}, false
	}
	before := len(p.errs)
	p.known(path, m, []string{"name", "rename", "devices", "replicas"})
	var r Resource
	if raw, ok := m["name"]; !ok {
		p.fail(path+".name", "missing: the resource to share (nvidia.com/gpu or nvidia.com/mig-<profile>)")
	} else if name, ok := p.resourceName(path+".name", raw); ok {
		_, isMIG := resourcename.ParseMIG(name)
		switch {
		case name != resourcename.GPU && !isMIG:
			p.fail(path+".name", "%q is not a GPU resource (want nvidia.com/gpu or nvidia.com/mig-<profile>)", name)
		case strategy == StrategyMPS && isMIG:
			p.fail(path+".name", "%q: MPS is not supported on MIG devices (NVIDIA's device plugin refuses it too); use timeSlicing", name)
		default:
			r.Name = name
		}
	}
	if raw, ok := m["rename"]; ok {
		// Renaming a resource to itself is not renaming it.
		if rename, ok := p.resourceName(path+".rename", raw); ok && rename != r.Name {
			r.Rename = rename
		}
	} else if renameByDefault && r.Name != "" {
		r.Rename = r.Name + SharedSuffix
		if len(r.Rename) > maxResourceNameLen {
			p.fail(path+".name", "%q with %q is longer than %d characters", r.Name, SharedSuffix, maxResourceNameLen)
		}
	}
	if r.Rename == resourcename.GPU {
		p.fail(path+".rename", "%q is the whole-GPU resource; pick another name", r.Rename)
	}
	r.Devices = p.devices(path+".devices", m)
	r.Replicas = p.replicas(path+".replicas", strategy, m)
	return r, len(p.errs) == before
}

// resourceName reads a resource name as NVIDIA does: "nvidia.com/" is
// added when missing; the whole is at most 63 characters and the part
// after the slash a DNS subdomain.
func (p *parser) resourceName(path string, v any) (corev1.ResourceName, bool) {
	s, ok := v.(string)
	if !ok || s == "" {
		p.fail(path, "must be a resource name, got %s", show(v))
		return "", false
	}
	if !strings.HasPrefix(s, "nvidia.com/") {
		s = "nvidia.com/" + s
	}
	if len(s) > maxResourceNameLen {
		p.fail(path, "%q is longer than %d characters", s, maxResourceNameLen)
		return "", false
	}
	if errs := validation.IsDNS1123Subdomain(strings.TrimPrefix(s, "nvidia.com/")); len(errs) > 0 {
		p.fail(path, "%q is not a valid resource name: %s", s, strings.Join(errs, "; "))
		return "", false
	}
	return corev1.ResourceName(s), true
}

func (p *parser) devices(path string, m map[string]any) Devices {
	v, ok := m["devices"]
	if !ok {
		return Devices{All: true}
	}
	switch d := v.(type) {
	case string:
		if d != "all" {
			p.fail(path, "%q: the only string allowed is \"all\" (or give a count or a list)", d)
		}
		return Devices{All: true}
	case json.Number:
		n, err := strconv.Atoi(d.String())
		if err != nil || n <= 0 {
			p.fail(path, "count %s must be a whole number above 0", d)
			return Devices{}
		}
		return Devices{Count: n}
	case []any:
		if len(d) == 0 {
			p.fail(path, "empty list; use \"all\" or name the devices")
			return Devices{}
		}
		var out Devices
		seen := map[string]bool{}
		for i, item := range d {
			ref, ok := deviceRef(item)
			if !ok {
				p.fail(fmt.Sprintf("%s[%d]", path, i), "%s is not a GPU index, a MIG index (gpu:mig), a GPU UUID or a MIG UUID", show(item))
				continue
			}
			if seen[ref] {
				p.fail(fmt.Sprintf("%s[%d]", path, i), "%q is listed twice", ref)
				continue
			}
			seen[ref] = true
			out.List = append(out.List, ref)
		}
		return out
	}
	p.fail(path, "must be \"all\", a count or a list, got %s", kind(v))
	return Devices{}
}

var (
	uuidRE     = `[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`
	gpuIndex   = regexp.MustCompile(`^[0-9]+$`)
	migIndex   = regexp.MustCompile(`^[0-9]+:[0-9]+$`)
	gpuUUID    = regexp.MustCompile(`^GPU-` + uuidRE + `$`)
	migUUID    = regexp.MustCompile(`^MIG-` + uuidRE + `$`)
	migUUIDOld = regexp.MustCompile(`^MIG-GPU-` + uuidRE + `/[0-9]+/[0-9]+$`)
)

// deviceRef reads one entry of a devices list: an index as a number or a
// string, or a UUID in one of the forms NVIDIA accepts.
func deviceRef(v any) (string, bool) {
	var s string
	switch d := v.(type) {
	case json.Number:
		s = d.String()
	case string:
		s = d
	default:
		return "", false
	}
	for _, re := range []*regexp.Regexp{gpuIndex, migIndex, gpuUUID, migUUID, migUUIDOld} {
		if re.MatchString(s) {
			if re == gpuIndex {
				n, err := strconv.ParseUint(s, 10, 31)
				if err != nil {
					return "", false
				}
				s = strconv.FormatUint(n, 10) // "007" is GPU 7, as NVIDIA reads it
			}
			return s, true
		}
	}
	return "", false
}

func (p *parser) replicas(path string, strategy Strategy, m map[string]any) int {
	v, ok := m["replicas"]
	if !ok {
		p.fail(path, "missing: how many devices each shared device becomes (at least 2)")
		return 0
	}
	num, isNum := v.(json.Number)
	n, err := strconv.Atoi(num.String())
	switch {
	case !isNum || err != nil:
		p.fail(path, "%s must be a whole number", show(v))
	case n < 2:
		p.fail(path, "%d must be at least 2 (1 is not sharing)", n)
	case n > MaxReplicas:
		p.fail(path, "%d is more than the %d allowed", n, MaxReplicas)
	case strategy == StrategyMPS && n > MaxMPSReplicas:
		p.fail(path, "%d is more than %d, past which an MPS client's share of the threads (100/replicas percent) is 0", n, MaxMPSReplicas)
	default:
		return n
	}
	return 0
}

func (p *parser) boolean(path, key string, m map[string]any, def bool) bool {
	v, ok := m[key]
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		p.fail(path+"."+key, "must be true or false, got %s", show(v))
		return def
	}
	return b
}

// known reports keys of m that are not in known.
func (p *parser) known(path string, m map[string]any, known []string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			p.fail(path, "unknown field %q (known: %s)", k, strings.Join(known, ", "))
		}
	}
}

// kind names a decoded value's type for an error.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case map[string]any:
		return "a map"
	case []any:
		return "a list"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// show writes a decoded value for an error: scalars as written, containers
// by kind, so an error stays one short line.
func show(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return kind(v)
}
