package migconfig

import (
	"errors"
	"fmt"

	yaml "go.yaml.in/yaml/v3"
)

// checkSize bounds the work of decoding a document before a decoder builds
// anything from it.
//
// The document is decoded with sigs.k8s.io/yaml, as Kubernetes and
// mig-parted decode it, but that decoder expands YAML aliases as it goes:
// a few kilobytes of aliases to aliases expand to gigabytes, and its own
// guard against that lets hundreds of thousands of expanded values
// through. So the document is first measured, in three steps each bounded
// by what the previous one let through:
//
//  1. its size, at most MaxDocumentBytes;
//  2. the characters that can start a value, at most MaxValueStarts:
//     every value but the document's root comes after a ':', ',', '-',
//     '[', '{', '?' or '*' of its own (a key and its value share one ':'),
//     so the document has at most 1+2*MaxValueStarts values before
//     aliases are expanded, whatever its strings and comments hold;
//  3. its node tree, composed by go-yaml v3 without expanding aliases (the
//     library under sigs.k8s.io/yaml, one major version on), then walked
//     with each anchor's size computed once: at most MaxValues values and
//     MaxDepth levels once every alias is expanded.
//
// Only a document within all three reaches the decoder. checkSize returns
// the node tree (nil for an empty document) for duplicateKeys.
func checkSize(data []byte) (*yaml.Node, error) {
	if len(data) > MaxDocumentBytes {
		return nil, fmt.Errorf("the document is %d bytes, more than the limit of %d (migconfig.MaxDocumentBytes)%s", len(data), MaxDocumentBytes, limitsHint)
	}
	if n := valueStarts(data); n > MaxValueStarts {
		return nil, fmt.Errorf("the document has %d characters that can start a YAML value (':', ',', '-', '[', '{', '?', '*'), more than the limit of %d such characters (migconfig.MaxValueStarts)%s", n, MaxValueStarts, limitsHint)
	}
	root, err := compose(data)
	if err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	if root == nil {
		return nil, nil
	}
	m := measurer{done: map[*yaml.Node]extent{}, open: map[*yaml.Node]bool{}}
	ext, err := m.measure(root, 0)
	if err != nil {
		return nil, err
	}
	if ext.values > MaxValues {
		return nil, fmt.Errorf("the document has more than %d YAML values, counting what its aliases stand for, the limit (migconfig.MaxValues)%s", MaxValues, limitsHint)
	}
	return root, nil
}

// valueStartChars are the characters counted by valueStarts.
var valueStartChars = func() (set [256]bool) {
	for _, c := range []byte(":,-[{?*") {
		set[c] = true
	}
	return set
}()

// valueStarts counts the characters that can start a YAML value.
func valueStarts(data []byte) int {
	n := 0
	for _, c := range data {
		if valueStartChars[c] {
			n++
		}
	}
	return n
}

// compose parses data into go-yaml v3's node tree, aliases unexpanded. The
// parser reports most problems as errors but a few internal ones as
// panics; a document must never take the agent down, so those become
// errors too.
func compose(data []byte) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("the YAML parser failed: %v", r)
		}
	}()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == 0 {
		return nil, nil // empty stream
	}
	return &doc, nil
}

// extent is the size of a value with its aliases expanded: how many values
// it holds (itself included) and how many levels deep it goes.
type extent struct {
	values, depth int
}

// measurer measures a node tree, each node once: an alias costs the size
// of what it refers to, looked up, not walked again.
type measurer struct {
	done map[*yaml.Node]extent
	// open are the nodes being measured: an alias to one of them would make
	// the document infinite.
	open map[*yaml.Node]bool
}

var errAliasCycle = errors.New("invalid YAML: an alias refers to a value that contains it")

