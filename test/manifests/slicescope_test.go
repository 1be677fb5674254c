package manifests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/draplugin"
	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// The ValidatingAdmissionPolicy of a DRA agent, applied from the rendered
// chart to a real API server with the agent's DRA permissions, limits the
// agent's ServiceAccount, authenticated with a token bound to a pod on
// node-a as the kubelet mounts it, to the ResourceSlices of its driver on
// node-a, in node-a's pool. The kubelet plugin helper's ResourceSlice
// controller, as the agent runs it, publishes, shrinks and withdraws its
// pool under it, and an agent serving through the device plugin deletes
// the slices a DRA agent of its node left.
func TestAgentSliceScopePolicy(t *testing.T) {
	objs := helmTemplate(t, scenarioNamed(t, "dra"))
	if objs.find("ValidatingAdmissionPolicy", "migflex-agent-slice-scope") == nil || objs.find("ValidatingAdmissionPolicyBinding", "migflex-agent-slice-scope") == nil {
		t.Fatal("the chart with agent.serving=dra renders no slice-scope policy and binding")
	}
	cfg := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	c := newCluster(t, cfg)
	ctx := t.Context()

	mustCreate(t, admin.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if strings.HasPrefix(o.GetName(), "migflex-agent") {
				if err := c.apply(ctx, o, false); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	nodes := map[string]*corev1.Node{}
	for _, name := range []string{"node-a", "node-b"} {
		nodes[name] = mustCreate(t, admin.CoreV1().Nodes(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	pod := mustCreate(t, admin.CoreV1().Pods(namespace), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "migflex-agent-dra-xyz", Namespace: namespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: "migflex-agent",
			NodeName:           "node-a",
			Containers:         []corev1.Container{{Name: "agent", Image: "ghcr.io/migflex/migflex:0.1.0"}},
		},
	})
	bound := tokenClient(t, cfg, admin, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	slicesOf := func(cs kubernetes.Interface) interface {
		Create(context.Context, *resourceapi.ResourceSlice, metav1.CreateOptions) (*resourceapi.ResourceSlice, error)
		Update(context.Context, *resourceapi.ResourceSlice, metav1.UpdateOptions) (*resourceapi.ResourceSlice, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
		DeleteCollection(context.Context, metav1.DeleteOptions, metav1.ListOptions) error
	} {
		return cs.ResourceV1().ResourceSlices()
	}

	// The policy takes effect asynchronously: wait until a dry run of a
	// forbidden create is refused by it.
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = bound.ResourceV1().ResourceSlices().Create(ctx, testSlice("probe", dra.DriverName, "node-b", "node-b"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "may change only ResourceSlices of its own node"), nil
	})
	if err != nil {
		t.Fatalf("the policy never refused a slice of node-b: last answer %v", last)
	}

	// Slices the agent on node-a must leave alone, made by an
	// administrator, whom the policy does not bind.
	for _, s := range []*resourceapi.ResourceSlice{
		testSlice("node-b-slice", dra.DriverName, "node-b", "node-b"),
		testSlice("nvidia-on-a", "gpu.nvidia.com", "node-a", "node-a"),
	} {
		mustCreate(t, slicesOf(admin), s)
	}
	own := "node-a-slice"
	update := func(cs kubernetes.Interface, name string) error {
		s, err := admin.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", len(s.Spec.Devices))})
		_, err = slicesOf(cs).Update(ctx, s, metav1.UpdateOptions{})
		return err
	}
	sameNode := fields.AndSelectors(
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, dra.DriverName),
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, "node-a"),
	).String()

	for _, tc := range []sliceCase{
		{
			name: "create its node's slice",
			do: func() error {
				_, err := slicesOf(bound).Create(ctx, testSlice(own, dra.DriverName, "node-a", "node-a"), metav1.CreateOptions{})
				return err
			},
		},
		{
			name: "update its node's slice",
			do:   func() error { return update(bound, own) },
		},
		{
			name: "create a slice of another node",
			do: func() error {
				_, err := slicesOf(bound).Create(ctx, testSlice("b-forged", dra.DriverName, "node-b", "node-b"), metav1.CreateOptions{})
				return err
			},
			wantErr: "the migflex agent on node node-a may change only ResourceSlices of its own node, not node node-b",
			slices:  []string{"b-forged"},
		},
		{
			name: "create a slice of another driver on its node",
			do: func() error {
				_, err := slicesOf(bound).Create(ctx, testSlice("a-nvidia", "gpu.nvidia.com", "node-a", "node-a"), metav1.CreateOptions{})
				return err
			},
			wantErr: "may change only ResourceSlices of driver gpu.migflex.io, not gpu.nvidia.com",
			slices:  []string{"a-nvidia"},
		},
		{
			// A slice for every node (or a node selector) has no nodeName:
			// the agent publishes only what its node has.
			name: "create a slice without nodeName",
			do: func() error {
				s := testSlice("all-nodes", dra.DriverName, "", "node-a")
				s.Spec.AllNodes = ptr(true)
				_, err := slicesOf(bound).Create(ctx, s, metav1.CreateOptions{})
				return err
			},
			wantErr: "may change only ResourceSlices of its own node, not one without spec.nodeName",
			slices:  []string{"all-nodes"},
		},
		{
			// A pool is one node's: another node's pool name on node-a
			// would make that node's pool look incomplete to the scheduler.
			name: "create a slice in another node's pool",
			do: func() error {
				_, err := slicesOf(bound).Create(ctx, testSlice("a-in-b-pool", dra.DriverName, "node-a", "node-b"), metav1.CreateOptions{})
				return err
			},
			wantErr: "may publish only the pool named after its node, not node-b",
			slices:  []string{"a-in-b-pool"},
		},
		{
			name:    "update another node's slice",
			do:      func() error { return update(bound, "node-b-slice") },
			wantErr: "may change only ResourceSlices of its own node, not node node-b",
			slices:  []string{"node-b-slice"},
		},
		{
			name:    "update another driver's slice on its node",
			do:      func() error { return update(bound, "nvidia-on-a") },
			wantErr: "may change only ResourceSlices of driver gpu.migflex.io, not gpu.nvidia.com",
			slices:  []string{"nvidia-on-a"},
		},
		{
			name:    "delete another node's slice",
			do:      func() error { return slicesOf(bound).Delete(ctx, "node-b-slice", metav1.DeleteOptions{}) },
			wantErr: "may change only ResourceSlices of its own node, not node node-b",
			slices:  []string{"node-b-slice"},
		},
		{
			name:    "delete another driver's slice on its node",
			do:      func() error { return slicesOf(bound).Delete(ctx, "nvidia-on-a", metav1.DeleteOptions{}) },
			wantErr: "may change only ResourceSlices of driver gpu.migflex.io, not gpu.nvidia.com",
			slices:  []string{"nvidia-on-a"},
		},
		{
			// Its RBAC grants neither: the helper updates and deletes by
			// name.
			name: "patch or delete a collection: not granted",
			do: func() error {
				err := slicesOf(bound).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sameNode})
				if !apierrors.IsForbidden(err) {
					return fmt.Errorf("deletecollection: %v, want forbidden", err)
				}
				_, err = bound.ResourceV1().ResourceSlices().Patch(ctx, own, "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
				return err
			},
			wantErr: `cannot patch resource "resourceslices"`,
			slices:  []string{own},
		},
		{
			name: "a token bound to no pod",
			do: func() error {
				_, err := slicesOf(tokenClient(t, cfg, admin, nil)).Create(ctx, testSlice("unbound", dra.DriverName, "node-a", "node-a"), metav1.CreateOptions{})
				return err
			},
			wantErr: "credentials carry no node name",
			slices:  []string{"unbound"},
		},
		{
			name: "delete its node's slice",
			do:   func() error { return slicesOf(bound).Delete(ctx, own, metav1.DeleteOptions{}) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, admin) })
	}

	// Should RBAC grant deletecollection (an operator's wider role), the
	// policy still refuses it, even of the agent's own slices: the helper
	// never deletes a collection.
	t.Run("delete a collection with RBAC granting it", func(t *testing.T) {
		mustCreate(t, slicesOf(admin), testSlice(own, dra.DriverName, "node-a", "node-a"))
		grantSliceDeleteCollection(t, admin)
		sliceCase{
			do: func() error {
				var err error
				// RBAC's cache takes the new role a moment later.
				_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					err = slicesOf(bound).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sameNode})
					return !strings.Contains(fmt.Sprint(err), "cannot deletecollection"), nil
				})
				return err
			},
			wantErr: "the migflex agent deletes ResourceSlices one by one, never by collection",
			slices:  []string{own},
		}.check(t, admin)
		if err := admin.ResourceV1().ResourceSlices().Delete(ctx, own, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the kubelet plugin helper publishes under it", func(t *testing.T) {
		testHelperPublishesUnderPolicy(t, bound, admin, nodes["node-a"])
	})

	// The agent on node-a switched back to the device plugin deletes the
	// slices its DRA agent left (the chart's agent.draNodeSelector keeps
	// one ServiceAccount, with the DRA role, for both DaemonSets).
	t.Run("the device-plugin agent withdraws its node's slices", func(t *testing.T) {
		for _, name := range []string{"left-0", "left-1"} {
			s := testSlice(name, dra.DriverName, "node-a", "node-a")
			s.Spec.Pool.ResourceSliceCount = 2
			mustCreate(t, slicesOf(admin), s)
		}
		if n, err := draplugin.Withdraw(ctx, bound, dra.DriverName, "node-a"); err != nil || n != 2 {
			t.Fatalf("Withdraw = %d, %v; want the 2 slices deleted", n, err)
		}
	})

	// What the others' slices look like after all that: untouched.
	for _, name := range []string{"node-b-slice", "nvidia-on-a"} {
		s, err := admin.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Spec.Devices) != 1 {
			t.Errorf("slice %s after the agent's requests: %v, %v", name, err, s)
		}
	}
}

