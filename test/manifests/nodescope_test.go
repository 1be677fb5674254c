package manifests

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/agent"
	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// The ValidatingAdmissionPolicy, applied from the rendered chart to a real
// API server, limits the agent's ServiceAccount, authenticated with a token
// bound to a pod on node-a as the kubelet mounts it, to node-a and to its
// own labels and annotations, written by server-side apply as the agent
// writes them.
func TestAgentNodeScopePolicy(t *testing.T) {
	objs := helmTemplate(t, scenarioNamed(t, "simulated"))
	cfg := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	c := newCluster(t, cfg)
	ctx := t.Context()

	mustCreate(t, admin.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if strings.HasPrefix(o.GetName(), "migflex-agent") {
				if err := c.apply(ctx, o, false); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// No status type check here: that is kube-controller-manager's work,
	// and testenv runs none. The cases below evaluate every expression of
	// the policy; one that failed at run time would refuse the allowed
	// cases (failurePolicy Fail) with its error instead of passing.

	userLabels := map[string]string{"kubernetes.io/hostname": "x", "team": "ml"}
	userAnnotations := map[string]string{"nvidia.com/mig.config": "version: v1", "note": "by hand"}
	nodes := map[string]*corev1.Node{}
	for _, name := range []string{"node-a", "node-b"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: userLabels, Annotations: userAnnotations}}
		n.Labels = map[string]string{"kubernetes.io/hostname": name, "team": "ml"}
		nodes[name] = mustCreate(t, admin.CoreV1().Nodes(), n)
	}
	pod := mustCreate(t, admin.CoreV1().Pods(namespace), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "migflex-agent-xyz", Namespace: namespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: "migflex-agent",
			NodeName:           "node-a",
			Containers:         []corev1.Container{{Name: "agent", Image: "ghcr.io/migflex/migflex:0.1.0"}},
		},
	})

	bound := tokenClient(t, cfg, admin, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	// Kubernetes >= 1.32 puts the node of the pod a token is bound to into
	// its user info; the policy relies on it.
	review, err := bound.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ui := review.Status.UserInfo
	if ui.Username != "system:serviceaccount:gpu-webhook:migflex-agent" {
		t.Fatalf("token authenticates as %q", ui.Username)
	}
	if diff := cmp.Diff(authenticationv1.ExtraValue{"node-a"}, ui.Extra["authentication.kubernetes.io/node-name"]); diff != "" {
		t.Fatalf("node name in the token's user info (-want +got):\n%s\nextra: %v", diff, ui.Extra)
	}

	// The policy takes effect asynchronously: wait until a dry run of a
	// forbidden change is refused by it.
	waitForPolicy(t, bound, "node-b")

	owned := func(node string, mods func(*corev1ac.NodeApplyConfiguration)) *corev1ac.NodeApplyConfiguration {
		ac := corev1ac.Node(node).WithUID(nodes[node].UID).
			WithLabels(map[string]string{
				"nvidia.com/mig.config.state":     "success",
				"nvidia.com/gpu.product":          "NVIDIA-H100-80GB-HBM3",
				"nvidia.com/gpu.count":            "1",
				"nvidia.com/mig.capable":          "true",
				"nvidia.com/mig.strategy":         "mixed",
				"nvidia.com/mig-1g.10gb.count":    "7",
				"nvidia.com/mig-1g.10gb.me.count": "1",
			}).
			WithAnnotations(map[string]string{
				"migflex.io/mig.layout":        `[{"index":0}]`,
				"migflex.io/mig.profiles":      `[{"model":"H100-SXM5-80GB","profiles":[]}]`,
				"migflex.io/mig.config.reason": "busy",
			})
		if mods != nil {
			mods(ac)
		}
		return ac
	}
	apply := func(cs kubernetes.Interface, ac *corev1ac.NodeApplyConfiguration) error {
		_, err := cs.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: agent.DefaultFieldManager, Force: true})
		return err
	}

	for _, tc := range []scopeCase{
		{
			name: "own labels and annotations on its own node",
			do:   func() error { return apply(bound, owned("node-a", nil)) },
		},
		{
			// A profile count label the agent stops setting is removed by
			// its apply: deleting an owned key is allowed.
			name: "dropping an owned label",
			do: func() error {
				ac := owned("node-a", nil)
				delete(ac.Labels, "nvidia.com/mig-1g.10gb.me.count")
				delete(ac.Annotations, "migflex.io/mig.config.reason")
				return apply(bound, ac)
			},
		},
		{
			// GPU feature discovery's sharing labels (--sharing-config).
			name: "sharing labels on its own node",
			do: func() error {
				return apply(bound, owned("node-a", func(ac *corev1ac.NodeApplyConfiguration) {
					ac.WithLabels(map[string]string{
						"nvidia.com/mig-1g.10gb.replicas": "2", "nvidia.com/mig-1g.10gb.sharing-strategy": "time-slicing",
						"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
					})
					// Still dropped (the case before), as checked below.
					delete(ac.Labels, "nvidia.com/mig-1g.10gb.me.count")
				}))
			},
		},
		{
			name: "a label of another vendor's sharing",
			do: func() error {
				return apply(bound, owned("node-a", func(ac *corev1ac.NodeApplyConfiguration) {
					ac.WithLabels(map[string]string{"example.com/gpu.replicas": "2"})
				}))
			},
			wantErr: "may change only its own Node labels, not example.com/gpu.replicas",
			node:    "node-a",
		},
		{
			name:    "own labels on another node",
			do:      func() error { return apply(bound, owned("node-b", nil)) },
			wantErr: "the migflex agent on node node-a may change only its own Node, not node-b",
			node:    "node-b",
		},
		{
			name: "a foreign label on its own node",
			do: func() error {
				return apply(bound, owned("node-a", func(ac *corev1ac.NodeApplyConfiguration) {
					ac.WithLabels(map[string]string{"node-role.kubernetes.io/control-plane": ""})
				}))
			},
			wantErr: "may change only its own Node labels, not node-role.kubernetes.io/control-plane",
			node:    "node-a",
		},
		{
			name: "a foreign annotation on its own node",
			do: func() error {
				return apply(bound, owned("node-a", func(ac *corev1ac.NodeApplyConfiguration) {
					ac.WithAnnotations(map[string]string{"nvidia.com/mig.config": "version: v1\nmig-configs: {}"})
				}))
			},
			wantErr: "may change only its own Node annotations, not nvidia.com/mig.config",
			node:    "node-a",
		},
		{
			name: "removing a user's label from its own node",
			do: func() error {
				_, err := bound.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":null}}}`), metav1.PatchOptions{})
				return err
			},
			wantErr: "may change only its own Node labels, not team",
			node:    "node-a",
		},
		{
			name: "cordoning its own node",
			do: func() error {
				_, err := bound.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
				return err
			},
			wantErr: "may change only labels and annotations of its Node",
			node:    "node-a",
		},
		{
			name: "a token bound to no pod",
			do: func() error {
				return apply(tokenClient(t, cfg, admin, nil), owned("node-a", nil))
			},
			wantErr: "credentials carry no node name",
			node:    "node-a",
		},
		{
			// The policy binds the agent only: an administrator (and the
			// kubelet, GPU feature discovery, ...) are not affected.
			name: "anyone else is not limited",
			do: func() error {
				return apply(admin, corev1ac.Node("node-b").WithLabels(map[string]string{"example.com/admin": "yes"}))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, admin) })
	}

	// What the allowed applies left: the agent's keys on node-a next to the
	// users', and nothing of the agent's on node-b.
	a := getNode(t, admin, "node-a")
	if a.Labels["team"] != "ml" || a.Annotations["note"] != "by hand" || a.Labels["nvidia.com/mig.config.state"] != "success" {
		t.Errorf("node-a labels %v annotations %v", a.Labels, a.Annotations)
	}
	if _, ok := a.Labels["nvidia.com/mig-1g.10gb.me.count"]; ok {
		t.Error("the dropped count label is still on node-a")
	}
	if b := getNode(t, admin, "node-b"); b.Labels["nvidia.com/mig.config.state"] != "" {
		t.Errorf("node-b got the agent's labels: %v", b.Labels)
	}

	t.Run("status", func(t *testing.T) { nodeStatusScope(t, admin, bound) })

	t.Run("events in default only", func(t *testing.T) {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "node-a.1", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-a"},
			Reason:         "MigConfigApplied", Type: corev1.EventTypeNormal,
		}
		if _, err := bound.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Errorf("creating an Event about its Node: %v", err)
		}
		ev.Namespace = namespace
		if _, err := bound.CoreV1().Events(namespace).Create(ctx, ev, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("creating an Event in %s: %v, want forbidden", namespace, err)
		}
	})
}

