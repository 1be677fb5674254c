package manifests

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner"
	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/testsupport/testenv"
)

const plannerSA = "migflex-planner"

// applyPlannerObjects applies the planner's ServiceAccount, RBAC and
// node-scope policy from the rendered chart.
func applyPlannerObjects(t *testing.T, c *cluster, objs objects) {
	t.Helper()
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if strings.HasPrefix(o.GetName(), plannerSA) {
				if err := c.apply(t.Context(), o, false); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// The ValidatingAdmissionPolicy, applied from the rendered chart to a real
// API server, limits the planner's ServiceAccount, authenticated with a
// token from the TokenRequest API, to nvidia.com/mig.config and its dry-run
// proposal, on opted-in nodes, written by server-side apply as the planner
// writes them.
func TestPlannerNodeScopePolicy(t *testing.T) {
	objs := helmTemplate(t, scenarioNamed(t, "planner"))
	cfg := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	c := newCluster(t, cfg)
	ctx := t.Context()
	mustCreate(t, admin.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	applyPlannerObjects(t, c, objs)

	nodes := map[string]*corev1.Node{}
	for name, labels := range map[string]map[string]string{
		"opted-in":  {nodeinfo.LabelPlanner: nodeinfo.PlannerEnabled, "team": "ml"},
		"opted-out": {"team": "ml"},
		"disabled":  {nodeinfo.LabelPlanner: "disabled"},
	} {
		nodes[name] = mustCreate(t, admin.CoreV1().Nodes(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: labels, Annotations: map[string]string{"note": "by hand"},
		}})
	}
	plannerClient := saTokenClient(t, cfg, admin, plannerSA, nil)

	apply := func(node string, ann map[string]string) error {
		ac := corev1ac.Node(node).WithUID(nodes[node].UID).WithAnnotations(ann)
		_, err := plannerClient.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: planner.DefaultFieldManager, Force: true})
		return err
	}
	// The policy takes effect asynchronously.
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ac := corev1ac.Node("opted-out").WithAnnotations(map[string]string{nodeinfo.AnnotationMigConfig: "x"})
		_, last = plannerClient.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: planner.DefaultFieldManager, Force: true, DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "may change only nodes labelled"), nil
	})
	if err != nil {
		t.Fatalf("the policy never refused the planner on an opted-out node: last answer %v", last)
	}

	doc := "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"3g.40gb\": 2}\n"
	for _, tc := range []scopeCase{
		{
			name: "mig.config on an opted-in node",
			do:   func() error { return apply("opted-in", map[string]string{nodeinfo.AnnotationMigConfig: doc}) },
		},
		{
			// The planner's applies carry every annotation it owns.
			name: "its proposal beside its mig.config",
			do: func() error {
				return apply("opted-in", map[string]string{nodeinfo.AnnotationMigConfig: doc, nodeinfo.AnnotationProposed: doc})
			},
		},
		{
			name: "writing a reservation",
			do: func() error {
				return apply("opted-in", map[string]string{nodeinfo.AnnotationMigConfig: doc, nodeinfo.AnnotationProposed: doc,
					nodeinfo.AnnotationReservation: `{"pod":"ns/big","gpus":[0,1],"since":"2026-12-02T18:00:00Z","ready":"2026-12-02T18:00:00Z","deadline":"2026-12-02T18:02:00Z"}`})
			},
		},
		{
			name: "dropping its proposal and its reservation",
			do:   func() error { return apply("opted-in", map[string]string{nodeinfo.AnnotationMigConfig: doc}) },
		},
		{
			name:    "mig.config on a node not opted in",
			do:      func() error { return apply("opted-out", map[string]string{nodeinfo.AnnotationMigConfig: doc}) },
			wantErr: "the migflex planner may change only nodes labelled migflex.io/planner=enabled, not opted-out",
			node:    "opted-out",
		},
		{
			name:    "mig.config on a node opted out by value",
			do:      func() error { return apply("disabled", map[string]string{nodeinfo.AnnotationMigConfig: doc}) },
			wantErr: "may change only nodes labelled migflex.io/planner=enabled, not disabled",
			node:    "disabled",
		},
		{
			name: "opting a node in",
			do: func() error {
				_, err := plannerClient.CoreV1().Nodes().Patch(ctx, "opted-out", types.MergePatchType, []byte(`{"metadata":{"labels":{"migflex.io/planner":"enabled"}}}`), metav1.PatchOptions{})
				return err
			},
			wantErr: "may change only nodes labelled migflex.io/planner=enabled, not opted-out",
			node:    "opted-out",
		},
		{
			name: "opting a node out",
			do: func() error {
				_, err := plannerClient.CoreV1().Nodes().Patch(ctx, "opted-in", types.MergePatchType, []byte(`{"metadata":{"labels":{"migflex.io/planner":null}}}`), metav1.PatchOptions{})
				return err
			},
			wantErr: "the migflex planner may not change a Node's labels",
			node:    "opted-in",
		},
		{
			name: "another annotation",
			do: func() error {
				return apply("opted-in", map[string]string{nodeinfo.AnnotationMigConfig: doc, nodeinfo.AnnotationLayout: "[]"})
			},
			wantErr: "may change only the annotations nvidia.com/mig.config, migflex.io/mig.config.proposed and migflex.io/reservation, not migflex.io/mig.layout",
			node:    "opted-in",
		},
		{
			name: "removing a user's annotation",
			do: func() error {
				_, err := plannerClient.CoreV1().Nodes().Patch(ctx, "opted-in", types.MergePatchType, []byte(`{"metadata":{"annotations":{"note":null}}}`), metav1.PatchOptions{})
				return err
			},
			wantErr: "not note",
			node:    "opted-in",
		},
		{
			name: "cordoning",
			do: func() error {
				_, err := plannerClient.CoreV1().Nodes().Patch(ctx, "opted-in", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
				return err
			},
			wantErr: "may change only annotations of a Node",
			node:    "opted-in",
		},
		{
			// RBAC refuses it before the policy would.
			name: "the status",
			do: func() error {
				_, err := plannerClient.CoreV1().Nodes().Patch(ctx, "opted-in", types.MergePatchType, []byte(`{"status":{"capacity":{"example.com/x":"1"}}}`), metav1.PatchOptions{}, "status")
				return err
			},
			wantErr: "forbidden",
			node:    "opted-in",
		},
		{
			name: "anyone else is not limited",
			do: func() error {
				_, err := admin.CoreV1().Nodes().Apply(ctx, corev1ac.Node("opted-out").WithAnnotations(map[string]string{nodeinfo.AnnotationMigConfig: doc}),
					metav1.ApplyOptions{FieldManager: "admin", Force: true})
				return err
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, admin) })
	}
	n := getNode(t, admin, "opted-in")
	if n.Annotations[nodeinfo.AnnotationMigConfig] != doc || n.Annotations["note"] != "by hand" || n.Labels["team"] != "ml" {
		t.Errorf("opted-in node after the allowed applies: labels %v annotations %v", n.Labels, n.Annotations)
	}
	if _, ok := n.Annotations[nodeinfo.AnnotationProposed]; ok {
		t.Error("the dropped proposal stayed")
	}
}

