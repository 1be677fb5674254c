package flagdoc

import (
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const doc = "# x\n\n### The tool's flags\n\n| flag | default | what |\n| --- | --- | --- |\n" +
	"| `--wait` | `2m` | how long |\n" +
	"| `--dir` | `/var/run/x` | where |\n" +
	"| `--name` | none: required | who |\n" +
	"| `--config` | none: `$CONFIG`, else built in | which |\n" +
	"| `--on` | `true` | whether |\n" +
	"\n### Another tool's flags\n\n| `--other` | `1` | not ours |\n"

func TestParse(t *testing.T) {
	got, err := Parse(doc, "### The tool's flags")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"wait": "2m", "dir": "/var/run/x", "name": "", "config": "", "on": "true"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	for name, bad := range map[string]string{
		"no section": "# x\n",
		"no rows":    "### The tool's flags\n\ntext\n",
		"twice":      "### The tool's flags\n| `--a` | `1` | x |\n| `--a` | `2` | y |\n",
		"short row":  "### The tool's flags\n| `--a` |\n",
	} {
		if _, err := Parse(bad, "### The tool's flags"); err == nil {
			t.Errorf("%s: Parse accepted %q", name, bad)
		}
	}
}

func TestCompare(t *testing.T) {
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	fs.Duration("wait", 2*time.Minute, "")
	fs.String("dir", "/var/run/x", "")
	fs.String("name", "", "")
	fs.Bool("on", true, "")
	for name, tc := range map[string]struct {
		documented map[string]string
		want       []string
	}{
		"agree":                          {documented: map[string]string{"wait": "2m0s", "dir": "/var/run/x", "name": "", "on": "true"}},
		"durations compare as durations": {documented: map[string]string{"wait": "120s", "dir": "/var/run/x", "name": "", "on": "true"}},
		"wrong defaults": {
			documented: map[string]string{"wait": "3m", "dir": "/run/x", "name": "", "on": "false"},
			want: []string{
				`--dir: documented default "/run/x", the binary's is "/var/run/x"`,
				`--on: documented default "false", the binary's is "true"`,
				`--wait: documented default "3m", the binary's is "2m0s"`,
			},
		},
		"missing and extra": {
			documented: map[string]string{"wait": "2m", "dir": "/var/run/x", "on": "true", "gone": "1"},
			want:       []string{`--gone is documented but the binary has no such flag`, `--name (default "") is not documented`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Compare(tc.documented, fs)); diff != "" {
				t.Errorf("Compare (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProse(t *testing.T) {
	defaults := Defaults(
		map[string]string{"batch-idle": "1s", "resync": "30s", "max-bytes": "8388608", "publish": "true", "cooldown": "2m"},
		map[string]string{"resync": "0s"},
	)
	for name, tc := range map[string]struct {
		doc  string
		want []string
	}{
		"parenthesis":         {doc: "rounds wait `--batch-idle` (1 s) at least"},
		"comma":               {doc: "held (`--cooldown`, 2 minutes); then"},
		"default word":        {doc: "within `--cooldown` (default 2m) |"},
		"by default":          {doc: "`--max-bytes` (8 MiB by default) bounds"},
		"on":                  {doc: "`--publish` (on by default, see)"},
		"either binary":       {doc: "`--resync` (30 s) here, `--resync` (0) there"},
		"not a value":         {doc: "`--batch-idle` (`MIGFLEX_PLANNER_BATCH_IDLE`), `--cooldown`, which"},
		"another program's":   {doc: "etcd's `--quota-backend-bytes` (2 GiB)"},
		"wrapped":             {doc: "`--batch-idle`\n(1\ns) to"},
		"wrong duration":      {doc: "a\n`--batch-idle` (2 s) to", want: []string{`page:2: --batch-idle stated as "2 s", documented default "1s"`}},
		"wrong number":        {doc: "`--max-bytes` (4 MiB by default)", want: []string{`page:1: --max-bytes stated as "4 MiB", documented default "8388608"`}},
		"wrong on either":     {doc: "`--resync` (10 s)", want: []string{`page:1: --resync stated as "10 s", documented default "30s" or "0s"`}},
		"wrong bool":          {doc: "`--publish` (off by default)", want: []string{`page:1: --publish stated as "off", documented default "true"`}},
		"unknown unit is odd": {doc: "`--cooldown` (2 fortnights)", want: []string{`page:1: --cooldown stated as "2 fortnights", documented default "2m"`}},
	} {
		t.Run(name, func(t *testing.T) {
			_, got := Prose("page", tc.doc, defaults)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Prose (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDocsStateDocumentedDefaults: a default stated in the prose of the
// docs beside a flag's name is the one the flag tables of docs/INSTALL.md
// give (each table is checked against its binary in the binary's
// package: TestFlagsDocumented).
func TestDocsStateDocumentedDefaults(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	install, err := ReadDoc(filepath.Join(root, "docs", "INSTALL.md"))
	if err != nil {
		t.Fatal(err)
	}
	var tables []map[string]string
	for _, h := range Headings {
		tbl, err := Parse(install, h)
		if err != nil {
			t.Fatal(err)
		}
		tables = append(tables, tbl)
	}
	defaults := Defaults(tables...)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "deployments", "helm", "migflex", "README.md"))
	if len(pages) < 10 {
		t.Fatalf("found only %v", pages)
	}
	checked := 0
	for _, p := range pages {
		text, err := ReadDoc(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		n, problems := Prose(rel, text, defaults)
		checked += n
		for _, d := range problems {
			t.Error(d)
		}
	}
	// The pages state a dozen and more defaults this way (PLANNER.md's
	// cadence, METRICS.md's periods); finding none means the pattern no
	// longer reads them.
	t.Logf("checked %d stated defaults", checked)
	if checked < 12 {
		t.Errorf("checked %d stated defaults, want at least 12", checked)
	}
}
