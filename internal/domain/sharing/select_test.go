package sharing_test

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/migflex/migflex/internal/domain/sharing"
)

func TestSelectName(t *testing.T) {
	named := sharing.Selector{Fallbacks: sharing.DefaultFallbacks}
	tests := map[string]struct {
		names   []string
		label   string
		sel     sharing.Selector
		want    string
		wantErr string
	}{
		"label wins":                     {[]string{"a100", "default"}, "a100", sharing.Selector{Default: "default"}, "a100", ""},
		"label names nothing":            {[]string{"a100", "default"}, "h100", named, "", "label nvidia.com/device-plugin.config=h100 names no sharing config (known: a100, default)"},
		"default without label":          {[]string{"a100", "b"}, "", sharing.Selector{Default: "b"}, "b", ""},
		"default names nothing":          {[]string{"a100"}, "", sharing.Selector{Default: "b", Fallbacks: sharing.DefaultFallbacks}, "", `default sharing config "b" does not exist (known: a100)`},
		"fallback named":                 {[]string{"a100", "default"}, "", named, "default", ""},
		"fallback single":                {[]string{"a100"}, "", named, "a100", ""},
		"fallbacks fail":                 {[]string{"a100", "h100"}, "", named, "", "no sharing config selected: no nvidia.com/device-plugin.config label, no default, and no fallback applies (known: a100, h100)"},
		"fallback empty":                 {[]string{"a100", "h100"}, "", sharing.Selector{Fallbacks: []sharing.Fallback{sharing.FallbackNamed, sharing.FallbackEmpty}}, "", ""},
		"no configs, no fallback":        {nil, "", named, "", "no fallback applies (known: none)"},
		"unknown fallback":               {[]string{"a", "b"}, "", sharing.Selector{Fallbacks: []sharing.Fallback{"first"}}, "", `unknown sharing config fallback "first"`},
		"label beats an unknown default": {[]string{"a"}, "a", sharing.Selector{Default: "zzz"}, "a", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := sharing.SelectName(tc.names, tc.label, tc.sel)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("SelectName = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("SelectName = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := sharing.SelectName([]string{"a", "b"}, "", named); !errors.Is(err, sharing.ErrNoConfig) {
		t.Errorf("SelectName with nothing selected: %v, want ErrNoConfig", err)
	}
}

// Load reads a mounted ConfigMap: one file per config, the kubelet's
// dot-entries ignored.
func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"default":           {Data: []byte("version: v1\nflags: {migStrategy: mixed}\n")},
		"a100-shared":       {Data: []byte("version: v1\nsharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2}]}}\n")},
		"broken":            {Data: []byte("sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 1}]}}\n")},
		"..data/default":    {Data: []byte("not a config")},
		"..2026_12_02/x":    {Data: []byte("not a config")},
		".hidden":           {Data: []byte("not a config")},
		"subdir/ignored.md": {Data: []byte("not a config")},
	}
	sel := sharing.Selector{Fallbacks: sharing.DefaultFallbacks}

	name, cfg, err := sharing.Load(fsys, "a100-shared", sel)
	if err != nil || name != "a100-shared" || cfg.Strategy != sharing.StrategyTimeSlicing || len(cfg.Resources) != 1 {
		t.Errorf("Load(label a100-shared) = %q, %+v, %v", name, cfg, err)
	}
	name, cfg, err = sharing.Load(fsys, "", sel)
	if err != nil || name != "default" || cfg.Strategy != sharing.StrategyNone {
		t.Errorf("Load(no label) = %q, %+v, %v; want default, sharing nothing", name, cfg, err)
	}
	// An invalid config or a label naming none is an error the caller
	// acts on by keeping what it served.
	for label, want := range map[string]string{
		"broken":  `sharing config "broken": sharing config: sharing.timeSlicing.resources[0].replicas: 1 must be at least 2`,
		"..data":  "names no sharing config (known: a100-shared, broken, default)",
		"missing": "names no sharing config",
	} {
		name, cfg, err := sharing.Load(fsys, label, sel)
		if err == nil || !strings.Contains(err.Error(), want) || cfg != nil || name != "" {
			t.Errorf("Load(label %s) = %q, %+v, %v; want an error containing %q", label, name, cfg, err, want)
		}
	}
	name, cfg, err = sharing.Load(fstest.MapFS{"a": {Data: []byte("x: 1")}, "b": {}}, "", sharing.Selector{Fallbacks: []sharing.Fallback{sharing.FallbackEmpty}})
	if err != nil || name != "" || cfg.Strategy != sharing.StrategyNone {
		t.Errorf("Load(fallback empty) = %q, %+v, %v", name, cfg, err)
	}
}