// nodeStatusScope checks the policy on the agent's writes of nodes/status
// (--publish-allocatable): on its own Node, the capacity and allocatable
// of nvidia.com/gpu and nvidia.com/mig-* only; nothing else in the status,
// and nothing of another Node's.
func nodeStatusScope(t *testing.T, admin, bound kubernetes.Interface) {
	ctx := t.Context()
	// The kubelet's status, as it would have written it.
	for _, name := range []string{"node-a", "node-b"} {
		n := getNode(t, admin, name)
		n.Status = corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"cpu": resource.MustParse("4"), "nvidia.com/mig-1g.10gb": resource.MustParse("7"), "example.com/fpga": resource.MustParse("1")},
			Allocatable: corev1.ResourceList{"cpu": resource.MustParse("4"), "nvidia.com/mig-1g.10gb": resource.MustParse("7"), "example.com/fpga": resource.MustParse("1")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
			NodeInfo:    corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
		}
		if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patchStatus := func(node, patch string) func() error {
		return func() error {
			_, err := bound.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
			return err
		}
	}
	for _, tc := range []scopeCase{
		{
			// What the publisher writes after a layout change: a new
			// profile, the old one at 0, and a whole GPU.
			name: "GPU capacity and allocatable of its own node",
			do: patchStatus("node-a", `{"status":{"capacity":{"nvidia.com/mig-1g.10gb":"0","nvidia.com/mig-3g.40gb":"2","nvidia.com/gpu":"1"},`+
				`"allocatable":{"nvidia.com/mig-1g.10gb":"0","nvidia.com/mig-3g.40gb":"2","nvidia.com/gpu":"1"}}}`),
		},
		{
			name: "removing a GPU entry of its own node",
			do:   patchStatus("node-a", `{"status":{"capacity":{"nvidia.com/gpu":null},"allocatable":{"nvidia.com/gpu":null}}}`),
		},
		{
			name:    "GPU allocatable of another node",
			do:      patchStatus("node-b", `{"status":{"allocatable":{"nvidia.com/mig-1g.10gb":"9"}}}`),
			wantErr: "the migflex agent on node node-a may change only its own Node, not node-b",
			node:    "node-b",
		},
		{
			name:    "cpu capacity of its own node",
			do:      patchStatus("node-a", `{"status":{"capacity":{"cpu":"64"}}}`),
			wantErr: "only the capacity and allocatable of nvidia.com/gpu and nvidia.com/mig-*, not capacity cpu",
			node:    "node-a",
		},
		{
			name:    "another extended resource in the allocatable",
			do:      patchStatus("node-a", `{"status":{"allocatable":{"example.com/fpga":"8","nvidia.com/mig-3g.40gb":"1"}}}`),
			wantErr: "not allocatable example.com/fpga",
			node:    "node-a",
		},
		{
			name:    "removing another resource",
			do:      patchStatus("node-a", `{"status":{"capacity":{"example.com/fpga":null}}}`),
			wantErr: "not capacity example.com/fpga",
			node:    "node-a",
		},
		{
			name:    "a resource named like ours but not ours",
			do:      patchStatus("node-a", `{"status":{"allocatable":{"nvidia.com/gpu-x":"1"}}}`),
			wantErr: "not allocatable nvidia.com/gpu-x",
			node:    "node-a",
		},
		{
			name:    "a condition of its own node",
			do:      patchStatus("node-a", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Forged"}]}}`),
			wantErr: "and in its status only the capacity and allocatable of nvidia.com/gpu and nvidia.com/mig-*",
			node:    "node-a",
		},
		{
			name:    "node info beside a GPU entry",
			do:      patchStatus("node-a", `{"status":{"nodeInfo":{"kubeletVersion":"v9.9.9"},"allocatable":{"nvidia.com/mig-3g.40gb":"1"}}}`),
			wantErr: "and in its status only the capacity and allocatable",
			node:    "node-a",
		},
		{
			name:    "a foreign label through the status",
			do:      patchStatus("node-a", `{"metadata":{"labels":{"team":"other"}},"status":{"allocatable":{"nvidia.com/mig-3g.40gb":"1"}}}`),
			wantErr: "may change only its own Node labels, not team",
			node:    "node-a",
		},
		{
			name: "the kubelet (anyone else) is not limited",
			do: func() error {
				_, err := admin.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"status":{"capacity":{"cpu":"8"}}}`), metav1.PatchOptions{}, "status")
				return err
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, admin) })
	}
	a := getNode(t, admin, "node-a")
	want := corev1.ResourceList{"cpu": resource.MustParse("4"), "nvidia.com/mig-1g.10gb": resource.MustParse("0"), "nvidia.com/mig-3g.40gb": resource.MustParse("2"), "example.com/fpga": resource.MustParse("1")}
	if diff := cmp.Diff(want, a.Status.Capacity); diff != "" {
		t.Errorf("node-a capacity after the allowed writes (-want +got):\n%s", diff)
	}
	if a.Status.Conditions[0].Reason != "KubeletReady" || a.Status.NodeInfo.KubeletVersion != "v1.37.2" {
		t.Errorf("node-a status changed: %+v", a.Status)
	}
}

// The policy names every field of NodeStatus but capacity and allocatable
// as unchanged: a field a newer k8s.io/api adds must be added there, or the
// agent could change it.
func TestNodeScopePolicyNamesEveryStatusField(t *testing.T) {
	objs := helmTemplate(t, scenarioNamed(t, "default"))
	policy := objs.find("ValidatingAdmissionPolicy", "migflex-agent-node-scope")
	if policy == nil {
		t.Fatal("no node-scope policy")
	}
	var expr string
	list, _, _ := unstructured.NestedSlice(policy.Object, "spec", "variables")
	for _, v := range list {
		if v := v.(map[string]any); v["name"] == "otherStatusUnchanged" {
			expr = v["expression"].(string)
		}
	}
	var named []string
	for _, m := range regexp.MustCompile(`object\.\?status\.\?(\w+) == oldObject\.\?status\.\?(\w+)`).FindAllStringSubmatch(expr, -1) {
		if m[1] != m[2] {
			t.Errorf("compares %s with %s", m[1], m[2])
		}
		named = append(named, m[1])
	}
	var want []string
	st := reflect.TypeFor[corev1.NodeStatus]()
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if name != "capacity" && name != "allocatable" {
			want = append(want, name)
		}
	}
	slices.Sort(named)
	slices.Sort(want)
	if diff := cmp.Diff(want, named); diff != "" {
		t.Errorf("status fields the policy keeps unchanged (-NodeStatus +policy):\n%s", diff)
	}
}

// tokenClient returns a client authenticated as the agent's ServiceAccount
// with a token from the TokenRequest API, bound to ref when not nil.
func tokenClient(t *testing.T, cfg *rest.Config, admin kubernetes.Interface, ref *authenticationv1.BoundObjectReference) kubernetes.Interface {
	t.Helper()
	return saTokenClient(t, cfg, admin, "migflex-agent", ref)
}

// waitForPolicy polls a dry-run apply to another node until the policy
// refuses it.
func waitForPolicy(t *testing.T, client kubernetes.Interface, otherNode string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ac := corev1ac.Node(otherNode).WithLabels(map[string]string{"nvidia.com/mig.config.state": "pending"})
		_, last = client.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: agent.DefaultFieldManager, Force: true, DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "may change only its own Node"), nil
	})
	if err != nil {
		t.Fatalf("the policy never refused a change to %s: last answer %v", otherNode, last)
	}
}

// scopeCase is one request under a node-scope policy: allowed when wantErr
// is empty, else refused with a 403 containing it and leaving node's
// metadata as it was.
type scopeCase struct {
	name    string
	do      func() error
	wantErr string
	node    string
}

func (tc scopeCase) check(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	var before *corev1.Node
	if tc.node != "" {
		before = getNode(t, admin, tc.node)
	}
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
	after := getNode(t, admin, tc.node)
	if diff := cmp.Diff(before.ObjectMeta, after.ObjectMeta); diff != "" {
		t.Errorf("a refused request changed %s (-before +after):\n%s", tc.node, diff)
	}
	if diff := cmp.Diff(before.Status, after.Status); diff != "" {
		t.Errorf("a refused request changed the status of %s (-before +after):\n%s", tc.node, diff)
	}
}

func getNode(t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// creator is the Create method every typed client has.
type creator[T any] interface {
	Create(ctx context.Context, obj *T, opts metav1.CreateOptions) (*T, error)
}

func mustCreate[T any](t testing.TB, c creator[T], obj *T) *T {
	t.Helper()
	out, err := c.Create(t.Context(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %T: %v", obj, fmt.Errorf("%w", err))
	}
	return out
}

// The keys the policy lets the agent change are the ones internal/nodeagent/agent
// writes: a key added there and not here would have every apply refused.
func TestNodeScopePolicyKeysMatchTheAgent(t *testing.T) {
	objs := helmTemplate(t, scenarioNamed(t, "default"))
	policy := objs.find("ValidatingAdmissionPolicy", "migflex-agent-node-scope")
	if policy == nil {
		t.Fatal("no node-scope policy")
	}
	vars := map[string]string{}
	list, _, _ := unstructured.NestedSlice(policy.Object, "spec", "variables")
	for _, v := range list {
		v := v.(map[string]any)
		vars[v["name"].(string)] = v["expression"].(string)
	}
	quoted := regexp.MustCompile(`'([^']*)'`)
	literals := func(expr string) []string {
		var out []string
		for _, m := range quoted.FindAllStringSubmatch(expr, -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return out
	}
	wantLabels := []string{nodeinfo.LabelMigConfigState, nodeinfo.LabelGPUProduct, nodeinfo.LabelGPUCount, nodeinfo.LabelMigCapable, nodeinfo.LabelMigStrategy, nodeinfo.LabelServing, nodeinfo.LabelDRAMode}
	slices.Sort(wantLabels)
	if diff := cmp.Diff(wantLabels, literals(vars["ownedLabels"])); diff != "" {
		t.Errorf("ownedLabels (-agent +policy):\n%s", diff)
	}
	wantAnnotations := []string{nodeinfo.AnnotationReason, nodeinfo.AnnotationLayout, nodeinfo.AnnotationProfiles}
	slices.Sort(wantAnnotations)
	if diff := cmp.Diff(wantAnnotations, literals(vars["ownedAnnotations"])); diff != "" {
		t.Errorf("ownedAnnotations (-agent +policy):\n%s", diff)
	}
	// The per-profile counts, nvidia.com/mig-<profile>.count.
	if !strings.Contains(vars["foreignLabels"], "k.startsWith('nvidia.com/mig-') && k.endsWith('.count')") {
		t.Errorf("foreignLabels %q does not own the profile count labels", vars["foreignLabels"])
	}
	// GPU feature discovery's sharing labels of each resource
	// (deviceplugin.Manager.Labels with --sharing-config).
	if !strings.Contains(vars["foreignLabels"], "(k.startsWith('nvidia.com/mig-') || k.startsWith('nvidia.com/gpu.')) && (k.endsWith('.replicas') || k.endsWith('.sharing-strategy'))") {
		t.Errorf("foreignLabels %q does not own the sharing labels", vars["foreignLabels"])
	}
}
