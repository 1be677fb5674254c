package framework

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// AnnotationMigConfig is the annotation that asks a node for a layout, as
// users and the GPU operator's tools write it.
const AnnotationMigConfig = "nvidia.com/mig.config"

// MigConfigLayout is the layout the node's nvidia.com/mig.config asks for:
// each GPU's MIG profiles, sorted, by index, for a node of gpus GPUs (a GPU
// without MIG has none). It reads the document as the suite writes it and
// as the planner does (the configuration "selected" or the only one;
// entries of `devices: all` or indices; mig-devices as a list of names,
// of Run:ai's {name, position, size}, or counts by name), independently of
// the agent's own reading, which it is there to check. A GPU no entry
// names is an error: the soak and the planner name every GPU.
func MigConfigLayout(node *corev1.Node, gpus int) (map[int][]string, error) {
	doc, ok := node.Annotations[AnnotationMigConfig]
	if !ok {
		return nil, fmt.Errorf("node %s has no %s annotation", node.Name, AnnotationMigConfig)
	}
	out, err := migConfigLayout([]byte(doc), gpus)
	if err != nil {
		return nil, fmt.Errorf("node %s's %s: %w", node.Name, AnnotationMigConfig, err)
	}
	return out, nil
}

func migConfigLayout(doc []byte, gpus int) (map[int][]string, error) {
	var d struct {
		MigConfigs map[string][]struct {
			Devices    any  `json:"devices"`
			MigEnabled bool `json:"mig-enabled"`
			MigDevices any  `json:"mig-devices"`
		} `json:"mig-configs"`
	}
	if err := yaml.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	entries, ok := d.MigConfigs["selected"]
	if !ok && len(d.MigConfigs) == 1 {
		for _, e := range d.MigConfigs {
			entries = e
		}
	} else if !ok {
		return nil, fmt.Errorf("no configuration \"selected\" among %d", len(d.MigConfigs))
	}
	out := map[int][]string{}
	for i, e := range entries {
		var idx []int
		switch dev := e.Devices.(type) {
		case string:
			if dev != "all" {
				return nil, fmt.Errorf("entry %d: devices %q", i, dev)
			}
			for g := range gpus {
				idx = append(idx, g)
			}
		case []any:
			for _, v := range dev {
				n, err := index(v)
				if err != nil {
					return nil, fmt.Errorf("entry %d: %w", i, err)
				}
				idx = append(idx, n)
			}
		default:
			return nil, fmt.Errorf("entry %d: devices %v", i, e.Devices)
		}
		profiles := []string{}
		if e.MigEnabled {
			ps, err := profilesOf(e.MigDevices)
			if err != nil {
				return nil, fmt.Errorf("entry %d: %w", i, err)
			}
			profiles = ps
		}
		for _, g := range idx {
			out[g] = profiles
		}
	}
	for g := range gpus {
		if _, ok := out[g]; !ok {
			return nil, fmt.Errorf("no entry names GPU %d", g)
		}
	}
	return out, nil
}

func index(v any) (int, error) {
	switch n := v.(type) {
	case float64:
		return int(n), nil
	case string:
		return strconv.Atoi(n)
	}
	return 0, fmt.Errorf("GPU index %v", v)
}

// profilesOf reads mig-devices in any of its three forms.
func profilesOf(v any) ([]string, error) {
	out := []string{}
	switch md := v.(type) {
	case []any:
		for _, x := range md {
			switch p := x.(type) {
			case string:
				out = append(out, p)
			case map[string]any:
				name, ok := p["name"].(string)
				if !ok {
					return nil, fmt.Errorf("mig-devices item %v has no name", p)
				}
				out = append(out, name)
			default:
				return nil, fmt.Errorf("mig-devices item %v", x)
			}
		}
	case map[string]any:
		for name, c := range md {
			n, ok := c.(float64)
			if !ok {
				return nil, fmt.Errorf("mig-devices count %v of %s", c, name)
			}
			for range int(n) {
				out = append(out, name)
			}
		}
	case nil:
	default:
		return nil, fmt.Errorf("mig-devices %v", v)
	}
	slices.Sort(out)
	return out, nil
}
