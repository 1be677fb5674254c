package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLocalNodes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		named, have     []string
		clusterDir, cdi string
		want            []LocalNode
		wantErr         string
	}{{
		name: "one node, not named", have: []string{"vm"}, cdi: "/c/cdi",
		want: []LocalNode{{Name: "vm", Number: 1, KubeletDir: "/var/lib/kubelet", CDIDir: "/c/cdi"}},
	}, {
		name: "three nodes", named: []string{"vm", "mf-dra", "mf-b200"}, have: []string{"mf-b200", "mf-dra", "vm"}, clusterDir: "/c", cdi: "/c/cdi",
		want: []LocalNode{
			{Name: "vm", Number: 1, KubeletDir: "/var/lib/kubelet", CDIDir: "/c/cdi", runDir: "/c/run"},
			{Name: "mf-dra", Number: 2, KubeletDir: "/c/nodes/mf-dra/kubelet", CDIDir: "/c/nodes/mf-dra/cdi",
				NetNS: "/c/nodes/ns/mf-dra.net", MountNS: "/c/nodes/ns/mf-dra.mnt", runDir: "/c/run"},
			{Name: "mf-b200", Number: 3, KubeletDir: "/c/nodes/mf-b200/kubelet", CDIDir: "/c/nodes/mf-b200/cdi",
				NetNS: "/c/nodes/ns/mf-b200.net", MountNS: "/c/nodes/ns/mf-b200.mnt", runDir: "/c/run"},
		},
	}, {
		name: "several nodes, none named", have: []string{"vm", "mf-dra"},
		wantErr: "the cluster has 2 nodes",
	}, {
		name: "named nodes the API server lacks", named: []string{"vm", "mf-dra"}, have: []string{"vm"}, clusterDir: "/c",
		wantErr: "but the API server has the nodes [vm]",
	}, {
		name: "no cluster directory", named: []string{"vm", "mf-dra"}, have: []string{"vm", "mf-dra"},
		wantErr: EnvClusterDir + " is unset",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := localNodes(tc.named, tc.have, tc.clusterDir, tc.cdi)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(LocalNode{})); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnterAndPID(t *testing.T) {
	dir := t.TempDir()
	nodes, err := localNodes([]string{"vm", "mf-dra"}, []string{"vm", "mf-dra"}, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := nodes[0].Enter(); got != nil {
		t.Errorf("node 1 Enter() = %q, want nothing: it is this host", got)
	}
	want := []string{"nsenter", "--net=" + dir + "/nodes/ns/mf-dra.net", "--mount=" + dir + "/nodes/ns/mf-dra.mnt", "--"}
	if diff := cmp.Diff(want, nodes[1].Enter()); diff != "" {
		t.Errorf("Enter() (-want +got):\n%s", diff)
	}
	if err := writeFile(t, dir+"/run/kubelet@mf-dra.pid", "4242\n"); err != nil {
		t.Fatal(err)
	}
	if pid, err := nodes[1].PID("kubelet"); err != nil || pid != 4242 {
		t.Errorf("PID(kubelet) = %d, %v; want 4242 from kubelet@mf-dra.pid", pid, err)
	}
	if _, err := nodes[0].PID("kubelet"); err == nil {
		t.Error("PID(kubelet) of node 1 without its PID file: no error")
	}
}

func writeFile(t *testing.T, path, content string) error {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o600)
}
