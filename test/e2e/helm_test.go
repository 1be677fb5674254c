//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/migflex/migflex/test/e2e/framework"
)

// helmRelease is the release TestHelmChart installs.
const helmRelease = "migflex-e2e"

// helmValues installs the chart as a user of a cluster without GPUs would
// (backend simulated), with what this cluster needs: the imported image,
// never pulled; the API server at the host's bridge address, as no
// kube-proxy routes the kubernetes Service; and the simulated GPUs' state
// under /var/lib/kubelet, which hack/cluster/down.sh removes. Every pod
// stays on the pod network, so the webhook runs its two replicas side by
// side and rolls like it would in a real cluster. The GPUs are the local
// overlay's, node 1's (two H100-SXM5-80GB) for every node, which the layout
// helpers expect, and by simulator.nodes the others' (nodes_test.go); the
// nodes labelled migflex.io/serve=dra serve through DRA, from the
// DaemonSet agent.draNodeSelector gives them.
func helmValues(apiServerHost string, others []simNode) string {
	env := fmt.Sprintf(`[{name: KUBERNETES_SERVICE_HOST, value: %q}, {name: KUBERNETES_SERVICE_PORT, value: %q}]`, apiServerHost, framework.APIServerPort)
	nodes := "{}"
	if len(others) > 0 {
		var b strings.Builder
		for _, n := range others {
			fmt.Fprintf(&b, "\n    %s: {gpus: [{model: %s, count: %d}]}", n.NodeName, n.model, n.gpus)
		}
		nodes = b.String()
	}
	return fmt.Sprintf(`backend: simulated
image: {repository: lc.local/migflex, tag: e2e, pullPolicy: Never}
simulator:
  gpus: [{model: %s, count: %d}]
  nodes: %s
  stateDir: /var/lib/kubelet/migflex/helm-sim
agent:
  draNodeSelector: {%s: %s}
  extraEnv: %[6]s
webhook:
  extraEnv: %[6]s
certificates:
  certgen:
    extraEnv: %[6]s
`, simModel, simGPUs, nodes, framework.DRANodeLabel, framework.DRANodeLabelValue, env)
}

// helmPolicy is the upgrade's change: a FallbackPolicy that forbids
// smaller profiles, so a 2g.20gb request goes up to 3g.40gb where the
// built-in policy took it down to 1g.10gb.
const helmPolicy = `webhook:
  policy:
    apiVersion: migflex.io/v1alpha1
    kind: FallbackPolicy
    allowDown: false
`

// Keys the agent leaves on its Node when migflex is uninstalled: its
// report (state label, GPU feature discovery labels, layout and profiles
// annotations) and the user's own layout annotation. docs/INSTALL.md lists
// them.
var (
	agentLabelsLeft = []string{
		"migflex.io/serving", "nvidia.com/gpu.count", "nvidia.com/gpu.product", "nvidia.com/mig.capable", "nvidia.com/mig.config.state", "nvidia.com/mig.strategy",
	}
	agentAnnotationsLeft = []string{annotationLayout, "migflex.io/mig.profiles", annotationMigConfig}
)

