// Package migconfigtest generates mig.config documents for tests: a corpus
// of hostile and broken annotations, each at most the API server's 256 KiB
// annotation limit (and one just past it), that must all fail quickly and
// cheaply.
package migconfigtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// MaxBytes is the largest document the corpus holds besides the one that
// is a byte too big: the API server's limit on a Node's annotations.
const MaxBytes = 256 << 10

// Doc is one generated document.
type Doc struct {
	Name string
	Data []byte
}

const head = "version: v1\nmig-configs:\n  selected:\n"

// entry is the start of an entry on every GPU with MIG on.
const entry = head + "  - devices: all\n    mig-enabled: true\n"

// Hostile returns the corpus. Every document in it is one a node agent must
// answer with a short error, whatever the GPUs.
func Hostile() []Doc {
	var docs []Doc
	add := func(name, data string) { docs = append(docs, Doc{Name: name, Data: []byte(data)}) }

	// Aliases. The first is the document of issue 14, which took the agent
	// to 520 MB: an entry's placement anchored once and aliased 1,500
	// times, every pair of them an overlap.
	add("issue-14-aliased-placements", head+"  - devices: [0]\n    mig-enabled: true\n    mig-devices: [&p {name: 1g.10gb, position: 0, size: 1},"+strings.Repeat("*p,", 1499)+"*p]")
	add("aliased-placements-256k", fill(MaxBytes, head+"  - devices: [0]\n    mig-enabled: true\n    mig-devices: [&p {name: 1g.10gb, position: 0, size: 1}", ",*p", "]"))
	add("aliased-placements-under-the-character-limit", head+"  - devices: [0]\n    mig-enabled: true\n    mig-devices: [&p {name: 1g.10gb, position: 0, size: 1},"+strings.Repeat("*p,", 3000)+"*p]")
	add("billion-laughs", laughs(9, 10))
	add("laughs-wide", laughs(3, 60))
	add("aliased-entries", head+"  - &e {devices: all, mig-enabled: true, mig-devices: {1g.10gb: 7}}\n"+strings.Repeat("  - *e\n", 3000))
	add("aliased-configs", "version: v1\nmig-configs:\n  c0: &c [{devices: all, mig-enabled: false}]\n"+repeatf(3000, "  c%d: *c\n", 1))
	add("merge-keys", mergeBomb(12))
	add("alias-cycle", "version: v1\nmig-configs: &a\n  selected: [*a]\n")
	add("unknown-anchor", head+"  - *nowhere\n")

	// Nesting.
	add("deep-flow-lists-256k", strings.Repeat("[", MaxBytes/2)+strings.Repeat("]", MaxBytes/2))
	add("deep-flow-lists", strings.Repeat("[", 8000)+strings.Repeat("]", 8000))
	add("deep-flow-maps", strings.Repeat("{a: ", 2000)+strings.Repeat("}", 2000))
	add("deep-block-maps", deepBlock(700))
	add("deep-in-mig-devices", entry+"    mig-devices: "+strings.Repeat("[", 40)+strings.Repeat("]", 40)+"\n")

	// Huge numbers.
	add("huge-count", entry+"    mig-devices: {1g.10gb: 99999999}\n")
	add("huge-counts-every-profile", entry+"    mig-devices: {1g.10gb: 2147483647, 2g.20gb: 2147483647, 3g.40gb: 2147483647, 4g.40gb: 2147483647, 7g.80gb: 2147483647}\n")
	add("count-past-int64", entry+"    mig-devices: {1g.10gb: 99999999999999999999999999}\n")
	add("count-float-overflow", entry+"    mig-devices: {1g.10gb: 1e999}\n")
	add("count-256k-digits", fill(MaxBytes, entry+"    mig-devices: {1g.10gb: 1", "0", "}\n"))
	add("huge-gpu-index", head+"  - devices: [2147483647]\n    mig-enabled: false\n")
	add("huge-position", entry+"    mig-devices: [{name: 1g.10gb, position: 2147483647, size: 2147483647}]\n")

	// Huge lists.
	add("list-of-profiles-256k", fill(MaxBytes, entry+"    mig-devices: [1g.10gb", ",1g.10gb", "]\n"))
	add("list-of-profiles-192k", fill(192<<10, entry+"    mig-devices: [1g.10gb", ",1g.10gb", "]\n"))
	add("list-of-profiles-under-the-character-limit", entry+"    mig-devices: [1g.10gb"+strings.Repeat(",1g.10gb", 8000)+"]\n")
	add("list-of-profiles-under-the-value-limit", entry+"    mig-devices: [1g.10gb"+strings.Repeat(",1g.10gb", 16350)+"]\n")
	add("aliased-placements-under-the-value-limit", head+"  - devices: [0]\n    mig-enabled: true\n    mig-devices: [&p {name: 1g.10gb, position: 0, size: 1},"+strings.Repeat("*p,", 2320)+"*p]")
	add("list-of-devices-256k", fill(MaxBytes, head+"  - devices: [0", ",0", "]\n    mig-enabled: false\n"))
	add("list-of-devices", head+"  - devices: ["+seq(0, 4000)+"]\n    mig-enabled: false\n")
	add("device-filter-list", head+"  - devices: all\n    device-filter: ["+repeatf(2000, "\"0x%08X\",", 0x10000000)+"\"0x233010DE\"]\n    mig-enabled: false\n")
	add("overlapping-placements", entry+"    mig-devices: ["+strings.Repeat("{name: 1g.10gb, position: 0, size: 1},", 1100)+"1g.10gb]\n")
	add("many-entries", head+strings.Repeat("  - {devices: [0], mig-enabled: false}\n", 2000))
	add("many-entries-under-the-entry-limit", head+repeatf(120, "  - {devices: [%d], mig-enabled: true, mig-devices: {1g.10gb: 8}}\n", 0))
	add("many-configs-256k", fillf("version: v1\nmig-configs:\n", "  c%06d: [{devices: all, mig-enabled: false}]\n"))
	add("many-configs", "version: v1\nmig-configs:\n"+repeatf(1100, "  c%d: [{devices: all, mig-enabled: false}]\n", 0))
	add("many-profiles-in-a-map", entry+"    mig-devices: {"+repeatf(3000, "%dg.10gb: 1, ", 1)+"9999g.10gb: 1}\n")

	// Long strings, each near the whole limit.
	long := strings.Repeat("x", MaxBytes-200)
	add("long-config-name", "version: v1\nmig-configs:\n  "+long+": [{devices: all, mig-enabled: false}]\n")
	add("long-profile-name", entry+"    mig-devices: {\"1g.10gb+"+long+"\": 1}\n")
	add("long-profile-in-list", entry+"    mig-devices: [\"1g.10gb+"+long+"\"]\n")
	add("long-version", "version: "+long+"\nmig-configs:\n  c: [{devices: all, mig-enabled: false}]\n")
	add("long-field-name", head+"  - {devices: all, mig-enabled: false, "+long+": 1}\n")
	add("long-device-filter", head+"  - {devices: all, mig-enabled: false, device-filter: \""+long+"\"}\n")
	add("long-devices-string", head+"  - {devices: \""+long+"\", mig-enabled: false}\n")
	add("long-comment", "# "+long+"\n"+entry+"    mig-devices: {9g.99gb: 1}\n")
	add("long-config-name-192k", "version: v1\nmig-configs:\n  "+strings.Repeat("x", 192<<10)+": [{devices: all, mig-enabled: false}]\n")
	add("long-binary", entry+"    mig-devices: !!binary "+strings.Repeat("QUFB", (MaxBytes-200)/4)+"\n")

	// Many mistakes at once.
	add("many-errors", head+strings.Repeat("  - {devices: [x, y, z], mig-enabled: maybe, mig-device: {}, mig-devices: {bogus: -1}}\n", 100))
	add("many-unknown-profiles", entry+"    mig-devices: {"+repeatf(1500, "7g.%dgb: 1, ", 100)+"9g.9gb: 1}\n")

	// Junk.
	rng := rand.New(rand.NewPCG(14, 16))
	junk := make([]byte, MaxBytes)
	for i := range junk {
		junk[i] = byte(rng.UintN(256))
	}
	docs = append(docs, Doc{Name: "random-bytes", Data: junk})
	printable := make([]byte, MaxBytes)
	for i := range printable {
		printable[i] = " \n:,-[]{}?*&!|>'\"#%@`abc019"[rng.UintN(27)]
	}
	docs = append(docs, Doc{Name: "random-yaml-characters", Data: printable})
	add("nul-bytes", strings.Repeat("\x00", MaxBytes))
	add("invalid-utf8", entry+"    mig-devices: {\"\xff\xfe\": 1}\n")
	add("many-documents", strings.Repeat("---\n", MaxBytes/4))
	add("tabs", strings.Repeat("\t", MaxBytes))
	add("a-list", "[1, 2, 3]\n")
	add("a-string", "version v1 mig-configs selected\n")
	add("json-junk", `{"version": "v1", "mig-configs": {"selected": [{"devices": {"all": true}, "mig-enabled": "true"}]}}`)
	tooBig := head + "  - devices: all\n    mig-enabled: false\n# "
	add("one-byte-too-big", tooBig+strings.Repeat("x", MaxBytes-len(tooBig))+"\n")
	return docs
}