// testHelperPublishesUnderPolicy runs the kubelet plugin helper's
// ResourceSlice controller (what kubeletplugin.Helper.PublishResources
// drives) with the agent's bound credentials: a pool of 65 whole GPUs (two
// slices, dra.MaxDevicesPerSlice each), then 1 (an update and a delete),
// then none (the pool withdrawn). Every write must pass: a refused one
// reaches the error handler.
func testHelperPublishesUnderPolicy(t *testing.T, bound, admin kubernetes.Interface, node *corev1.Node) {
	_, ctx := ktesting.NewTestContext(t)
	var mu sync.Mutex
	var errs []string
	resources := func(n int) *resourceslice.DriverResources {
		var gpus []mig.GPU
		for i := range n {
			gpus = append(gpus, mig.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559})
		}
		devs, err := dra.Devices(gpus)
		if err != nil {
			t.Fatal(err)
		}
		res, err := dra.Resources(node.Name, devs, nil, dra.UnhealthyTaint)
		if err != nil {
			t.Fatal(err)
		}
		return &res
	}
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: dra.DriverName,
		KubeClient: bound,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
		Resources:  resources(dra.MaxDevicesPerSlice + 1),
		ErrorHandler: func(_ context.Context, err error, msg string) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, msg+": "+err.Error())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop()
	// devices lists node-a's devices of the driver, by slice.
	devices := func(ctx context.Context) ([]int, error) {
		list, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, dra.DriverName),
			fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, node.Name),
		).String()})
		if err != nil {
			return nil, err
		}
		var n []int
		for _, s := range list.Items {
			n = append(n, len(s.Spec.Devices))
		}
		return n, nil
	}
	for _, step := range []struct {
		name string
		res  *resourceslice.DriverResources // nil: as started
		want []int                          // devices per slice
	}{
		{name: "65 GPUs", want: []int{1, dra.MaxDevicesPerSlice}},
		{name: "1 GPU", res: resources(1), want: []int{1}},
		{name: "no pool", res: &resourceslice.DriverResources{}, want: nil},
	} {
		if step.res != nil {
			ctrl.Update(step.res)
		}
		var got []int
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err = devices(ctx)
			if err != nil {
				return false, err
			}
			mu.Lock()
			defer mu.Unlock()
			if len(errs) > 0 {
				return false, fmt.Errorf("the helper's writes failed: %s", strings.Join(errs, "; "))
			}
			slices.Sort(got)
			return slices.Equal(got, step.want), nil
		})
		if err != nil {
			t.Fatalf("%s: %v: slices hold %v devices, want %v", step.name, err, got, step.want)
		}
	}
	s := ctrl.GetStats()
	if s.NumCreates < 2 || s.NumDeletes < 1 {
		t.Errorf("the helper's writes %+v: want at least two creates and a delete", s)
	}
	t.Logf("the helper's writes under the policy: %+v", s)
}

