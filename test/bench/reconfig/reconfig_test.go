package reconfig

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// TestLayoutDocs checks that each layout's annotation is a document the
// agent accepts and asks for the layout's profiles on every GPU.
func TestLayoutDocs(t *testing.T) {
	for _, l := range Layouts {
		t.Run(l.Name, func(t *testing.T) {
			spec, err := migconfig.Parse([]byte(l.Doc()))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := spec.Select("")
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Entries) != 1 || !cfg.Entries[0].AllDevices || !cfg.Entries[0].MigEnabled {
				t.Fatalf("entries %+v, want one for all devices with MIG on", cfg.Entries)
			}
			if diff := cmp.Diff(l.PerGPU, cfg.Entries[0].Profiles); diff != "" {
				t.Errorf("profiles (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(map[string]int{"nvidia.com/mig-4g.40gb": 8, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-1g.10gb": 8}, Layouts[1].Resources(8)); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
}

func TestLayoutMatches(t *testing.T) {
	gpu := func(profiles ...string) nodeinfo.GPU {
		g := nodeinfo.GPU{MigMode: "Enabled"}
		for _, p := range profiles {
			g.Instances = append(g.Instances, nodeinfo.Instance{Profile: p})
		}
		return g
	}
	encode := func(gpus ...nodeinfo.GPU) string {
		b, err := json.Marshal(gpus)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	mixed := gpu("4g.40gb", "2g.20gb", "1g.10gb")
	for name, tc := range map[string]struct {
		annotation string
		want       bool
	}{
		"both GPUs":        {encode(mixed, mixed), true},
		"one GPU behind":   {encode(mixed, gpu("1g.10gb", "1g.10gb")), false},
		"a GPU missing":    {encode(mixed), false},
		"an extra profile": {encode(mixed, gpu("4g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")), false},
		"not JSON":         {"{", false},
		"empty":            {"", false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := layoutMatches(tc.annotation, Layouts[1], 2); got != tc.want {
				t.Errorf("layoutMatches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodResourcesStandIn(t *testing.T) {
	p, err := startPodResources(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	conn, err := grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(context.Background(), &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.PodResources) != 0 {
		t.Errorf("pods %v, want none", resp.PodResources)
	}
}

func TestAllocatableMatches(t *testing.T) {
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	want := map[string]int{"nvidia.com/mig-1g.10gb": 8}
	for name, tc := range map[string]struct {
		allocatable corev1.ResourceList
		want        bool
	}{
		"exactly":                    {corev1.ResourceList{"nvidia.com/mig-1g.10gb": q(8), "cpu": q(2)}, true},
		"an old profile at 0":        {corev1.ResourceList{"nvidia.com/mig-1g.10gb": q(8), "nvidia.com/mig-7g.80gb": q(0)}, true},
		"an old profile still there": {corev1.ResourceList{"nvidia.com/mig-1g.10gb": q(8), "nvidia.com/mig-7g.80gb": q(1)}, false},
		"fewer":                      {corev1.ResourceList{"nvidia.com/mig-1g.10gb": q(7)}, false},
		"absent":                     {corev1.ResourceList{"cpu": q(2)}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := allocatableMatches(tc.allocatable, want); got != tc.want {
				t.Errorf("allocatableMatches = %v, want %v", got, tc.want)
			}
		})
	}
}
