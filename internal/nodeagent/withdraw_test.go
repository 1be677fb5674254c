package nodeagent

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// TestDevicePluginWithdrawsDRASlices: a node switched from DRA back to the
// device plugin keeps the ResourceSlices its DRA agent published until
// the kubelet deletes them (some time after the plugin went), and the
// scheduler could allocate their devices to claims no plugin prepares
// meanwhile. The agent started with --serving=device-plugin deletes them
// at once; another node's slices and another driver's stay.
func TestDevicePluginWithdrawsDRASlices(t *testing.T) {
	cfg := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	const nodeName = "node-a"
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What a DRA agent on node-a left (a pool of two slices), beside
	// slices the agent must leave alone.
	for _, s := range []struct{ name, driver, node string }{
		{"left-0", dra.DriverName, nodeName},
		{"left-1", dra.DriverName, nodeName},
		{"node-b", dra.DriverName, "node-b"},
		{"nvidia-on-a", "gpu.nvidia.com", nodeName},
	} {
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: s.name},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: s.driver, NodeName: &s.node,
				Pool:    resourceapi.ResourcePool{Name: s.node, ResourceSliceCount: 2},
				Devices: []resourceapi.Device{{Name: "gpu-0"}},
			},
		}
		if _, err := admin.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	dir := testutil.SocketDir(t)
	args := []string{
		"--node-name", nodeName, "--kubeconfig", testutil.WriteKubeconfig(t, cfg),
		"--nvml-backend", "simulated", "--serving", "device-plugin",
		"--device-plugin-dir", dir, "--pod-resources-socket", filepath.Join(dir, "pod-resources.sock"),
		"--disable-health-checks", "all", "--metrics-addr", "",
	}
	c, code := parseFlags(args, func(string) (string, bool) { return "", false }, io.Discard)
	if code >= 0 {
		t.Fatalf("flags %v: exit %d", args, code)
	}
	_, runCtx := ktesting.NewTestContext(t)
	runCtx, cancel := context.WithCancel(runCtx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, c, func(string) string { return "" }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	names := func() []string {
		list, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list.Items {
			out = append(out, s.Name)
		}
		slices.Sort(out)
		return out
	}
	want := []string{"node-b", "nvidia-on-a"}
	var got []string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got = names()
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("slices %v, want %v: the device-plugin agent did not withdraw node-a's slices of %s", got, want, dra.DriverName)
	}
}
