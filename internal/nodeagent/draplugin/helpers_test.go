package draplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/cdi"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim/simtest"
	"github.com/migflex/migflex/internal/nvml/nvmlmig"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

const (
	node = "node-a"
	// hangTimeout bounds waits for things that happen in milliseconds;
	// no test relies on it.
	hangTimeout = time.Minute
)

// dirs are the host directories of one driver; a restarted driver gets
// the same ones.
type dirs struct{ registrar, plugin, state, cdi string }

func newDirs(t *testing.T) dirs {
	t.Helper()
	root := testutil.SocketDir(t)
	d := dirs{filepath.Join(root, "reg"), filepath.Join(root, "plugin"), filepath.Join(root, "state"), filepath.Join(root, "cdi")}
	for _, p := range []string{d.registrar, d.plugin, d.state, d.cdi} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// simulated is the Editor of the simulated backend, whose devices the
// environment names.
var simulated = cdi.EnvEditor(nvmlbackend.SimulatedDevices{})

// startDriver starts a Driver in dirs against client until the end of the
// test (or an earlier Stop).
func startDriver(t *testing.T, client kubernetes.Interface, d dirs, opts Options) *Driver {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	opts.NodeName, opts.KubeClient = node, client
	opts.RegistrarDir, opts.PluginDir, opts.StateDir, opts.CDIDir = d.registrar, d.plugin, d.state, d.cdi
	if opts.Editor == nil {
		opts.Editor = simulated
	}
	drv, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Stop)
	return drv
}

// kubelet is the kubelet's side of the DRA gRPC service, on the socket the
// driver serves.
type kubelet struct {
	t      *testing.T
	client drapb.DRAPluginClient
}

func dialKubelet(t *testing.T, d dirs) kubelet {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(d.plugin, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return kubelet{t: t, client: drapb.NewDRAPluginClient(conn)}
}

func ref(c *resourceapi.ResourceClaim) *drapb.Claim {
	return &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
}

func (k kubelet) prepare(claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodePrepareResourceResponse {
	k.t.Helper()
	req := &drapb.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, ref(c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangTimeout)
	defer cancel()
	resp, err := k.client.NodePrepareResources(ctx, req)
	if err != nil {
		k.t.Fatalf("NodePrepareResources: %v", err)
	}
	return resp.Claims
}

func (k kubelet) unprepare(claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodeUnprepareResourceResponse {
	k.t.Helper()
	req := &drapb.NodeUnprepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, ref(c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangTimeout)
	defer cancel()
	resp, err := k.client.NodeUnprepareResources(ctx, req)
	if err != nil {
		k.t.Fatalf("NodeUnprepareResources: %v", err)
	}
	return resp.Claims
}

// simGPUs is a simulated node, two H100s: GPU 0 split into 3g.40gb at 0
// and 4, GPU 1 whole. It returns the partitioner to change the layout and
// a function that discovers the layout as the agent does.
func simGPUs(t *testing.T) (*nvmlmig.Partitioner, func() []mig.GPU) {
	t.Helper()
	lib := simtest.New(t, sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, UUIDSeed: t.Name()})
	part := nvmlmig.NewPartitioner(lib)
	if err := part.SetMigMode(0, true); err != nil {
		t.Fatal(err)
	}
	for _, start := range []int{0, 4} {
		if _, err := part.CreateInstance(0, "3g.40gb", start); err != nil {
			t.Fatal(err)
		}
	}
	return part, func() []mig.GPU {
		t.Helper()
		gpus, err := nvmlmig.Discover(lib)
		if err != nil {
			t.Fatal(err)
		}
		return gpus
	}
}

// Device names of simGPUs' layout.
const (
	mig0  = "gpu-0-mig-3g40gb-9-0"
	mig4  = "gpu-0-mig-3g40gb-9-4"
	whole = "gpu-1"
)

// allocated is a claim allocated by the scheduler: results are
// request/device pairs of this driver on node, and the claim is reserved
// for pod.
func allocated(ns, name, pod string, results ...[2]string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, r := range results {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: r[0], Driver: dra.DriverName, Pool: node, Device: r[1]})
	}
	if pod != "" {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	}
	return c
}

// fakeClient is a fake API with this node and the claims.
func fakeClient(claims ...*resourceapi.ResourceClaim) *fake.Clientset {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}})
	// The fake stores what a dry run is asked to create; the API server
	// only answers with it (dynamic mode's check at start).
	client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if c, ok := a.(k8stesting.CreateActionImpl); ok && slices.Contains(c.CreateOptions.DryRun, metav1.DryRunAll) {
			return true, c.Object, nil
		}
		return false, nil, nil
	})
	for _, c := range claims {
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			panic(err)
		}
	}
	return client
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, hangTimeout, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
