// Package flagdoc checks, in tests, that the flags documented in
// docs/INSTALL.md and a binary's flag set agree: every flag is in the
// binary's table with the default the binary has, and every flag in the
// table exists. Prose that states a flag's default beside its name
// ("`--batch-idle` (1 s)", "`--start-grace`, 10 s") is checked against the
// tables, so a default changed in code fails a test until every page says
// the new one.
package flagdoc

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The headings of the binaries' flag tables in docs/INSTALL.md.
const (
	Agent   = "### The node agent's flags (`device-plugin`)"
	Webhook = "### The webhook's flags (`webhook`)"
	Planner = "### The planner's flags (`planner`)"
)

// Headings are the flag tables' headings, one per binary.
var Headings = []string{Agent, Webhook, Planner}

// Parse reads the rows "| `--name` | default | ... |" of the section of
// doc headed heading (a Markdown heading line, "### The planner's flags"),
// up to the next heading. A default cell that starts with a backquoted
// value (`1s`, `/var/run/cdi`) documents that value; any other ("none",
// "none: `$KUBECONFIG`, else in-cluster") an empty default.
func Parse(doc, heading string) (map[string]string, error) {
	_, section, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return nil, fmt.Errorf("no section %q", heading)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	out := map[string]string{}
	for line := range strings.Lines(section) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			return nil, fmt.Errorf("%s: want | `--flag` | default | ... |: %s", heading, line)
		}
		name := strings.TrimPrefix(strings.Trim(strings.TrimSpace(cells[1]), "`"), "--")
		def := ""
		if m := leadingBackquoted.FindStringSubmatch(strings.TrimSpace(cells[2])); m != nil {
			def = m[1]
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s: --%s documented twice", heading, name)
		}
		out[name] = def
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no flag rows", heading)
	}
	return out, nil
}

var leadingBackquoted = regexp.MustCompile("^`([^`]*)`")

// Compare returns one line per disagreement between the documented
// defaults and fs, sorted; none when they agree. Durations compare as
// durations (`2m` documents 2m0s); every other default as the flag
// package prints it (--help's "(default ...)").
func Compare(documented map[string]string, fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		doc, ok := documented[f.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("--%s (default %q) is not documented", f.Name, f.DefValue))
		case !sameDefault(f, doc):
			out = append(out, fmt.Sprintf("--%s: documented default %q, the binary's is %q", f.Name, doc, f.DefValue))
		}
	})
	for name := range documented {
		if fs.Lookup(name) == nil {
			out = append(out, fmt.Sprintf("--%s is documented but the binary has no such flag", name))
		}
	}
	slices.Sort(out)
	return out
}

func sameDefault(f *flag.Flag, doc string) bool {
	if g, ok := f.Value.(flag.Getter); ok {
		if _, isDuration := g.Get().(time.Duration); isDuration {
			want, err1 := time.ParseDuration(f.DefValue)
			got, err2 := time.ParseDuration(doc)
			return err1 == nil && err2 == nil && want == got
		}
	}
	return doc == f.DefValue
}

// Defaults merges the tables of several binaries: a flag's documented
// defaults, one per binary that has it (--resync is 30s in the planner and
// 0s in the webhook).
func Defaults(tables ...map[string]string) map[string][]string {
	out := map[string][]string{}
	for _, t := range tables {
		for name, def := range t {
			out[name] = append(out[name], def)
		}
	}
	return out
}

// proseDefault is a flag's name in backquotes followed by what reads as its
// value: "(1 s", "(default 2m", ", 10 s", "(8 MiB by default", "(on by
// default", a line break anywhere a space is. Only values that parse as a
// number, a duration or on/off are taken; "(`MIGFLEX_...`", ", which ..."
// are not values.
var proseDefault = regexp.MustCompile("`--([a-z0-9-]+)`(?:\\s+\\(|,\\s+)(?:default\\s+)?([0-9][0-9.]*(?:\\s?[a-zA-Z]+)?|on|off)(?:[,;)]|\\s+by\\s+default)")

// Prose checks the defaults stated in doc's prose (a page's text, named
// name in the lines): it returns how many it checked and one line per
// default that none of the documented defaults of that flag matches.
// Flags no table has (another program's: etcd's, the kubelet's) are left
// alone.
func Prose(name, doc string, defaults map[string][]string) (checked int, problems []string) {
	var out []string
	for _, m := range proseDefault.FindAllStringSubmatchIndex(doc, -1) {
		flagName := doc[m[2]:m[3]]
		value := strings.Join(strings.Fields(doc[m[4]:m[5]]), " ")
		defs, ok := defaults[flagName]
		if !ok {
			continue
		}
		checked++
		if !slices.ContainsFunc(defs, func(d string) bool { return proseMatches(value, d) }) {
			quoted := make([]string, len(defs))
			for i, d := range defs {
				quoted[i] = strconv.Quote(d)
			}
			line := strings.Count(doc[:m[0]], "\n") + 1
			out = append(out, fmt.Sprintf("%s:%d: --%s stated as %q, documented default %s", name, line, flagName, value, strings.Join(quoted, " or ")))
		}
	}
	return checked, out
}

// proseMatches reports whether value, as prose writes it ("1 s", "2
// minutes", "8 MiB", "on", "8443" for ":8443"), is def, as a table writes
// it.
func proseMatches(value, def string) bool {
	switch value {
	case "on":
		return def == "true"
	case "off":
		return def == "false"
	case def, strings.TrimPrefix(def, ":"):
		return true
	}
	if d, err := time.ParseDuration(def); err == nil && value == "0" {
		return d == 0
	}
	num, unit, _ := strings.Cut(value, " ")
	if unit == "" { // "8", "2m", "30s"
		i := strings.IndexFunc(value, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i >= 0 {
			num, unit = value[:i], value[i:]
		}
	}
	if unit == "" {
		return num == def
	}
	if unit == "MiB" {
		n, err := strconv.ParseInt(num, 10, 64)
		return err == nil && strconv.FormatInt(n<<20, 10) == def
	}
	units := map[string]string{"ms": "ms", "s": "s", "m": "m", "min": "m", "minute": "m", "minutes": "m", "h": "h", "hour": "h", "hours": "h"}
	u, ok := units[unit]
	if !ok {
		return false
	}
	got, err1 := time.ParseDuration(num + u)
	want, err2 := time.ParseDuration(def)
	return err1 == nil && err2 == nil && got == want
}

// ReadDoc reads the file at path.
func ReadDoc(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// Check compares the table under heading in the file at path with fs: what
// Compare finds, for a binary's TestFlagsDocumented.
func Check(path, heading string, fs *flag.FlagSet) ([]string, error) {
	doc, err := ReadDoc(path)
	if err != nil {
		return nil, err
	}
	documented, err := Parse(doc, heading)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Compare(documented, fs), nil
}