// The planner does its whole job with its ServiceAccount's token and the
// rendered RBAC and policy: its informers sync, it leads through its Lease,
// writes nvidia.com/mig.config on an opted-in node and records Events on
// the pod. RBAC denies it what it does not need.
func TestPlannerRunsWithItsPermissions(t *testing.T) {
	objs := helmTemplate(t, scenarioNamed(t, "planner"))
	cfg := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	c := newCluster(t, cfg)
	ctx := t.Context()
	mustCreate(t, admin.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	applyPlannerObjects(t, c, objs)

	user := "system:serviceaccount:" + namespace + ":" + plannerSA
	for _, ck := range []struct {
		verb, resource, sub, ns, name string
		allowed                       bool
	}{
		{verb: "list", resource: "nodes", allowed: true},
		{verb: "patch", resource: "nodes", allowed: true},
		{verb: "get", resource: "nodes", name: "gpu-1"},
		{verb: "update", resource: "nodes"},
		{verb: "patch", resource: "nodes", sub: "status"},
		{verb: "delete", resource: "nodes"},
		{verb: "watch", resource: "pods", ns: "team-a", allowed: true},
		{verb: "patch", resource: "pods", ns: "team-a"},
		{verb: "delete", resource: "pods", ns: "team-a"},
		{verb: "create", resource: "pods", sub: "eviction", ns: "team-a"},
		{verb: "create", resource: "events", ns: "team-a", allowed: true},
		{verb: "get", resource: "secrets", ns: namespace},
		{verb: "update", resource: "leases", ns: namespace, name: "migflex-planner", allowed: true},
		{verb: "update", resource: "leases", ns: namespace, name: "another"},
		{verb: "update", resource: "leases", ns: "kube-system", name: "migflex-planner"},
		{verb: "watch", resource: "resourceclaims", ns: "team-a", allowed: true},
		{verb: "list", resource: "resourceclaimtemplates", ns: "team-a", allowed: true},
		{verb: "watch", resource: "deviceclasses", allowed: true},
		{verb: "update", resource: "resourceclaims", sub: "status", ns: "team-a"},
		{verb: "create", resource: "resourceslices"},
		{verb: "watch", resource: "resourceslices", allowed: true},
	} {
		group := ""
		switch ck.resource {
		case "leases":
			group = "coordination.k8s.io"
		case "resourceclaims", "resourceclaimtemplates", "deviceclasses", "resourceslices":
			group = "resource.k8s.io"
		}
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: ck.verb, Group: group, Resource: ck.resource, Subresource: ck.sub, Namespace: ck.ns, Name: ck.name},
		}}
		got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != ck.allowed {
			t.Errorf("planner %s %s/%s %q in %q: allowed %v, want %v", ck.verb, ck.resource, ck.sub, ck.name, ck.ns, got.Status.Allowed, ck.allowed)
		}
	}

	// An opted-in node whose agent reports an all-1g GPU, and a pod the
	// scheduler found no 3g.40gb for.
	m, ok := simmodels.Get("H100-SXM5-80GB")
	if !ok {
		t.Fatal("no H100 model")
	}
	gpu := nodeinfo.GPU{Index: 0, UUID: "GPU-0", Model: m.Name, MigMode: nodeinfo.MigModeEnabled}
	for i := range 7 {
		gpu.Instances = append(gpu.Instances, nodeinfo.Instance{Profile: "1g.10gb", Placement: nodeinfo.Placement{Start: i, Size: 1}, UUID: "MIG-" + string(rune('a'+i)), Health: nodeinfo.HealthHealthy})
	}
	layout, _ := json.Marshal([]nodeinfo.GPU{gpu})
	profiles, _ := json.Marshal([]nodeinfo.Model{nodeinfo.NewModel(m.Name, m.Profiles)})
	node := mustCreate(t, admin.CoreV1().Nodes(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        "gpu-1",
		Labels:      map[string]string{nodeinfo.LabelPlanner: nodeinfo.PlannerEnabled, nodeinfo.LabelMigConfigState: nodeinfo.StateSuccess},
		Annotations: map[string]string{nodeinfo.AnnotationLayout: string(layout), nodeinfo.AnnotationProfiles: string(profiles)},
	}})
	node.Spec.Taints = nil // the API server's not-ready taint; no kubelet clears it here
	if _, err := admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse("1")
	pod := mustCreate(t, admin.CoreV1().Pods("default"), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/x:1", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/mig-3g.40gb": q}, Limits: corev1.ResourceList{"nvidia.com/mig-3g.40gb": q},
		}}}},
	})
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.Now()}}
	if _, err := admin.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	client := saTokenClient(t, cfg, admin, plannerSA, nil)
	ctl, err := planner.New(planner.Options{
		Client: client, Policy: solver.DefaultPolicy(), Cadence: solver.Cadence{Idle: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		LeaderElection: true, LeaseNamespace: namespace, Identity: "planner-0",
	})
	if err != nil {
		t.Fatal(err)
	}
	_, logCtx := ktesting.NewTestContext(t)
	runCtx, cancel := context.WithTimeout(logCtx, 2*time.Minute) // hang protection
	done := make(chan error, 1)
	go func() { done <- ctl.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("planner Run: %v", err)
		}
	}()
	err = wait.PollUntilContextCancel(runCtx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return strings.Contains(n.Annotations[nodeinfo.AnnotationMigConfig], "3g.40gb"), nil
	})
	if err != nil {
		t.Fatalf("the planner wrote no mig.config with 3g.40gb as its ServiceAccount: %v", err)
	}
	err = wait.PollUntilContextCancel(runCtx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		evs, err := admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=train,reason=" + planner.ReasonPlanned})
		return err == nil && len(evs.Items) > 0, err
	})
	if err != nil {
		t.Errorf("no %s Event on the pod: %v", planner.ReasonPlanned, err)
	}
	if _, err := admin.CoordinationV1().Leases(namespace).Get(ctx, "migflex-planner", metav1.GetOptions{}); err != nil {
		t.Errorf("the planner's Lease: %v", err)
	}
}

// saTokenClient returns a client authenticated as ServiceAccount sa with a
// token from the TokenRequest API, bound to ref when not nil.
func saTokenClient(t *testing.T, cfg *rest.Config, admin kubernetes.Interface, sa string, ref *authenticationv1.BoundObjectReference) kubernetes.Interface {
	t.Helper()
	tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: ref, ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	return kubernetes.NewForConfigOrDie(&rest.Config{
		Host:            cfg.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData, CAFile: cfg.CAFile},
		BearerToken:     tr.Status.Token,
	})
}