// measure returns n's extent; level is how deep n is. It stops with an
// error at MaxDepth, and its sums stop growing past MaxValues, so neither
// its work nor its numbers can run away.
func (m *measurer) measure(n *yaml.Node, level int) (extent, error) {
	if n == nil {
		return extent{}, nil
	}
	if n.Kind == yaml.AliasNode {
		return m.measure(n.Alias, level)
	}
	if level >= MaxDepth {
		return extent{}, fmt.Errorf("the document nests values more than %d levels deep", MaxDepth)
	}
	if e, ok := m.done[n]; ok {
		if level+e.depth > MaxDepth {
			return extent{}, fmt.Errorf("the document nests values more than %d levels deep", MaxDepth)
		}
		return e, nil
	}
	if m.open[n] {
		return extent{}, errAliasCycle
	}
	m.open[n] = true
	defer delete(m.open, n)
	var e extent
	self, next := 1, level+1
	if n.Kind == yaml.DocumentNode {
		self, next = 0, level // the document is no value of its own
	}
	for _, c := range n.Content {
		ce, err := m.measure(c, next)
		if err != nil {
			return extent{}, err
		}
		e.values = min(e.values+ce.values, MaxValues+1)
		e.depth = max(e.depth, ce.depth)
	}
	e.values = min(e.values+self, MaxValues+1)
	e.depth += self
	m.done[n] = e
	return e, nil
}

// duplicates are the keys a document gives twice in one map. The decoder
// keeps the last one, as mig-parted's does; migflex says so instead, and
// scopes what it says: a duplicate inside a configuration (its name given
// twice, or a key twice in one of its maps) is that configuration's
// problem, any other the document's.
type duplicates struct {
	doc     []string
	configs map[string][]string
}

// findDuplicates walks the tree checkSize measured: at most MaxValues
// values, aliases included, each map of a configuration once.
func findDuplicates(root *yaml.Node) duplicates {
	d := duplicates{configs: map[string][]string{}}
	if root == nil || len(root.Content) == 0 {
		return d
	}
	top := resolve(root.Content[0])
	if top.Kind != yaml.MappingNode {
		return d
	}
	var configs *yaml.Node
	for _, dup := range dupKeys(top) {
		d.doc = append(d.doc, fmt.Sprintf("line %d: %s given twice (first on line %d)", dup.line, quote(dup.key), dup.first))
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if keyOf(top.Content[i]) == "mig-configs" {
			configs = resolve(top.Content[i+1]) // the last one, as the decoder takes it
		}
	}
	if configs == nil || configs.Kind != yaml.MappingNode {
		return d
	}
	for _, dup := range dupKeys(configs) {
		d.configs[dup.key] = append(d.configs[dup.key], fmt.Sprintf("the configuration is given twice (lines %d and %d), and only the last would count; give each name once", dup.first, dup.line))
	}
	for i := 0; i+1 < len(configs.Content); i += 2 {
		name := keyOf(configs.Content[i])
		seen := map[*yaml.Node]bool{}
		var walk func(n *yaml.Node)
		walk = func(n *yaml.Node) {
			n = resolve(n)
			if n == nil || seen[n] {
				return
			}
			seen[n] = true
			if n.Kind == yaml.MappingNode {
				for _, dup := range dupKeys(n) {
					d.configs[name] = append(d.configs[name], fmt.Sprintf("line %d: %s given twice in one map (first on line %d)", dup.line, quote(dup.key), dup.first))
				}
			}
			for _, c := range n.Content {
				walk(c)
			}
		}
		walk(configs.Content[i+1])
	}
	return d
}

// resolve follows aliases; measure has ruled out cycles.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// keyOf is a scalar key as the decoder makes it a string: its value, with
// numbers and booleans in their decoded form ("01" and "1" are one key).
func keyOf(n *yaml.Node) string {
	n = resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	if n.Tag != "!!str" {
		var v any
		if err := n.Decode(&v); err == nil {
			return fmt.Sprint(v)
		}
	}
	return n.Value
}

type dupKey struct {
	key         string
	first, line int
}

// dupKeys lists the scalar keys of a map given more than once, merge keys
// ("<<") aside.
func dupKeys(m *yaml.Node) []dupKey {
	var out []dupKey
	first := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if resolve(k).Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			continue
		}
		key := keyOf(k)
		if line, ok := first[key]; ok {
			out = append(out, dupKey{key: key, first: line, line: k.Line})
			continue
		}
		first[key] = k.Line
	}
	return out
}
