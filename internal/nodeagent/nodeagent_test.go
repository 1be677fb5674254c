package nodeagent

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/nodeagent/health"
)

func TestHealthOptions(t *testing.T) {
	defaultList := health.FormatXids(health.DefaultIgnoredXids())
	tests := []struct {
		name     string
		ignored  string
		disable  string
		want     []uint64
		wantOff  bool
		wantErr  string
		quietFor time.Duration
	}{
		{name: "defaults", ignored: defaultList, want: []uint64{13, 31, 43, 45, 68, 109}},
		{name: "the list replaces the defaults", ignored: "79,48", want: []uint64{79, 48}},
		{name: "an empty list ignores nothing", ignored: "", want: []uint64{}},
		{name: "spaces and empty fields", ignored: " 13 , ,31,", want: []uint64{13, 31}},
		{name: "the switch's numbers add to the list", ignored: "13", disable: "48, 63", want: []uint64{13, 48, 63}},
		{name: "the switch's numbers add to an empty list", ignored: "", disable: "48", want: []uint64{48}},
		{name: "the switch turns checks off", ignored: defaultList, disable: "xids", wantOff: true, want: []uint64{13, 31, 43, 45, 68, 109}},
		{name: "the quiet period passes through", ignored: "13", quietFor: time.Minute, want: []uint64{13}},
		{name: "not a number", ignored: "13,x", wantErr: `--health-ignored-xids: "13,x": "x" is not an Xid (a non-negative integer)`},
		{name: "negative", ignored: "-13", wantErr: `"-13" is not an Xid`},
		{name: "bad switch", ignored: "13", disable: "some", wantErr: "--disable-health-checks: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{HealthIgnoredXids: tc.ignored, DisableHealthChecks: tc.disable, HealthQuietPeriod: tc.quietFor}
			got, off, err := c.healthOptions()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if off != tc.wantOff {
				t.Errorf("off = %v, want %v", off, tc.wantOff)
			}
			// health.Options reads a nil list as the defaults: an empty
			// list must stay empty, not nil.
			if got.IgnoredXids == nil {
				t.Error("IgnoredXids is nil, which health reads as the defaults")
			}
			if diff := cmp.Diff(health.Options{IgnoredXids: tc.want, QuietPeriod: tc.quietFor}, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Config{NodeName: "n", KubeAPIQPS: 1, KubeAPIBurst: 1, PluginDir: "/dp", PodResourcesSocket: "/pr.sock", CDIDir: "/var/run/cdi", NVMLCallTimeout: time.Minute}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	tests := []struct {
		name string
		c    Config
		want []string
	}{
		{"valid", ok, nil},
		{"no node name", with(func(c *Config) { c.NodeName = "" }), []string{"--node-name is required"}},
		{"no requests", with(func(c *Config) { c.KubeAPIQPS = 0 }), []string{"--kube-api-qps must be above 0 and --kube-api-burst at least 1, got 0 and 1"}},
		{"negative timeout", with(func(c *Config) { c.AllocatableTimeout = -time.Second }), []string{"--allocatable-timeout must be 0 (no wait) or more, got -1s"}},
		{"no NVML call timeout", with(func(c *Config) { c.NVMLCallTimeout = 0 }), []string{"--nvml-call-timeout must be above 0, got 0s"}},
		{"relative paths, every one said", with(func(c *Config) { c.PluginDir, c.PodResourcesSocket = "dp", "" }),
			[]string{`--device-plugin-dir must be an absolute path, got "dp"`, `--pod-resources-socket must be an absolute path, got ""`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate(func(name string) string { return "--" + name })
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
