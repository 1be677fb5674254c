package cli_test

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/platform/cli"
)

type color string

var colors = cli.NewEnum("color", color("red"), "green")

type opts struct {
	name   string
	list   string
	wait   time.Duration
	qps    float64
	burst  int
	limit  int64
	on     bool
	color  color
	config string
}

func declare(o *opts) *cli.Flags {
	f := cli.New("test", "thing")
	f.String(&o.name, "node-name", "", "the name", cli.Alias("NODE_NAME"))
	f.String(&o.list, "ignored", "1,2", "a list", cli.EmptyCounts())
	f.Duration(&o.wait, "retry-interval", time.Second, "how long")
	f.Float64(&o.qps, "qps", 20, "rate")
	f.Int(&o.burst, "burst", 40, "burst")
	f.Int64(&o.limit, "max-bytes", 1<<20, "bytes")
	f.Bool(&o.on, "reuse-port", false, "a switch")
	cli.EnumVar(f, &o.color, "color", "red", colors, "which color")
	f.String(&o.config, "kubeconfig", "", "file", cli.NoEnv())
	return f
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParse(t *testing.T) {
	defaults := opts{list: "1,2", wait: time.Second, qps: 20, burst: 40, limit: 1 << 20, color: "red"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    opts
		wantErr string
	}{
		{name: "defaults", want: defaults},
		{
			name: "every twin",
			env: map[string]string{
				"MIGFLEX_THING_NODE_NAME": "n", "MIGFLEX_THING_IGNORED": "3", "MIGFLEX_THING_RETRY_INTERVAL": "1m",
				"MIGFLEX_THING_QPS": "2.5", "MIGFLEX_THING_BURST": "5", "MIGFLEX_THING_MAX_BYTES": "7",
				"MIGFLEX_THING_REUSE_PORT": "true", "MIGFLEX_THING_COLOR": "green", "MIGFLEX_THING_KUBECONFIG": "/ignored",
			},
			want: opts{name: "n", list: "3", wait: time.Minute, qps: 2.5, burst: 5, limit: 7, on: true, color: "green"},
		},
		{name: "an alias", env: map[string]string{"NODE_NAME": "old"}, want: func() opts { o := defaults; o.name = "old"; return o }()},
		{
			name: "the canonical name wins over an alias", env: map[string]string{"NODE_NAME": "old", "MIGFLEX_THING_NODE_NAME": "new"},
			want: func() opts { o := defaults; o.name = "new"; return o }(),
		},
		{
			name: "a flag wins over its twin", args: []string{"--node-name", "flag", "--color", "red"},
			env:  map[string]string{"MIGFLEX_THING_NODE_NAME": "env", "MIGFLEX_THING_COLOR": "green"},
			want: func() opts { o := defaults; o.name = "flag"; return o }(),
		},
		{name: "empty is unset", env: map[string]string{"MIGFLEX_THING_NODE_NAME": "", "NODE_NAME": "old"}, want: func() opts { o := defaults; o.name = "old"; return o }()},
		{name: "empty counts", env: map[string]string{"MIGFLEX_THING_IGNORED": ""}, want: func() opts { o := defaults; o.list = ""; return o }()},
		{name: "bad twin", env: map[string]string{"MIGFLEX_THING_RETRY_INTERVAL": "soon"}, wantErr: `MIGFLEX_THING_RETRY_INTERVAL="soon"`},
		{name: "bad enum twin", env: map[string]string{"MIGFLEX_THING_COLOR": "blue"}, wantErr: `unknown color "blue" (want one of red, green)`},
		{name: "bad enum flag", args: []string{"--color", "blue"}, wantErr: `unknown color "blue" (want one of red, green)`},
		{name: "stray argument", args: []string{"extra"}, wantErr: `unexpected arguments ["extra"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got opts
			f := declare(&got)
			f.SetOutput(&bytes.Buffer{})
			err := f.Parse(tc.args, env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse() = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(opts{})); diff != "" {
				t.Errorf("parsed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHelpNamesTheTwins(t *testing.T) {
	var o opts
	f := declare(&o)
	var out bytes.Buffer
	f.Usage(&out, "usage: test\n")
	if err := f.Parse([]string{"--help"}, env(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(--help) = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{
		"usage: test\n",
		"the name (env MIGFLEX_THING_NODE_NAME, NODE_NAME)",
		"which color (red, green) (env MIGFLEX_THING_COLOR)",
		`(default "1,2")`,
		"(default 1s)",
		"(default red)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "MIGFLEX_THING_KUBECONFIG") {
		t.Errorf("help names a twin for a NoEnv flag:\n%s", out.String())
	}
	if got := f.Name("node-name"); got != "--node-name (env MIGFLEX_THING_NODE_NAME)" {
		t.Errorf("Name = %q", got)
	}
}

func TestTwins(t *testing.T) {
	var o opts
	f := declare(&o)
	got := map[string][]string{}
	for _, tw := range f.Twins() {
		got[tw.Flag] = tw.Names()
	}
	want := map[string][]string{
		"node-name": {"MIGFLEX_THING_NODE_NAME", "NODE_NAME"}, "ignored": {"MIGFLEX_THING_IGNORED"},
		"retry-interval": {"MIGFLEX_THING_RETRY_INTERVAL"}, "qps": {"MIGFLEX_THING_QPS"}, "burst": {"MIGFLEX_THING_BURST"},
		"max-bytes": {"MIGFLEX_THING_MAX_BYTES"}, "reuse-port": {"MIGFLEX_THING_REUSE_PORT"}, "color": {"MIGFLEX_THING_COLOR"},
		"kubeconfig": nil,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("twins (-want +got):\n%s", diff)
	}
}

func TestEnumParse(t *testing.T) {
	if c, err := colors.Parse("green"); err != nil || c != "green" {
		t.Errorf("Parse(green) = %q, %v", c, err)
	}
	if _, err := colors.Parse("Green"); err == nil {
		t.Error("Parse is case-insensitive; want exact values")
	}
}
