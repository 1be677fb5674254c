package agent

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// Fixture GPUs. The UUIDs are what the device plugin serves as device IDs.
func h100(index int, migOn bool, instances ...mig.Instance) mig.GPU {
	return mig.GPU{
		Index: index, UUID: gpuUUID(index), Model: "NVIDIA H100 80GB HBM3",
		MigCapable: true, MigEnabled: migOn, MigPending: migOn, Instances: instances,
	}
}

func gpuUUID(index int) string { return "GPU-" + string(rune('a'+index)) }

func inst(profile string, start, size int, gi uint32) mig.Instance {
	return mig.Instance{Profile: profile, Start: start, Size: size, GIID: gi, CIID: 0, HasCI: true, UUID: migUUID(gi)}
}

func migUUID(gi uint32) string { return "MIG-" + string(rune('0'+gi)) }

func TestTruncate(t *testing.T) {
	short := "fits"
	if got := truncate(short); got != short {
		t.Errorf("truncate(%q) = %q", short, got)
	}
	long := strings.Repeat("é", maxMessageLength) // 2 bytes each
	got := truncate(long)
	if len(got) > maxMessageLength || !strings.HasSuffix(got, " ... (truncated)") {
		t.Errorf("truncate(long) has %d bytes and ends %q", len(got), got[len(got)-20:])
	}
	if !strings.HasPrefix(got, "éé") || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("truncate(long) cut a rune: %q", got[:10])
	}
}

func TestServedHealth(t *testing.T) {
	served := map[string]map[string]bool{
		"nvidia.com/mig-3g.40gb": {"MIG-1": true, "MIG-2": false},
		"nvidia.com/mig-1g.10gb": {},
		"nvidia.com/gpu":         {"GPU-b": true},
	}
	want := map[string]bool{"MIG-1": true, "MIG-2": false, "GPU-b": true}
	if diff := cmp.Diff(want, servedHealth(served)); diff != "" {
		t.Errorf("servedHealth() (-want +got):\n%s", diff)
	}
}

func TestOwnedMetadata(t *testing.T) {
	gpus := []mig.GPU{h100(0, true, inst("3g.40gb", 0, 4, 1))}
	layoutJSON, err := nodeinfo.EncodeLayout(gpus, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The server's labels for its devices, kept as they are.
	base := map[string]string{nodeinfo.LabelGPUCount: "1", "nvidia.com/mig-3g.40gb.count": "1"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name            string
		st              status
		wantLabels      map[string]string
		wantAnnotations map[string]string
	}{
		{"no source: no state, no reason", status{}, base, map[string]string{nodeinfo.AnnotationLayout: layoutJSON}},
		{"success", status{State: nodeinfo.StateSuccess}, with(base, nodeinfo.LabelMigConfigState, "success"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON}},
		{"success with a note", status{nodeinfo.StateSuccess, "run.ai/mig.config ignored"}, with(base, nodeinfo.LabelMigConfigState, "success"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON, nodeinfo.AnnotationReason: "run.ai/mig.config ignored"}},
		{"success with what was left out", status{nodeinfo.StateSuccess, "entry 0 matches no GPU"}, with(base, nodeinfo.LabelMigConfigState, "success"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON, nodeinfo.AnnotationReason: "entry 0 matches no GPU"}},
		{"pending", status{nodeinfo.StatePending, "GPU 0: ns/p"}, with(base, nodeinfo.LabelMigConfigState, "pending"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON, nodeinfo.AnnotationReason: "GPU 0: ns/p"}},
		{"failed", status{nodeinfo.StateFailed, "bad"}, with(base, nodeinfo.LabelMigConfigState, "failed"), map[string]string{nodeinfo.AnnotationLayout: layoutJSON, nodeinfo.AnnotationReason: "bad"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			labels, annotations, err := ownedMetadata(tc.st, gpus, nil, nil, nil, base)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantLabels, labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAnnotations, annotations); diff != "" {
				t.Errorf("annotations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReportingInstance(t *testing.T) {
	if got := reportingInstance("migflex-agent", "n1"); got != "migflex-agent-n1" {
		t.Errorf("reportingInstance() = %q", got)
	}
	long := strings.Repeat("n", 253)
	if got := reportingInstance("migflex-agent", long); len(got) != 128 || !strings.HasPrefix(got, "migflex-agent-nnn") {
		t.Errorf("reportingInstance(long) = %q (%d)", got, len(got))
	}
}
