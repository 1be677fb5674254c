package sharing

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// LabelConfig is the Node label naming the config a node uses, as NVIDIA's
// config manager reads it.
const LabelConfig = "nvidia.com/device-plugin.config"

// Fallback is what SelectName does when neither the node's label nor a
// default names a config, as NVIDIA's --fallback-strategies.
type Fallback string

const (
	// FallbackNamed picks the config named DefaultName, if there is one.
	FallbackNamed Fallback = "named"
	// FallbackSingle picks the only config, if there is just one.
	FallbackSingle Fallback = "single"
	// FallbackEmpty picks no config: nothing is shared.
	FallbackEmpty Fallback = "empty"
)

// DefaultName is the config FallbackNamed looks for.
const DefaultName = "default"

// DefaultFallbacks are the fallbacks of NVIDIA's chart.
var DefaultFallbacks = []Fallback{FallbackNamed, FallbackSingle}

// Selector is how a node's config is chosen among named configs.
type Selector struct {
	// Default is used when the node's label is unset or empty.
	Default string
	// Fallbacks are tried in order when there is no label and no Default.
	Fallbacks []Fallback
}

// ErrNoConfig is SelectName's error when nothing selects a config.
var ErrNoConfig = errors.New("no sharing config selected")

// SelectName picks the config a node uses among names, given its label
// value: the label, else the Default, else the first Fallback that
// applies. It returns "" when the choice is FallbackEmpty (share nothing).
// A label or default naming no config is an error, never a fallback: as
// NVIDIA's config manager skips such a change, the caller keeps the
// config it has.
func SelectName(names []string, label string, sel Selector) (string, error) {
	has := func(n string) bool { return slices.Contains(names, n) }
	known := func() string {
		if len(names) == 0 {
			return "none"
		}
		return strings.Join(slices.Sorted(slices.Values(names)), ", ")
	}
	switch {
	case label != "":
		if !has(label) {
			return "", fmt.Errorf("label %s=%s names no sharing config (known: %s)", LabelConfig, label, known())
		}
		return label, nil
	case sel.Default != "":
		if !has(sel.Default) {
			return "", fmt.Errorf("default sharing config %q does not exist (known: %s)", sel.Default, known())
		}
		return sel.Default, nil
	}
	for _, f := range sel.Fallbacks {
		switch f {
		case FallbackNamed:
			if has(DefaultName) {
				return DefaultName, nil
			}
		case FallbackSingle:
			if len(names) == 1 {
				return names[0], nil
			}
		case FallbackEmpty:
			return "", nil
		default:
			return "", fmt.Errorf("unknown sharing config fallback %q (known: named, single, empty)", f)
		}
	}
	return "", fmt.Errorf("%w: no %s label, no default, and no fallback applies (known: %s)", ErrNoConfig, LabelConfig, known())
}

// Load reads the named configs in fsys, one per file as a ConfigMap is
// mounted (the file name is the config's name; dot-files, which the
// kubelet uses for the mount's own bookkeeping, are not configs), picks
// one with SelectName and parses it. name is "" and cfg shares nothing
// when FallbackEmpty picked none. On error the caller keeps what it served.
func Load(fsys fs.FS, label string, sel Selector) (name string, cfg *Config, err error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return "", nil, fmt.Errorf("listing sharing configs: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		names = append(names, e.Name())
	}
	name, err = SelectName(names, label, sel)
	if err != nil {
		return "", nil, err
	}
	if name == "" {
		return "", &Config{Strategy: StrategyNone}, nil
	}
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return "", nil, fmt.Errorf("sharing config %q: %w", name, err)
	}
	cfg, err = Parse(data)
	if err != nil {
		return "", nil, fmt.Errorf("sharing config %q: %w", name, err)
	}
	return name, cfg, nil
}
