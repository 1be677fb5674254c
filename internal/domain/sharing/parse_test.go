package sharing_test

import (
	"fmt"
	"os"
	"sigs.k8s.io/yaml"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/sharing"
)

// The documents below follow the examples of NVIDIA's device plugin README
// ("Shared Access to GPUs") and GPU operator docs, rewritten for migflex's
// profiles: each is a file a user of the device plugin may already have.
func TestParseDevicePluginFiles(t *testing.T) {
	tests := map[string]struct {
		doc  string
		want *sharing.Config
	}{
		"time-slicing whole GPUs": {
			doc: `
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
`,
			want: &sharing.Config{Strategy: sharing.StrategyTimeSlicing, Resources: []sharing.Resource{
				{Name: "nvidia.com/gpu", Devices: sharing.Devices{All: true}, Replicas: 4},
			}},
		},
		"time-slicing renamed by default, requests above one refused": {
			doc: `
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 6
`,
			want: &sharing.Config{Strategy: sharing.StrategyTimeSlicing, FailRequestsGreaterThanOne: true, Resources: []sharing.Resource{
				{Name: "nvidia.com/gpu", Rename: "nvidia.com/gpu.shared", Devices: sharing.Devices{All: true}, Replicas: 6},
			}},
		},
		"mixed-strategy node with the plugin's flags and MIG profiles": {
			doc: `
version: v1
flags:
  migStrategy: mixed
  failOnInitError: true
  plugin:
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 3
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
    - name: mig-3g.40gb
      replicas: 5
`,
			want: &sharing.Config{Strategy: sharing.StrategyTimeSlicing, Resources: []sharing.Resource{
				{Name: "nvidia.com/gpu", Devices: sharing.Devices{All: true}, Replicas: 3},
				{Name: "nvidia.com/mig-1g.10gb", Devices: sharing.Devices{All: true}, Replicas: 2},
				{Name: "nvidia.com/mig-3g.40gb", Devices: sharing.Devices{All: true}, Replicas: 5},
			}},
		},
		"MPS implies requests above one are refused": {
			doc: `
version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 8
`,
			want: &sharing.Config{Strategy: sharing.StrategyMPS, FailRequestsGreaterThanOne: true, Resources: []sharing.Resource{
				{Name: "nvidia.com/gpu", Devices: sharing.Devices{All: true}, Replicas: 8},
			}},
		},
		"MPS renamed, requests above one allowed explicitly": {
			doc: `
version: v1
sharing:
  mps:
    renameByDefault: true
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 2
`,
			want: &sharing.Config{Strategy: sharing.StrategyMPS, Resources: []sharing.Resource{
				{Name: "nvidia.com/gpu", Rename: "nvidia.com/gpu.shared", Devices: sharing.Devices{All: true}, Replicas: 2},
			}},
		},
		"devices by list, by count, explicit rename": {
			doc: `
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      devices: [0, "2", GPU-8e2b6a34-5b8c-4d1c-9a51-7f0d2c3b4a10]
      replicas: 2
    - name: nvidia.com/mig-1g.10gb
      devices: ["0:1", MIG-1f0e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b, MIG-GPU-8e2b6a34-5b8c-4d1c-9a51-7f0d2c3b4a10/7/0]
      rename: nvidia.com/mig-1g.10gb.small
      replicas: 2
    - name: nvidia.com/mig-2g.20gb
      devices: 1
      replicas: 3
`,
			want: &sharing.Config{Strategy: sharing.StrategyTimeSlicing, Resources: []sharing.Resource{
				{Name: "nvidia.com/gpu", Devices: sharing.Devices{List: []string{"0", "2", "GPU-8e2b6a34-5b8c-4d1c-9a51-7f0d2c3b4a10"}}, Replicas: 2},
				{Name: "nvidia.com/mig-1g.10gb", Rename: "nvidia.com/mig-1g.10gb.small",
					Devices:  sharing.Devices{List: []string{"0:1", "MIG-1f0e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b", "MIG-GPU-8e2b6a34-5b8c-4d1c-9a51-7f0d2c3b4a10/7/0"}},
					Replicas: 2},
				{Name: "nvidia.com/mig-2g.20gb", Devices: sharing.Devices{Count: 1}, Replicas: 3},
			}},
		},
		"JSON": {
			doc: `{"version":"v1","sharing":{"timeSlicing":{"resources":[{"name":"nvidia.com/mig-1g.10gb","replicas":2}]}}}`,
			want: &sharing.Config{Strategy: sharing.StrategyTimeSlicing, Resources: []sharing.Resource{
				{Name: "nvidia.com/mig-1g.10gb", Devices: sharing.Devices{All: true}, Replicas: 2},
			}},
		},
		"the plugin's config without sharing": {
			doc: `
version: v1
flags:
  migStrategy: single
resources:
  gpus:
  - pattern: "*"
    name: gpu
imex:
  channelIDs: [0]
`,
			want: &sharing.Config{Strategy: sharing.StrategyNone},
		},
		"empty document":            {doc: "\n  \n", want: &sharing.Config{Strategy: sharing.StrategyNone}},
		"empty sharing":             {doc: "sharing:\n", want: &sharing.Config{Strategy: sharing.StrategyNone}},
		"empty timeSlicing":         {doc: "sharing:\n  timeSlicing:\n", want: &sharing.Config{Strategy: sharing.StrategyNone}},
		"null document (~)":         {doc: "~", want: &sharing.Config{Strategy: sharing.StrategyNone}},
		"rename to itself":          {doc: "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, rename: mig-1g.10gb, replicas: 2}]}}", want: &sharing.Config{Strategy: sharing.StrategyTimeSlicing, Resources: []sharing.Resource{{Name: "nvidia.com/mig-1g.10gb", Devices: sharing.Devices{All: true}, Replicas: 2}}}},
		"index with zeros":          {doc: "sharing: {timeSlicing: {resources: [{name: gpu, devices: [\"007\"], replicas: 2}]}}", want: &sharing.Config{Strategy: sharing.StrategyTimeSlicing, Resources: []sharing.Resource{{Name: "nvidia.com/gpu", Devices: sharing.Devices{List: []string{"7"}}, Replicas: 2}}}},
		"MPS at its replicas limit": {doc: "sharing: {mps: {resources: [{name: gpu, replicas: 100}]}}", want: &sharing.Config{Strategy: sharing.StrategyMPS, FailRequestsGreaterThanOne: true, Resources: []sharing.Resource{{Name: "nvidia.com/gpu", Devices: sharing.Devices{All: true}, Replicas: 100}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := sharing.Parse([]byte(tc.doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse (-want,+got):\n%s", diff)
			}
		})
	}
}

// Each invalid document fails as a whole, with errors naming the field and
// the value at fault.
func TestParseInvalid(t *testing.T) {
	const ts = "sharing:\n  timeSlicing:\n    resources:\n"
	tests := map[string]struct {
		doc  string
		want []string // substrings of the error, all required
	}{
		"version":              {"version: v2\n", []string{`version: unsupported version "v2"`}},
		"version as number":    {"version: 1\n", []string{`version: unsupported version 1`}},
		"not a map":            {"- a\n- b\n", []string{"(document): must be a map", "got a list"}},
		"unknown top level":    {"version: v1\nsharng: {}\n", []string{`(document): unknown field "sharng"`}},
		"sharing not a map":    {"sharing: [1]\n", []string{"sharing: must be a map", "got a list"}},
		"unknown strategy":     {"sharing:\n  timeslicing: {}\n", []string{`sharing: unknown field "timeslicing"`}},
		"both strategies":      {"sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: 2}]}\n  mps: {resources: [{name: gpu, replicas: 2}]}\n", []string{"sharing: timeSlicing and mps are mutually exclusive"}},
		"section not a map":    {"sharing:\n  timeSlicing: [gpu]\n", []string{"sharing.timeSlicing: must be a map"}},
		"no resources":         {"sharing:\n  timeSlicing: {renameByDefault: true}\n", []string{"sharing.timeSlicing.resources: missing"}},
		"empty resources":      {"sharing:\n  mps: {resources: []}\n", []string{"sharing.mps.resources: empty"}},
		"resources not a list": {"sharing:\n  mps: {resources: gpu}\n", []string{"sharing.mps.resources: must be a list, got a string"}},
		"unknown section key":  {"sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: 2}], failRequestGreaterThanOne: true}\n", []string{`sharing.timeSlicing: unknown field "failRequestGreaterThanOne"`}},
		"bool as string":       {"sharing:\n  timeSlicing: {renameByDefault: \"yes\", resources: [{name: gpu, replicas: 2}]}\n", []string{`sharing.timeSlicing.renameByDefault: must be true or false, got "yes"`}},
		"resource not a map":   {ts + "    - nvidia.com/gpu\n", []string{"sharing.timeSlicing.resources[0]: must be a map"}},
		"unknown resource key": {ts + "    - {name: gpu, replicas: 2, replica: 3}\n", []string{`sharing.timeSlicing.resources[0]: unknown field "replica"`}},
		"missing name":         {ts + "    - {replicas: 2}\n", []string{"sharing.timeSlicing.resources[0].name: missing"}},
		"name not a string":    {ts + "    - {name: 5, replicas: 2}\n", []string{"sharing.timeSlicing.resources[0].name: must be a resource name, got 5"}},
		"not a GPU resource":   {ts + "    - {name: nvidia.com/vgpu, replicas: 2}\n", []string{`resources[0].name: "nvidia.com/vgpu" is not a GPU resource`}},
		"other vendor":         {ts + "    - {name: example.com/gpu, replicas: 2}\n", []string{`resources[0].name: "nvidia.com/example.com/gpu" is not a valid resource name`}},
		"name too long":        {ts + "    - {name: mig-1g.10gb" + strings.Repeat("x", 60) + ", replicas: 2}\n", []string{"resources[0].name:", "longer than 63 characters"}},
		"bad rename":           {ts + "    - {name: gpu, rename: Shared_GPU, replicas: 2}\n", []string{`resources[0].rename: "nvidia.com/Shared_GPU" is not a valid resource name`}},
		"rename to gpu":        {ts + "    - {name: mig-1g.10gb, rename: gpu, replicas: 2}\n", []string{`resources[0].rename: "nvidia.com/gpu" is the whole-GPU resource`}},
		"duplicate resource":   {ts + "    - {name: gpu, replicas: 2}\n    - {name: nvidia.com/gpu, replicas: 3}\n", []string{`resources[1].name: "nvidia.com/gpu" is also shared by sharing.timeSlicing.resources[0]`}},
		"duplicate rename":     {ts + "    - {name: mig-1g.10gb, rename: small, replicas: 2}\n    - {name: mig-2g.20gb, rename: small, replicas: 2}\n", []string{`resources[1].rename: "nvidia.com/small" is also the rename of sharing.timeSlicing.resources[0]`}},
		"rename to a shared name": {ts + "    - {name: mig-1g.10gb, rename: mig-2g.20gb, replicas: 2}\n    - {name: mig-2g.20gb, replicas: 2}\n",
			[]string{`resources[0].rename: "nvidia.com/mig-2g.20gb" is the name of sharing.timeSlicing.resources[1]`}},
		"missing replicas":      {ts + "    - {name: gpu}\n", []string{"resources[0].replicas: missing"}},
		"one replica":           {ts + "    - {name: gpu, replicas: 1}\n", []string{"resources[0].replicas: 1 must be at least 2"}},
		"zero replicas":         {ts + "    - {name: gpu, replicas: 0}\n", []string{"resources[0].replicas: 0 must be at least 2"}},
		"negative replicas":     {ts + "    - {name: gpu, replicas: -4}\n", []string{"resources[0].replicas: -4 must be at least 2"}},
		"fractional replicas":   {ts + "    - {name: gpu, replicas: 2.5}\n", []string{"resources[0].replicas: 2.5 must be a whole number"}},
		"replicas as string":    {ts + "    - {name: gpu, replicas: \"4\"}\n", []string{`resources[0].replicas: "4" must be a whole number`}},
		"huge replicas":         {ts + "    - {name: gpu, replicas: 99999999999999999999}\n", []string{"resources[0].replicas: ", "must be a whole number"}},
		"too many replicas":     {ts + "    - {name: gpu, replicas: 1025}\n", []string{"resources[0].replicas: 1025 is more than the 1024 allowed"}},
		"too many MPS replicas": {"sharing:\n  mps: {resources: [{name: gpu, replicas: 101}]}\n", []string{"sharing.mps.resources[0].replicas: 101 is more than 100"}},
		"MPS on MIG":            {"sharing:\n  mps: {resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]}\n", []string{`sharing.mps.resources[0].name: "nvidia.com/mig-1g.10gb": MPS is not supported on MIG devices`}},
		"devices other string":  {ts + "    - {name: gpu, devices: some, replicas: 2}\n", []string{`resources[0].devices: "some": the only string allowed is "all"`}},
		"devices zero count":    {ts + "    - {name: gpu, devices: 0, replicas: 2}\n", []string{"resources[0].devices: count 0 must be a whole number above 0"}},
		"devices empty list":    {ts + "    - {name: gpu, devices: [], replicas: 2}\n", []string{"resources[0].devices: empty list"}},
		"devices bad entry":     {ts + "    - {name: gpu, devices: [0, GPU-123, -1, \"0:x\", {a: 1}], replicas: 2}\n", []string{`devices[1]: "GPU-123" is not a GPU index`, "devices[2]: -1 is not", `devices[3]: "0:x" is not`, "devices[4]: a map is not"}},
		"devices twice":         {ts + "    - {name: gpu, devices: [1, \"1\"], replicas: 2}\n", []string{`devices[1]: "1" is listed twice`}},
		"devices a map":         {ts + "    - {name: gpu, devices: {all: true}, replicas: 2}\n", []string{"resources[0].devices: must be \"all\", a count or a list, got a map"}},
		"invalid YAML":          {"sharing: [\n", []string{"invalid YAML"}},
		"every problem at once": {ts + "    - {name: gpu, replicas: 1}\n    - {name: cpu, replicas: 2}\n", []string{"resources[0].replicas: 1", `resources[1].name: "nvidia.com/cpu"`}},
		"too big":               {"# " + strings.Repeat("x", sharing.MaxBytes), []string{"more than the 1048576 allowed"}},
		"alias bomb":            {aliasBomb(), []string{"invalid YAML", "excessive aliasing"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := sharing.Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", got)
			}
			if got != nil {
				t.Errorf("Parse returned %+v with its error; want nil", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// Parse never panics, whatever the bytes.
func FuzzParse(f *testing.F) {
	f.Add([]byte("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: [0]}\n"))
	f.Add([]byte("sharing: {mps: {resources: [{name: gpu, replicas: 4}]}}"))
	f.Add([]byte("a: &a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := sharing.Parse(data)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one", cfg, err)
		}
	})
}

// The examples in docs/INSTALL.md's Sharing section are valid: the file
// NVIDIA's device plugin reads, and each config of the Helm values; and
// its error example is the error Parse writes.
func TestInstallDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/INSTALL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Sharing\n")
	if !ok {
		t.Fatal("docs/INSTALL.md has no Sharing section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var file string
	helmConfigs := 0
	for rest := section; ; {
		var block string
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			break
		}
		block, rest, _ = strings.Cut(rest, "```")
		if strings.HasPrefix(block, "apiVersion:") {
			// Kubernetes objects (a DRA node's shared claim), no config.
			continue
		}
		var values struct {
			Agent struct {
				SharingConfig map[string]any `json:"sharingConfig"`
			} `json:"agent"`
		}
		if err := yaml.Unmarshal([]byte(block), &values); err == nil && len(values.Agent.SharingConfig) > 0 {
			for name, cfg := range values.Agent.SharingConfig {
				text, err := yaml.Marshal(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := sharing.Parse(text); err != nil {
					t.Errorf("the Sharing section's Helm values, config %s: %v", name, err)
				}
				helmConfigs++
			}
			continue
		}
		file = block
	}
	if file == "" || helmConfigs == 0 {
		t.Fatalf("the Sharing section has %d Helm configs and the file example %q; want both", helmConfigs, file)
	}
	cfg, err := sharing.Parse([]byte(file))
	if err != nil {
		t.Fatalf("the Sharing section's example: %v", err)
	}
	want := &sharing.Config{Strategy: sharing.StrategyTimeSlicing, Resources: []sharing.Resource{
		{Name: "nvidia.com/mig-1g.10gb", Rename: "nvidia.com/small", Devices: sharing.Devices{All: true}, Replicas: 2},
	}}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("the Sharing section's example (-want,+got):\n%s", diff)
	}
	_, err = sharing.Parse([]byte("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}]}}"))
	if msg := "`" + strings.TrimPrefix(err.Error(), "sharing config: ") + "`"; !strings.Contains(strings.Join(strings.Fields(section), " "), msg) {
		t.Errorf("the Sharing section does not quote Parse's error %s", msg)
	}
}

// aliasBomb is a small document whose aliases expand to 10^10 values.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	return b.String()
}
