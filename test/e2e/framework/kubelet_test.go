package framework

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
)

// TestKubeletHasPod: a pod the kubelet lists, with devices or without, is
// there; one it does not (a kubelet that has not read its pods yet) is not;
// a kubelet that does not answer is an error, not a no.
func TestKubeletHasPod(t *testing.T) {
	srv := podresourcestest.Start(t)
	srv.Set(podresourcestest.Device{Namespace: "gpu-webhook", Pod: "agent", Container: "c"},
		podresourcestest.Device{Namespace: "ns", Pod: "gpu", Container: "c", Resource: "nvidia.com/mig-1g.10gb", IDs: []string{"MIG-a"}})
	dir := t.TempDir()
	n := LocalNode{Name: "mf-b200", KubeletDir: dir}
	if err := os.MkdirAll(filepath.Dir(n.PodResourcesSocket()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(srv.Socket, n.PodResourcesSocket()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns, name string
		want     bool
	}{
		{"gpu-webhook", "agent", true},
		{"ns", "gpu", true},
		{"ns", "agent", false},
		{"gpu-webhook", "other", false},
	} {
		got, err := n.KubeletHasPod(context.Background(), tc.ns, tc.name)
		if err != nil || got != tc.want {
			t.Errorf("KubeletHasPod(%s/%s) = %v, %v; want %v", tc.ns, tc.name, got, err, tc.want)
		}
	}
	gone := LocalNode{Name: "mf-dra", KubeletDir: t.TempDir()}
	if ok, err := gone.KubeletHasPod(context.Background(), "gpu-webhook", "agent"); err == nil {
		t.Errorf("KubeletHasPod without a kubelet = %v, nil; want an error", ok)
	}
}