// Controls are real documents of the same forms, which must keep working:
// the corpus's limits must not reject them.
func Controls() []Doc {
	return []Doc{
		{Name: "list-form", Data: []byte(entry + "    mig-devices: [3g.40gb, 2g.20gb, 2g.20gb]\n")},
		{Name: "map-form", Data: []byte(entry + "    mig-devices: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}\n")},
		{Name: "run-ai-form", Data: []byte(head + "  - devices: [0]\n    mig-enabled: true\n    mig-devices: [{name: 3g.40gb, position: 4, size: 4}, {name: 2g.20gb, position: 0, size: 2}]\n")},
		{Name: "anchored-entry", Data: []byte("version: v1\nmig-configs:\n  other: [&e {devices: all, mig-enabled: true, mig-devices: {7g.80gb: 1}}]\n  selected: [*e]\n")},
	}
}

// fill repeats unit between prefix and suffix to make a document of as
// close to size bytes as units allow.
func fill(size int, prefix, unit, suffix string) string {
	n := (size - len(prefix) - len(suffix)) / len(unit)
	return prefix + strings.Repeat(unit, n) + suffix
}

// fillf formats unit with 0, 1, 2, ... after prefix for as long as the
// document stays within MaxBytes.
func fillf(prefix, unit string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i := 0; ; i++ {
		u := fmt.Sprintf(unit, i)
		if b.Len()+len(u) > MaxBytes {
			return b.String()
		}
		b.WriteString(u)
	}
}