// testSlice is a slice of driver with one device, on node (none when
// empty), in pool.
func testSlice(name, driver, node, pool string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:  driver,
			Pool:    resourceapi.ResourcePool{Name: pool, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0"}},
		},
	}
	if node != "" {
		s.Spec.NodeName = &node
	}
	return s
}

// grantSliceDeleteCollection binds a role granting deletecollection on
// ResourceSlices to the agent's ServiceAccount, beside its own.
func grantSliceDeleteCollection(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	const name = "slice-scope-test-deletecollection"
	mustCreate(t, admin.RbacV1().ClusterRoles(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"deletecollection"}}},
	})
	mustCreate(t, admin.RbacV1().ClusterRoleBindings(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "migflex-agent", Namespace: namespace}},
	})
}

// sliceCase is one request under the slice-scope policy: allowed when
// wantErr is empty, else refused with a 403 containing it and leaving
// the named slices as they were (or absent).
type sliceCase struct {
	name    string
	do      func() error
	wantErr string
	slices  []string
}

func (tc sliceCase) check(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	state := func() map[string]string {
		out := map[string]string{}
		for _, name := range tc.slices {
			s, err := admin.ResourceV1().ResourceSlices().Get(t.Context(), name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				out[name] = "absent"
			case err != nil:
				t.Fatal(err)
			default:
				out[name] = s.ResourceVersion
			}
		}
		return out
	}
	before := state()
	err := tc.do()
	if tc.wantErr == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("allowed, want refused with %q", tc.wantErr)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr) {
		t.Fatalf("%v\nwant a refusal (403) %q", err, tc.wantErr)
	}
	t.Logf("refused: %v", err)
	if diff := cmp.Diff(before, state()); diff != "" {
		t.Errorf("a refused request changed slices (-before +after):\n%s", diff)
	}
}
