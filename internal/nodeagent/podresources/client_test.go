package podresources_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
)

func TestList(t *testing.T) {
	tests := []struct {
		name    string
		devices []podresourcestest.Device
		want    []podresources.Assignment
	}{
		{name: "no pods"},
		{
			name: "pods and containers flattened and sorted",
			devices: []podresourcestest.Device{
				{Namespace: "ml", Pod: "train", Container: "b", Resource: "nvidia.com/mig-1g.10gb", IDs: []string{"MIG-b2", "MIG-b1"}},
				{Namespace: "default", Pod: "infer", Container: "a", Resource: "nvidia.com/gpu", IDs: []string{"GPU-1"}},
			},
			want: []podresources.Assignment{
				{Namespace: "default", Pod: "infer", Container: "a", Resource: "nvidia.com/gpu", DeviceID: "GPU-1"},
				{Namespace: "ml", Pod: "train", Container: "b", Resource: "nvidia.com/mig-1g.10gb", DeviceID: "MIG-b1"},
				{Namespace: "ml", Pod: "train", Container: "b", Resource: "nvidia.com/mig-1g.10gb", DeviceID: "MIG-b2"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := podresourcestest.Start(t)
			srv.Set(tt.devices...)
			got, err := podresources.New(srv.Socket).List(context.Background())
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListNoKubelet(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing.sock")
	_, err := podresources.New(sock).List(context.Background())
	if err == nil || !strings.Contains(err.Error(), sock) {
		t.Fatalf("List without a kubelet: got %v, want an error naming %s", err, sock)
	}
}
