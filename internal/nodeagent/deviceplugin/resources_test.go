package deviceplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

func TestResources(t *testing.T) {
	halfApplied := migGPU(0, inst("3g.40gb", 0, 4, 2), inst("3g.40gb", 4, 4, 1))
	halfApplied.Instances[1].HasCI = false

	for name, tc := range map[string]struct {
		gpus     []mig.GPU
		strategy MigStrategy
		want     map[string][]Device
		wantErr  string
	}{
		"mixed serves each profile and MIG-off GPUs": {
			gpus: mixedLayout(), strategy: MigStrategyMixed,
			want: map[string][]Device{
				"nvidia.com/mig-3g.40gb":    {migDev("nvidia.com/mig-3g.40gb", "3g.40gb", 0, 2)},
				"nvidia.com/mig-2g.20gb":    {migDev("nvidia.com/mig-2g.20gb", "2g.20gb", 0, 3)},
				"nvidia.com/mig-1g.10gb":    {migDev("nvidia.com/mig-1g.10gb", "1g.10gb", 0, 13), migDev("nvidia.com/mig-1g.10gb", "1g.10gb", 1, 8)},
				"nvidia.com/mig-1g.10gb.me": {migDev("nvidia.com/mig-1g.10gb.me", "1g.10gb+me", 1, 7)},
				resourceGPU:                 {wholeDev(2)},
			},
		},
		"mixed orders by GPU index and placement": {
			gpus: []mig.GPU{
				migGPU(1, inst("1g.10gb", 3, 1, 12), inst("1g.10gb", 0, 1, 9)),
				migGPU(0, inst("1g.10gb", 6, 1, 14)),
			},
			strategy: MigStrategyMixed,
			want: map[string][]Device{"nvidia.com/mig-1g.10gb": {
				migDev("nvidia.com/mig-1g.10gb", "1g.10gb", 0, 14),
				migDev("nvidia.com/mig-1g.10gb", "1g.10gb", 1, 9),
				migDev("nvidia.com/mig-1g.10gb", "1g.10gb", 1, 12),
			}},
		},
		"mixed skips instances without a compute instance": {
			gpus: []mig.GPU{halfApplied}, strategy: MigStrategyMixed,
			want: map[string][]Device{"nvidia.com/mig-3g.40gb": {migDev("nvidia.com/mig-3g.40gb", "3g.40gb", 0, 2)}},
		},
		"mixed serves nothing for an empty MIG GPU": {
			gpus: []mig.GPU{migGPU(0)}, strategy: MigStrategyMixed,
			want: map[string][]Device{},
		},
		"no GPUs": {strategy: MigStrategyMixed, want: map[string][]Device{}},
		"single with one profile": {
			gpus:     []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2), inst("3g.40gb", 4, 4, 1)), migGPU(1, inst("3g.40gb", 0, 4, 2))},
			strategy: MigStrategySingle,
			want: map[string][]Device{resourceGPU: {
				migDev(resourceGPU, "3g.40gb", 0, 2), migDev(resourceGPU, "3g.40gb", 0, 1), migDev(resourceGPU, "3g.40gb", 1, 2),
			}},
		},
		"single without MIG serves whole GPUs": {
			gpus: []mig.GPU{plainGPU(0), plainGPU(1)}, strategy: MigStrategySingle,
			want: map[string][]Device{resourceGPU: {wholeDev(0), wholeDev(1)}},
		},
		"single with two profiles": {
			gpus: []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2)), migGPU(1, inst("1g.10gb", 0, 1, 9))}, strategy: MigStrategySingle,
			wantErr: "2 profiles (1g.10gb, 3g.40gb)",
		},
		"single with MIG on some GPUs": {
			gpus: []mig.GPU{migGPU(0, inst("3g.40gb", 0, 4, 2)), plainGPU(1)}, strategy: MigStrategySingle,
			wantErr: "GPUs [0] have MIG enabled and GPUs [1] do not",
		},
		"none serves every GPU whole": {
			gpus: mixedLayout(), strategy: MigStrategyNone,
			want: map[string][]Device{resourceGPU: {wholeDev(0), wholeDev(1), wholeDev(2)}},
		},
		"MIG device without UUID": {
			gpus:     []mig.GPU{{Index: 3, UUID: "GPU-3", MigEnabled: true, Instances: []mig.Instance{{Profile: "1g.10gb", GIID: 9, HasCI: true}}}},
			strategy: MigStrategyMixed, wantErr: "GPU 3 GI 9 (1g.10gb) has no UUID",
		},
		"GPU without UUID": {
			gpus: []mig.GPU{{Index: 4}}, strategy: MigStrategyNone, wantErr: "GPU 4 has no UUID",
		},
		"duplicate UUIDs": {
			gpus: []mig.GPU{migGPU(0, inst("1g.10gb", 0, 1, 9)), func() mig.GPU {
				g := migGPU(1, inst("1g.10gb", 0, 1, 9))
				g.Instances[0].UUID = migUUID(0, 9)
				return g
			}()},
			strategy: MigStrategyMixed, wantErr: `UUID "MIG-0-9" is also the UUID of GPU 0 GI 9`,
		},
		"UUID too long for the kubelet": {
			gpus:     []mig.GPU{{Index: 0, UUID: "GPU-" + strings.Repeat("f", 60)}},
			strategy: MigStrategyNone, wantErr: "longer than the kubelet's 63-character limit",
		},
		"unknown strategy": {gpus: mixedLayout(), strategy: "all", wantErr: `unknown MIG strategy "all"`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Resources(tc.gpus, tc.strategy)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if got != nil {
					t.Errorf("got a partial result %v along with the error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Resources (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResourcesDoesNotReorderInput(t *testing.T) {
	layout := func() []mig.GPU {
		return []mig.GPU{migGPU(1, inst("1g.10gb", 3, 1, 12), inst("1g.10gb", 0, 1, 9)), plainGPU(0)}
	}
	gpus := layout()
	if _, err := Resources(gpus, MigStrategyMixed); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(layout(), gpus); diff != "" {
		t.Errorf("Resources modified its input (-want +got):\n%s", diff)
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ profile, resource, socket string }{
		{"2g.20gb", "nvidia.com/mig-2g.20gb", "migflex-mig-2g.20gb-0a1b2c3d-7.sock"},
		{"1g.10gb+me", "nvidia.com/mig-1g.10gb.me", "migflex-mig-1g.10gb.me-0a1b2c3d-7.sock"},
		{"7g.141gb", "nvidia.com/mig-7g.141gb", "migflex-mig-7g.141gb-0a1b2c3d-7.sock"},
	} {
		if got := string(resourcename.MIG(tc.profile)); got != tc.resource {
			t.Errorf("string(resourcename.MIG(%q)) = %q, want %q", tc.profile, got, tc.resource)
		}
		if got := socketName("migflex", tc.resource, "0a1b2c3d", 7); got != tc.socket {
			t.Errorf("socketName(%q) = %q, want %q", tc.resource, got, tc.socket)
		}
	}
	if got := socketName("migflex", resourceGPU, "0a1b2c3d", 7); got != "migflex-gpu-0a1b2c3d-7.sock" {
		t.Errorf("socketName(gpu) = %q", got)
	}
}