// TestHelmChart installs migflex with its Helm chart (not the kustomize
// overlay the other migflex tests use), checks its agent.draNodeSelector
// pool split on the nodes (node 2 served through DRA by migflex-agent-dra,
// the others through the device plugin by migflex-agent) and
// simulator.nodes (each node's own GPUs), runs the basic flows through it,
// upgrades it with a new fallback policy while admissions keep coming, and
// uninstalls it, checking that every object the chart made is gone.
//
// The chart's object names are fixed (one migflex per cluster), so this
// test needs a cluster without migflex; it runs before the migflex_* tests
// (file order) and leaves the cluster and the Nodes as it found them.
func TestHelmChart(t *testing.T) {
	ctx := t.Context()
	if _, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, framework.WebhookConfig, metav1.GetOptions{}); err == nil {
		t.Fatalf("migflex is already installed (MutatingWebhookConfiguration %s exists): this test installs its own with Helm; run it on a cluster without migflex", framework.WebhookConfig)
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, framework.Chart)
	var others []simNode
	if len(cluster.Nodes) > 1 {
		others = append(others, draNode(t))
	}
	if len(cluster.Nodes) > 2 {
		others = append(others, b200Node(t))
	}
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	policy := filepath.Join(dir, "policy.yaml")
	for f, s := range map[string]string{values: helmValues(framework.PodAPIServerHost(), others), policy: helmPolicy} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range cluster.Nodes {
		restoreNode(t, n.Name)
	}
	ns := helmNamespace(t)

	uninstalled := false
	t.Cleanup(func() {
		if uninstalled {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		if out, err := cluster.Helm(ctx, "uninstall", helmRelease, "-n", ns, "--wait", "--timeout", "3m"); err != nil {
			t.Errorf("cleanup: %v\n%s", err, out)
		}
	})

	t.Log("helm install")
	if out, err := cluster.Helm(ctx, "install", helmRelease, chart, "-n", ns, "-f", values, "--wait", "--timeout", "5m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitForHelmRollout(t, ns)
	checkHelmPools(t, ns, others)

	// annotate -> success -> allocatable, through the chart's agent.
	_, layout := applyLayouts(t, gpuLayouts{0: {"1g.10gb", "1g.10gb"}, 1: {"3g.40gb"}})

	// A pod's fallback, through the chart's webhook: no node has 2g.20gb,
	// the built-in policy goes down to 1g.10gb, and the pod runs on it.
	podNS := cluster.Namespace(t)
	waitForFallback(t, podNS, "2g.20gb->1g.10gb")
	pod := gpuPod(podNS, "wants-2g", "nvidia.com/mig-2g.20gb", 1, "env")
	stored := cluster.CreatePod(t, pod)
	if got := stored.Annotations[annotationFallback]; got != "2g.20gb->1g.10gb" {
		t.Errorf("annotation %s=%q, want %q", annotationFallback, got, "2g.20gb->1g.10gb")
	}
	checkResources(t, stored, map[corev1.ResourceName]string{"nvidia.com/mig-1g.10gb": "1"})
	checkAllocateEnv(t, runEnvPodCreated(t, podNS, pod.Name), layout, "1g.10gb", 1)

	// helm upgrade with a new policy rolls the webhook (its pods'
	// checksum/policy annotation changes); admissions keep coming all the
	// while, and each one must be answered by a webhook, old or new.
	before := webhookPods(t, ns)
	t.Log("helm upgrade with a FallbackPolicy while admitting pods")
	admissions := probeAdmissions(t, podNS)
	if out, err := cluster.Helm(ctx, "upgrade", helmRelease, chart, "-n", ns, "-f", values, "-f", policy, "--wait", "--timeout", "5m"); err != nil {
		admissions.stop()
		t.Fatalf("%v\n%s", err, out)
	}
	waitForHelmRollout(t, ns)
	after := webhookPods(t, ns)
	if common := intersect(before, after); len(common) > 0 {
		t.Errorf("webhook pods %v survived the upgrade: the new policy did not roll the Deployment", common)
	}
	// Once the rollout is done only new webhooks answer: the next answers
	// all follow the new policy.
	admissions.untilStreak("2g.20gb->3g.40gb", 10)
	res := admissions.stop()
	t.Logf("admissions during the upgrade: %v", res.answers)
	if res.missed > 0 || len(res.errs) > 0 {
		t.Errorf("%d of %d admissions during the upgrade got no webhook answer (admitted unchanged), errors %v", res.missed, res.total, res.errs)
	}
	if res.answers["2g.20gb->1g.10gb"] == 0 || res.answers["2g.20gb->3g.40gb"] == 0 {
		t.Errorf("admissions during the upgrade: %v; want answers from the old webhooks (->1g.10gb) and the new (->3g.40gb)", res.answers)
	}

	// Whole GPUs again, as a fresh agent finds them, before the agent goes:
	// the kubelet keeps an unregistered plugin's resources in the Node's
	// capacity for a grace period, and the migflex tests after this one
	// expect the capacity of a fresh node once their agent registers.
	dpNode().wholeGPUs(t)

	// helm uninstall removes every object of the release, hooks included,
	// and what its Jobs made (the certificate Secret).
	manifest, err := cluster.Helm(ctx, "get", "manifest", helmRelease, "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := cluster.Helm(ctx, "get", "hooks", helmRelease, "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("helm uninstall")
	if out, err := cluster.Helm(ctx, "uninstall", helmRelease, "-n", ns, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	uninstalled = true
	checkUninstalled(t, ns, map[string]string{"manifest": manifest, "hooks": hooks})

	// What stays on each Node, deliberately: the agent's last report and
	// the user's layout annotation (docs/INSTALL.md; the test set one on
	// node 1 only). The kubelet stops offering the devices once their
	// plugin is gone. (The DRA node's label for its pool is the user's,
	// not migflex's.)
	for _, n := range cluster.Nodes {
		node, err := cluster.OnNode(n.Name).WaitForNode(ctx, "the kubelet of "+n.Name+" to offer no GPU devices", timeout, func(n *corev1.Node) error {
			for r, v := range gpuResources(n.Status.Allocatable) {
				if v != 0 {
					return fmt.Errorf("allocatable %s=%d", r, v)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		labels := slices.DeleteFunc(migflexKeys(node.Labels), func(k string) bool { return k == framework.DRANodeLabel })
		wantLabels := agentLabelsLeft
		if n.Number > 1 {
			// Nodes 2 and 3 never had a mig.config source: no state.
			wantLabels = slices.DeleteFunc(slices.Clone(wantLabels), func(k string) bool { return k == labelState })
		}
		if node.Labels[framework.DRANodeLabel] == framework.DRANodeLabelValue {
			// The DRA driver's report also says which mode it served.
			wantLabels = slices.Sorted(slices.Values(append(slices.Clone(wantLabels), "migflex.io/dra-mode")))
		}
		if diff := cmp.Diff(wantLabels, labels); diff != "" {
			t.Errorf("migflex labels left on node %s (-documented +got):\n%s", n.Name, diff)
		}
		annotations := agentAnnotationsLeft
		if n.Number > 1 {
			annotations = slices.DeleteFunc(slices.Clone(annotations), func(k string) bool { return k == annotationMigConfig })
		}
		if diff := cmp.Diff(annotations, migflexKeys(node.Annotations)); diff != "" {
			t.Errorf("migflex annotations left on node %s (-documented +got):\n%s", n.Name, diff)
		}
	}
}

// checkHelmPools checks the chart's agent.draNodeSelector on the nodes:
// node 1 and the B200 node serve through the device plugin, from
// migflex-agent, with their GPUs (MIG off: whole GPUs) in their
// allocatable and no slice; the DRA node through DRA, from
// migflex-agent-dra, with its GPUs in its ResourceSlice and none in its
// allocatable. Each node's agent reports the GPUs simulator.nodes gives it.
// The release is in ns, not where the framework's AgentPod looks.
func checkHelmPools(t *testing.T, ns string, others []simNode) {
	t.Helper()
	ctx := t.Context()
	for _, n := range append([]simNode{dpNode()}, others...) {
		serving, ds := "device-plugin", framework.AgentDaemonSet
		if n.dra {
			serving, ds = "dra", framework.AgentDRADaemonSet
		}
		node := n.waitServing(t, serving)
		// The chart's only DaemonSets are the agent's pools.
		pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + n.NodeName + ",status.phase=Running",
		})
		if err != nil {
			t.Fatal(err)
		}
		var owners []string
		for _, p := range pods.Items {
			if owner := metav1.GetControllerOf(&p); owner != nil && owner.Kind == "DaemonSet" {
				owners = append(owners, owner.Name)
			}
		}
		if len(owners) != 1 || owners[0] != ds {
			t.Errorf("node %s: agent pods of the DaemonSets %v, want one of %s", n.NodeName, owners, ds)
		}
		l, err := framework.NodeLayout(node)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range l {
			if g.Model != n.model {
				t.Errorf("node %s GPU %d: a %s, want the %s of simulator.nodes", n.NodeName, g.Index, g.Model, n.model)
			}
		}
		if len(l) != n.gpus {
			t.Errorf("node %s: %d GPUs, want %d", n.NodeName, len(l), n.gpus)
		}
		wholes := gpuLayouts{}
		for i := range n.gpus {
			wholes[i] = nil
		}
		// A fresh agent finds its GPUs with MIG off and serves them as they
		// are: whole GPUs, in the node's allocatable or its slice. The node
		// never had a mig.config source (this test runs first, and puts
		// the nodes back), so it shows no state (internal/nodeagent/agent,
		// "A Node that never had a source gets no state at all"): what
		// says the pool serves is the allocatable or the slice.
		n.waitForLayoutsIn(t, wholes, stateNone)
		devs, err := n.draSlices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		node, err = n.Node(ctx)
		if err != nil {
			t.Fatal(err)
		}
		alloc := nonZero(gpuResources(node.Status.Allocatable))
		if n.dra && (len(devs) != n.gpus || len(alloc) != 0) {
			t.Errorf("DRA node %s: slice devices %v, GPU allocatable %v; want its %d GPUs in the slice only", n.NodeName, devs, alloc, n.gpus)
		}
		if !n.dra && (len(devs) != 0 || alloc[resourceGPU] != int64(n.gpus)) {
			t.Errorf("device-plugin node %s: slice devices %v, GPU allocatable %v; want %s=%d and no slice", n.NodeName, devs, alloc, resourceGPU, n.gpus)
		}
	}
}

// helmNamespace creates the release's namespace, labelled to admit the
// agent's host paths under Pod Security (as docs/INSTALL.md tells Helm
// users to do), and deletes it when t ends.
func helmNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   "migflex-helm-" + rand.String(5),
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged", "e2e.migflex.io/test": "true"},
	}}
	if _, err := cluster.Client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cluster.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// restoreNode puts back, when t ends, the labels and annotations of the
// node name as they are now: what the agent and the test added goes, so
// the tests after this one start from the Node they would have found.
func restoreNode(t *testing.T, name string) {
	t.Helper()
	node, err := cluster.OnNode(name).Node(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	labels, annotations := maps.Clone(node.Labels), maps.Clone(node.Annotations)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		now, err := cluster.OnNode(name).Node(ctx)
		if err != nil {
			t.Errorf("restoring the node: %v", err)
			return
		}
		patch := map[string]map[string]any{"labels": {}, "annotations": {}}
		for k := range now.Labels {
			if _, ok := labels[k]; !ok {
				patch["labels"][k] = nil
			}
		}
		for k := range now.Annotations {
			if _, ok := annotations[k]; !ok {
				patch["annotations"][k] = nil
			}
		}
		b, err := json.Marshal(map[string]any{"metadata": patch})
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := cluster.Client.CoreV1().Nodes().Patch(ctx, now.Name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Errorf("restoring the node: %v", err)
		}
	})
}

// waitForHelmRollout waits until the chart's workloads run their current
// templates and the API server gets answers from the webhook.
func waitForHelmRollout(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	if err := cluster.WaitForAgentRollouts(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitForDeploymentRollout(ctx, ns, framework.WebhookName); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitForWebhookAnswers(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitForFallback waits until a dry run of a 2g.20gb pod in ns gets the
// fallback annotation want: the webhook decides from its informer's copy
// of the Node, which follows the API server closely but not instantly.
func waitForFallback(t *testing.T, ns, want string) {
	t.Helper()
	probe := gpuPod(ns, "probe", "nvidia.com/mig-2g.20gb", 1, "env")
	var last string
	err := framework.WaitFor(t.Context(), "the webhook to answer "+want, timeout, func(ctx context.Context) (bool, error) {
		p, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		last = p.Annotations[annotationFallback]
		return last == want, nil
	})
	if err != nil {
		t.Fatalf("%v; last answer %q", err, last)
	}
}

// runEnvPodCreated waits for the created testbox env pod to succeed and
// returns its environment.
func runEnvPodCreated(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	if _, err := cluster.WaitForPodSucceeded(t.Context(), ns, name); err != nil {
		t.Fatal(err)
	}
	logs, err := cluster.PodLogs(t.Context(), ns, name, "")
	if err != nil {
		t.Fatal(err)
	}
	return envOf(logs)
}

// webhookPods is the names of the webhook's pods that are not terminating.
func webhookPods(t *testing.T, ns string) []string {
	t.Helper()
	pods, err := cluster.Client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + framework.WebhookName})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		// A terminating pod has not survived: the webhook's pods serve for
		// a few seconds after they are deleted (preStop), while the API
		// server stops sending to them.
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return names
}

func intersect(a, b []string) []string {
	var out []string
	for _, s := range a {
		if slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// admissionProbe creates dry-run 2g.20gb pods one after another until
// stopped, recording each webhook answer (the fallback annotation). With
// the chart's failurePolicy Ignore, a webhook the API server cannot reach
// admits the pod unchanged: that is a missed admission.
type admissionProbe struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	res    admissionResults
	streak struct {
		answer string
		n      int
	}
}

type admissionResults struct {
	total, missed int
	answers       map[string]int
	errs          []string
}

func probeAdmissions(t *testing.T, ns string) *admissionProbe {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	p := &admissionProbe{cancel: cancel, done: make(chan struct{}), res: admissionResults{answers: map[string]int{}}}
	pod := gpuPod(ns, "upgrade-probe", "nvidia.com/mig-2g.20gb", 1, "env")
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			got, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if ctx.Err() != nil {
				return
			}
			p.record(got, err)
			// Keep the API server and the webhooks busy, not saturated:
			// the machine runs the whole cluster on two cores.
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return p
}

func (p *admissionProbe) record(pod *corev1.Pod, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.res.total++
	var answer string
	switch {
	case err != nil:
		p.res.errs = append(p.res.errs, err.Error())
	case pod.Annotations[annotationFallback] == "":
		p.res.missed++
	default:
		answer = pod.Annotations[annotationFallback]
		p.res.answers[answer]++
	}
	if answer != "" && answer == p.streak.answer {
		p.streak.n++
	} else {
		p.streak.answer, p.streak.n = answer, 1
	}
}

// untilStreak waits until n answers in a row were want.
func (p *admissionProbe) untilStreak(want string, n int) {
	_ = framework.WaitFor(context.Background(), fmt.Sprintf("%d answers %s in a row", n, want), timeout, func(context.Context) (bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.streak.answer == want && p.streak.n >= n, nil
	})
}

func (p *admissionProbe) stop() admissionResults {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}

// checkUninstalled checks that no object of the release's manifest and
// hooks exists any more, that nothing labelled with the release is left in
// any namespace or cluster-wide, and that the release's namespace holds
// nothing but what Kubernetes puts in every namespace.
func checkUninstalled(t *testing.T, ns string, manifests map[string]string) {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	for name, m := range manifests {
		if strings.TrimSpace(m) == "" {
			continue
		}
		f := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(f, []byte(m), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := cluster.Kubectl(ctx, "get", "-f", f, "--ignore-not-found", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != "" {
			t.Errorf("objects of the release's %s left after helm uninstall:\n%s", name, out)
		}
	}

	// Events about the release's objects age out on their own. Kinds
	// the API server calls deprecated are not listed: listing them draws
	// its warning, which fails the suite (TestMain). v1 Endpoints
	// (deprecated in 1.33) show up as endpointslices.discovery.k8s.io all
	// the same; v1 ComponentStatus (deprecated in 1.19, still listed by
	// 1.35 and 1.36) is the control plane's health, nothing a release makes.
	listable := func(namespaced bool) string {
		out, err := cluster.Kubectl(ctx, "api-resources", "--verbs=list", fmt.Sprintf("--namespaced=%t", namespaced), "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, k := range strings.Fields(out) {
			if !slices.Contains([]string{"events", "events.events.k8s.io", "endpoints", "componentstatuses"}, k) {
				kinds = append(kinds, k)
			}
		}
		return strings.Join(kinds, ",")
	}
	namespaced, clusterScoped := listable(true), listable(false)
	// Pods and the like go after their owners, by garbage collection.
	var left string
	err := framework.WaitFor(ctx, "nothing of the release left", timeout, func(ctx context.Context) (bool, error) {
		labelled, err := cluster.Kubectl(ctx, "get", namespaced+","+clusterScoped, "-A", "-l", "app.kubernetes.io/instance="+helmRelease, "-o", "name")
		if err != nil {
			return false, err
		}
		inNS, err := cluster.Kubectl(ctx, "get", namespaced, "-n", ns, "-o", "name")
		if err != nil {
			return false, err
		}
		var objs []string
		for _, o := range strings.Fields(labelled + "\n" + inNS) {
			// Every namespace has these.
			if o != "serviceaccount/default" && o != "configmap/kube-root-ca.crt" && !slices.Contains(objs, o) {
				objs = append(objs, o)
			}
		}
		left = strings.Join(objs, "\n")
		return len(objs) == 0, nil
	})
	if err != nil {
		t.Errorf("%v; left:\n%s", err, left)
	}
}

// migflexKeys is the sorted keys of m that migflex or its users set on a
// Node.
func migflexKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		if strings.HasPrefix(k, "nvidia.com/") || strings.HasPrefix(k, "migflex.io/") || strings.HasPrefix(k, "run.ai/") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
