package draserver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
)

const node = "node-a"

var layout = []dra.Device{
	{Name: "gpu-0-mig-3g40gb-9-0", UUID: "MIG-0-0", MIG: true},
	{Name: "gpu-0-mig-3g40gb-9-4", UUID: "MIG-0-4", MIG: true},
	{Name: "gpu-1", UUID: "GPU-1"},
}

type fakeState struct {
	devices  []dra.Device
	prepared []dra.PreparedClaim
}

func (f fakeState) Devices() []dra.Device         { return f.devices }
func (f fakeState) Prepared() []dra.PreparedClaim { return f.prepared }

func claim(ns, name string, pods []string, results ...resourceapi.DeviceRequestAllocationResult) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if results != nil {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p})
	}
	return c
}

func result(driver, pool, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: pool, Device: device}
}

// TestHolders: on a DRA node the busy check sees every device a claim
// holds, from whichever source knows first (the scheduler's allocation,
// the kubelet's prepare, the plugin's checkpoint), besides the device
// plugin's devices pods kept from before a switch; other drivers' and
// other nodes' devices are not this node's.
func TestHolders(t *testing.T) {
	tests := []struct {
		name     string
		claims   []resourceapi.ResourceClaim
		podres   []podresourcestest.Device
		dynamic  []podresourcestest.Claim
		prepared []dra.PreparedClaim
		want     []podresources.Assignment
	}{
		{name: "nothing held"},
		{
			name:   "an allocated claim reserved for a pod not started yet",
			claims: []resourceapi.ResourceClaim{claim("ml", "train-0-gpu", []string{"train-0"}, result(dra.DriverName, node, "gpu-0-mig-3g40gb-9-4"))},
			want:   []podresources.Assignment{{Namespace: "ml", Pod: "train-0", Resource: dra.DriverName, DeviceID: "MIG-0-4", Claim: "train-0-gpu"}},
		},
		{
			name:   "an allocated claim no pod has reserved is its own holder",
			claims: []resourceapi.ResourceClaim{claim("ml", "shared", nil, result(dra.DriverName, node, "gpu-1"))},
			want:   []podresources.Assignment{{Namespace: "ml", Resource: dra.DriverName, DeviceID: "GPU-1", Claim: "shared"}},
		},
		{
			name: "claims of other drivers, other nodes, or not allocated hold nothing here",
			claims: []resourceapi.ResourceClaim{
				claim("ml", "nvidia", []string{"a"}, result("gpu.nvidia.com", node, "gpu-1")),
				claim("ml", "elsewhere", []string{"b"}, result(dra.DriverName, "node-b", "gpu-1")),
				claim("ml", "pending", []string{"c"}),
			},
		},
		{
			name:    "the kubelet's prepared claim of a running pod",
			dynamic: []podresourcestest.Claim{{Namespace: "ml", Pod: "infer", Container: "main", ClaimNamespace: "ml", ClaimName: "infer-gpu", Driver: dra.DriverName, Pool: node, Device: "gpu-0-mig-3g40gb-9-0"}},
			want:    []podresources.Assignment{{Namespace: "ml", Pod: "infer", Resource: dra.DriverName, DeviceID: "MIG-0-0", Claim: "infer-gpu"}},
		},
		{
			name:     "the checkpoint of a pod the API no longer shows",
			prepared: []dra.PreparedClaim{{UID: "u1", Namespace: "ml", Name: "old", Pods: []string{"ml/old-0"}, Devices: []dra.PreparedDevice{{Device: layout[0]}}}},
			want:     []podresources.Assignment{{Namespace: "ml", Pod: "old-0", Resource: dra.DriverName, DeviceID: "MIG-0-0", Claim: "old"}},
		},
		{
			name:   "a device plugin's device a pod kept from before the switch",
			podres: []podresourcestest.Device{{Namespace: "ml", Pod: "legacy", Container: "main", Resource: "nvidia.com/mig-3g.40gb", IDs: []string{"MIG-0-4"}}},
			want:   []podresources.Assignment{{Namespace: "ml", Pod: "legacy", Container: "main", Resource: "nvidia.com/mig-3g.40gb", DeviceID: "MIG-0-4"}},
		},
		{
			name:     "one holder seen by every source is listed once",
			claims:   []resourceapi.ResourceClaim{claim("ml", "infer-gpu", []string{"infer"}, result(dra.DriverName, node, "gpu-0-mig-3g40gb-9-0"))},
			dynamic:  []podresourcestest.Claim{{Namespace: "ml", Pod: "infer", Container: "main", ClaimNamespace: "ml", ClaimName: "infer-gpu", Driver: dra.DriverName, Pool: node, Device: "gpu-0-mig-3g40gb-9-0"}},
			prepared: []dra.PreparedClaim{{UID: "u1", Namespace: "ml", Name: "infer-gpu", Pods: []string{"ml/infer"}, Devices: []dra.PreparedDevice{{Device: layout[0]}}}},
			want:     []podresources.Assignment{{Namespace: "ml", Pod: "infer", Resource: dra.DriverName, DeviceID: "MIG-0-0", Claim: "infer-gpu"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := podresourcestest.Start(t)
			srv.Set(tt.podres...)
			srv.SetClaims(tt.dynamic...)
			h := &Holders{
				Kubelet: podresources.New(srv.Socket),
				Claims:  func() ([]resourceapi.ResourceClaim, error) { return tt.claims, nil },
				State:   fakeState{devices: layout, prepared: tt.prepared},
				Driver:  dra.DriverName, Pool: node,
			}
			got, err := h.List(context.Background())
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHoldersFails: when a source cannot be asked, the busy check fails
// rather than calling the GPUs free.
func TestHoldersFails(t *testing.T) {
	srv := podresourcestest.Start(t)
	h := &Holders{
		Kubelet: podresources.New(srv.Socket),
		Claims:  func() ([]resourceapi.ResourceClaim, error) { return nil, errors.New("informer not synced") },
		State:   fakeState{devices: layout},
		Driver:  dra.DriverName, Pool: node,
	}
	if _, err := h.List(context.Background()); err == nil || !strings.Contains(err.Error(), "informer not synced") {
		t.Errorf("List with claims unreadable: got %v, want the claims' error", err)
	}
	h.Claims = func() ([]resourceapi.ResourceClaim, error) { return nil, nil }
	h.Kubelet = podresources.New(srv.Socket + ".gone")
	if _, err := h.List(context.Background()); err == nil {
		t.Error("List without a kubelet: got no error")
	}
}