// laughs is the billion-laughs document: levels of width aliases each to
// the level below, anchored on the way.
func laughs(levels, width int) string {
	var b strings.Builder
	b.WriteString("version: v1\nl0: &l0 [lol]\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [", i, i)
		for j := range width {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString("]\n")
	}
	fmt.Fprintf(&b, "mig-configs:\n  selected: [{devices: all, mig-enabled: false, x: *l%d}]\n", levels)
	return b.String()
}

// mergeBomb doubles a map per level through merge keys.
func mergeBomb(levels int) string {
	var b strings.Builder
	b.WriteString("version: v1\nm0: &m0 {a0: 1, b0: 2}\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "m%d: &m%d {<<: [*m%d], x%d: *m%d, y%d: *m%d}\n", i, i, i-1, i, i-1, i, i-1)
	}
	fmt.Fprintf(&b, "mig-configs:\n  selected: [{devices: all, mig-enabled: false, <<: *m%d}]\n", levels)
	return b.String()
}

// deepBlock nests block maps by indentation.
func deepBlock(levels int) string {
	var b strings.Builder
	for i := range levels {
		b.WriteString(strings.Repeat(" ", i))
		b.WriteString("a:\n")
	}
	return b.String()
}

func repeatf(n int, format string, from int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, format, from+i)
	}
	return b.String()
}

func seq(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		if i > from {
			b.WriteString(",")
		}
		fmt.Fprint(&b, i)
	}
	return b.String()
}
