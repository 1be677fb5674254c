package planner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

type env struct {
	t      *testing.T
	cfg    *rest.Config
	client kubernetes.Interface
}

func startEnv(t *testing.T) *env {
	cfg := testenv.Start(t)
	return &env{t: t, cfg: cfg, client: kubernetes.NewForConfigOrDie(cfg)}
}

// node creates an opted-in Node whose agent reports success with gpus,
// written as an administrator (not the planner).
func (e *env) node(name string, gpus ...nodeinfo.GPU) {
	e.t.Helper()
	c := newCluster(e.t)
	n := c.addNode(name, gpus...)
	n.UID, n.ResourceVersion = "", ""
	created, err := e.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{FieldManager: "admin"})
	if err != nil {
		e.t.Fatal(err)
	}
	// The API server taints a new Node not-ready; no kubelet will clear it.
	created.Spec.Taints = nil
	if _, err := e.client.CoreV1().Nodes().Update(context.Background(), created, metav1.UpdateOptions{FieldManager: "admin"}); err != nil {
		e.t.Fatal(err)
	}
}

// pendingPod creates a pod asking for res, pinned to node by a node
// selector, and marks it unschedulable, as the scheduler would.
func (e *env) pendingPod(name string, res corev1.ResourceName, node string) *corev1.Pod {
	e.t.Helper()
	return e.pendingPodOn(name, res, map[string]string{corev1.LabelHostname: node})
}

// pendingPodOn is pendingPod with a node selector of its own.
func (e *env) pendingPodOn(name string, res corev1.ResourceName, selector map[string]string) *corev1.Pod {
	e.t.Helper()
	ctx := context.Background()
	c := newCluster(e.t)
	p := c.pod(name, res, 1)
	p.UID, p.Namespace, p.CreationTimestamp = "", "default", metav1.Time{}
	p.Spec.Containers[0].Image = "example.com/x:1"
	p.Spec.NodeSelector = selector
	status := p.Status
	created, err := e.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	created.Status = status
	created.Status.Conditions[0].LastTransitionTime = metav1.Now()
	updated, err := e.client.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return updated
}

// poke changes a label of the pod, which starts a round.
func (e *env) poke(pod *corev1.Pod, i int) {
	e.t.Helper()
	p, err := e.client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	p.Labels = map[string]string{"poke": fmt.Sprint(i)}
	if _, err := e.client.CoreV1().Pods(pod.Namespace).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) getNode(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) waitNode(name, what string, cond func(*corev1.Node) bool) *corev1.Node {
	e.t.Helper()
	var n *corev1.Node
	defer func() {
		if e.t.Failed() && n != nil {
			e.t.Logf("node %s: annotations %v labels %v", name, n.Annotations, n.Labels)
		}
	}()
	testutil.Eventually(e.t, what+" on node "+name, func() bool {
		n = e.getNode(name)
		return cond(n)
	})
	return n
}

// waitEvent waits for an Event of reason about pod whose message contains
// every substring.
func (e *env) waitEvent(pod *corev1.Pod, reason string, contains ...string) corev1.Event {
	e.t.Helper()
	var seen []string
	var found corev1.Event
	defer func() {
		if e.t.Failed() {
			e.t.Logf("Events of %s seen:\n%s", pod.Name, strings.Join(seen, "\n"))
		}
	}()
	testutil.Eventually(e.t, fmt.Sprintf("a %s Event on %s containing %q", reason, pod.Name, contains), func() bool {
		list, err := e.client.CoreV1().Events(pod.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		seen = seen[:0]
		for _, ev := range list.Items {
			if ev.InvolvedObject.UID != pod.UID {
				continue
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
			if ev.Reason == reason && containsAll(ev.Message, contains...) {
				found = ev
				return true
			}
		}
		return false
	})
	return found
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

type run struct {
	c      *Controller
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (e *env) start(t *testing.T, mods ...func(*Options)) *run {
	t.Helper()
	reg := prometheus.NewRegistry()
	o := Options{
		Client: e.client, Policy: solver.DefaultPolicy(), Registry: reg,
		Cadence: solver.Cadence{Idle: 10 * time.Millisecond, Max: 100 * time.Millisecond, Resync: 200 * time.Millisecond},
	}
	for _, m := range mods {
		m(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{c: c, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *run) stop() {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				panic(fmt.Sprintf("planner Run: %v", err))
			}
		case <-time.After(testutil.HangTimeout):
			panic("planner did not stop")
		}
	})
}

// value reads a metric of the registry: the sum over the series whose
// label has the value (any series when label is empty).
func (r *run) value(name, label, value string) float64 {
	v, err := testutil.MetricSum(r.reg, name, label, value)
	if err != nil {
		panic(err)
	}
	return v
}

func (r *run) waitValue(t *testing.T, name, label, value string, want float64) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%s{%s=%q} at least %v", name, label, value, want), func() bool {
		return r.value(name, label, value) >= want
	})
}

// agentApplies stands in for the node's agent: it reports the layout the
// node's mig.config asks for, as another field manager.
func (e *env) agentApplies(name string) {
	e.t.Helper()
	n := e.getNode(name)
	rv := n.ResourceVersion
	c := newCluster(e.t)
	c.nodes[name] = n
	c.agent()
	n.ResourceVersion = rv
	if _, err := e.client.CoreV1().Nodes().Update(context.Background(), c.nodes[name], metav1.UpdateOptions{FieldManager: "migflex-agent"}); err != nil {
		e.t.Fatal(err)
	}
}

func TestController(t *testing.T) {
	e := startEnv(t)

	t.Run("reshapes for a pending pod, once", func(t *testing.T) {
		e.node("ctl-a", simGPU(0, all1g...))
		r := e.start(t)
		pod := e.pendingPod("ctl-a-3g", mig3g, "ctl-a")
		n := e.waitNode("ctl-a", "the planner's mig.config", func(n *corev1.Node) bool { return n.Annotations[nodeinfo.AnnotationMigConfig] != "" })
		if !strings.Contains(n.Annotations[nodeinfo.AnnotationMigConfig], `"3g.40gb": 1`) {
			t.Errorf("mig.config %q, want a 3g.40gb", n.Annotations[nodeinfo.AnnotationMigConfig])
		}
		// Server-side apply under its own field manager, which owns the
		// annotation and nothing else.
		owner, _ := plansnap.AnnotationOwner(n, nodeinfo.AnnotationMigConfig)
		if owner != DefaultFieldManager {
			t.Errorf("mig.config owned by %q", owner)
		}
		for _, mf := range n.ManagedFields {
			if mf.Manager == DefaultFieldManager && (mf.Operation != metav1.ManagedFieldsOperationApply || strings.Contains(mf.FieldsV1.GetRawString(), "f:labels")) {
				t.Errorf("the planner's managed fields: %s %s", mf.Operation, mf.FieldsV1.GetRawString())
			}
		}
		e.waitEvent(pod, ReasonPlanned, "will run on node ctl-a: GPU 0 repartitioned 7x1g.10gb ->")
		r.waitValue(t, "migflex_planner_reshapes_total", "mode", modeApplied, 1)
		r.waitValue(t, "migflex_planner_pods_served_total", "mode", modeApplied, 1)

		// The agent applies it; more rounds (each pod change starts one)
		// find nothing to do and write nothing.
		e.agentApplies("ctl-a")
		rounds := r.value("migflex_planner_rounds_total", "result", resultUnchanged)
		for i := range 3 {
			e.poke(pod, i)
			r.waitValue(t, "migflex_planner_rounds_total", "result", resultUnchanged, rounds+float64(i)+1)
		}
		if got := r.value("migflex_planner_node_writes_total", "", ""); got != 1 {
			t.Errorf("%v writes to Nodes, want 1", got)
		}
		if err := e.client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a refused write is not sent again at every round", func(t *testing.T) {
		e.node("ctl-r", simGPU(0, all1g...))
		// A policy refuses the planner's writes to the node, until it
		// does not.
		var refuse atomic.Bool
		var sent atomic.Int32
		refuse.Store(true)
		cfg := rest.CopyConfig(e.cfg)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPatch && r.URL.Path == "/api/v1/nodes/ctl-r" {
					sent.Add(1)
					if refuse.Load() {
						body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"refused by policy","reason":"Forbidden","code":403}`
						return &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Content-Type": []string{"application/json"}},
							Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
					}
				}
				return rt.RoundTrip(r)
			})
		}
		// The planner's clock stands still until the test moves it, so
		// the backoff is counted in rounds, not seconds.
		var clock atomic.Int64
		clock.Store(time.Now().Add(time.Minute).UnixNano())
		r := e.start(t, func(o *Options) {
			o.Client = kubernetes.NewForConfigOrDie(cfg)
			o.Now = func() time.Time { return time.Unix(0, clock.Load()) }
		})
		pod := e.pendingPod("ctl-r-3g", mig3g, "ctl-r")
		r.waitValue(t, "migflex_planner_node_writes_total", "result", writeError, 1)
		// Rounds go on while the pod waits (the resync, every 200 ms
		// here); the refused write is not sent again before its backoff
		// ends, which on this clock it does not.
		rounds := r.value("migflex_planner_rounds_total", "", "")
		const period = 10
		r.waitValue(t, "migflex_planner_rounds_total", "", "", rounds+period)
		if got := sent.Load(); got != 1 {
			t.Errorf("%d writes of a refused layout during %d rounds, want 1", got, period)
		}
		// The policy goes and the backoff ends: the write is sent.
		refuse.Store(false)
		clock.Add(int64(time.Second))
		e.poke(pod, period)
		e.waitNode("ctl-r", "the planner's mig.config", func(n *corev1.Node) bool { return n.Annotations[nodeinfo.AnnotationMigConfig] != "" })
		e.waitEvent(pod, ReasonPlanned, "will run on node ctl-r")
		if err := e.client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		r.stop()
	})

	t.Run("a human edit holds the node", func(t *testing.T) {
		e.node("ctl-b", simGPU(0, all1g...))
		n := e.getNode("ctl-b")
		n.Annotations[nodeinfo.AnnotationMigConfig] = "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n"
		if _, err := e.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{FieldManager: "kubectl-annotate"}); err != nil {
			t.Fatal(err)
		}
		e.start(t)
		pod := e.pendingPod("ctl-b-3g", mig3g, "ctl-b")
		e.waitEvent(pod, ReasonImpossible, "ctl-b: nvidia.com/mig.config was changed by kubectl-annotate")
		if got := e.getNode("ctl-b").Annotations[nodeinfo.AnnotationMigConfig]; !strings.Contains(got, `"1g.10gb": 7`) {
			t.Errorf("the human's mig.config was replaced: %q", got)
		}
		if err := e.client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("dry run writes no mig.config", func(t *testing.T) {
		e.node("ctl-c", simGPU(0, all1g...))
		r := e.start(t, func(o *Options) { o.DryRun = true; o.FieldManager = "planner-dry" })
		pod := e.pendingPod("ctl-c-7g", mig7g, "ctl-c")
		n := e.waitNode("ctl-c", "a proposal", func(n *corev1.Node) bool { return n.Annotations[nodeinfo.AnnotationProposed] != "" })
		if _, ok := n.Annotations[nodeinfo.AnnotationMigConfig]; ok {
			t.Errorf("dry run wrote mig.config: %q", n.Annotations[nodeinfo.AnnotationMigConfig])
		}
		e.waitEvent(pod, ReasonPlanned, "would run on node ctl-c", "dry run")
		r.waitValue(t, "migflex_planner_reshapes_total", "mode", modeDryRun, 1)
		// The proposal stands while the pod waits: a dry run changes no
		// GPU, so none cools down and the plan stays the same.
		for i := range 3 {
			rounds := r.value("migflex_planner_rounds_total", "", "")
			e.poke(pod, i)
			r.waitValue(t, "migflex_planner_rounds_total", "", "", rounds+1)
		}
		if got := e.getNode("ctl-c").Annotations[nodeinfo.AnnotationProposed]; got != n.Annotations[nodeinfo.AnnotationProposed] {
			t.Errorf("the proposal changed while the pod waited: %q, was %q", got, n.Annotations[nodeinfo.AnnotationProposed])
		}
		if err := e.client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitNode("ctl-c", "the proposal removed", func(n *corev1.Node) bool {
			_, ok := n.Annotations[nodeinfo.AnnotationProposed]
			return !ok
		})
		if _, ok := e.getNode("ctl-c").Annotations[nodeinfo.AnnotationMigConfig]; ok {
			t.Error("dry run wrote mig.config")
		}
		r.stop()
	})

	// A node the planner changed before it was put in dry run (or a
	// dry-run planner beside an applying one under the same name): the
	// proposal must not date a new change of its mig.config, which a round
	// reads as a cooldown; the proposal used to be removed a round later,
	// with a MigReshapeImpossible "cooling down" Event contradicting the
	// MigReshapePlanned one.
	t.Run("dry run keeps its proposal on a node the planner changed", func(t *testing.T) {
		const cooldown = 2 * time.Second
		e.node("ctl-f", simGPU(0, all1g...))
		seven1g := "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n"
		ac := corev1ac.Node("ctl-f").WithAnnotations(map[string]string{nodeinfo.AnnotationMigConfig: seven1g})
		if _, err := e.client.CoreV1().Nodes().Apply(context.Background(), ac, metav1.ApplyOptions{FieldManager: DefaultFieldManager, Force: true}); err != nil {
			t.Fatal(err)
		}
		_, wrote := plansnap.AnnotationOwner(e.getNode("ctl-f"), nodeinfo.AnnotationMigConfig)
		// Past the cooldown, and a second later than the write as
		// managedFields tells time.
		time.Sleep(cooldown + time.Second)
		r := e.start(t, func(o *Options) { o.DryRun = true; o.Policy.Cooldown = cooldown })
		pod := e.pendingPod("ctl-f-3g", mig3g, "ctl-f")
		n := e.waitNode("ctl-f", "a proposal", func(n *corev1.Node) bool { return n.Annotations[nodeinfo.AnnotationProposed] != "" })
		if owner, at := plansnap.AnnotationOwner(n, nodeinfo.AnnotationMigConfig); owner != DefaultFieldManager || !at.Equal(wrote) {
			t.Errorf("mig.config owned by %q since %s after the proposal, want %q since %s (a proposal is no change)", owner, at, DefaultFieldManager, wrote)
		}
		e.waitEvent(pod, ReasonPlanned, "would run on node ctl-f", "dry run")
		for i := range 3 {
			rounds := r.value("migflex_planner_rounds_total", "", "")
			e.poke(pod, i)
			r.waitValue(t, "migflex_planner_rounds_total", "", "", rounds+1)
		}
		if got := e.getNode("ctl-f").Annotations[nodeinfo.AnnotationProposed]; got != n.Annotations[nodeinfo.AnnotationProposed] {
			t.Errorf("the proposal did not stand while the pod waited: %q, was %q", got, n.Annotations[nodeinfo.AnnotationProposed])
		}
		list, err := e.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.UID == pod.UID && ev.Reason != ReasonPlanned {
				t.Errorf("Event contradicting the proposal: %s: %s", ev.Reason, ev.Message)
			}
		}
		if err := e.client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitNode("ctl-f", "the proposal removed", func(n *corev1.Node) bool {
			_, ok := n.Annotations[nodeinfo.AnnotationProposed]
			return !ok
		})
		if owner, at := plansnap.AnnotationOwner(e.getNode("ctl-f"), nodeinfo.AnnotationMigConfig); owner != DefaultFieldManager || !at.Equal(wrote) {
			t.Errorf("mig.config owned by %q since %s after the proposal went, want %q since %s", owner, at, DefaultFieldManager, wrote)
		}
		r.stop()
	})

	// Two replicas: only the leader writes; when it goes, the other takes
	// over and the pending pod is served once.
	t.Run("leader election", func(t *testing.T) {
		if _, err := e.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "planner"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		le := func(id string) func(*Options) {
			return func(o *Options) {
				o.LeaderElection, o.LeaseNamespace, o.Identity = true, "planner", id
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 100*time.Millisecond
			}
		}
		a := e.start(t, le("a"))
		a.waitValue(t, "migflex_planner_leader", "", "", 1)
		b := e.start(t, le("b"))
		e.node("ctl-d", simGPU(0, all1g...), simGPU(1, all1g...))
		e.pendingPod("ctl-d-3g", mig3g, "ctl-d")
		e.waitNode("ctl-d", "the leader's mig.config", func(n *corev1.Node) bool { return n.Annotations[nodeinfo.AnnotationMigConfig] != "" })
		if got := b.value("migflex_planner_node_writes_total", "", ""); got != 0 || b.value("migflex_planner_leader", "", "") != 0 {
			t.Errorf("the follower wrote %v times (leader gauge %v)", got, b.value("migflex_planner_leader", "", ""))
		}
		// The leader goes (releasing the Lease); the follower takes over
		// and finds the change in flight: nothing more to write.
		a.stop()
		b.waitValue(t, "migflex_planner_leader", "", "", 1)
		b.waitValue(t, "migflex_planner_rounds_total", "result", resultUnchanged, 1)
		if got := b.value("migflex_planner_node_writes_total", "", ""); got != 0 {
			t.Errorf("the new leader wrote %v times for a change in flight", got)
		}
		// And it serves what comes next: on another node, as a new leader
		// holds every GPU of a node the planner just changed for the
		// cooldown (it cannot know which GPUs the change was for).
		e.agentApplies("ctl-d")
		e.node("ctl-e", simGPU(0, all1g...))
		e.pendingPod("ctl-e-7g", mig7g, "ctl-e")
		b.waitValue(t, "migflex_planner_node_writes_total", "result", writeSuccess, 1)
		b.stop()
	})

	// A leader that finds its Lease taken (it was paused past it, or cut
	// off) steps down: Run returns ErrLostLease, so that the process exits
	// and starts again as a follower, rather than hanging on, leading
	// nothing and contending for nothing.
	t.Run("lost lease", func(t *testing.T) {
		_, err := e.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "planner"}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		a := e.start(t, func(o *Options) {
			o.LeaderElection, o.LeaseNamespace, o.Identity = true, "planner", "lost"
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 100*time.Millisecond
		})
		a.waitValue(t, "migflex_planner_leader", "", "", 1)
		leases := e.client.CoordinationV1().Leases("planner")
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := leases.Get(context.Background(), a.c.opts.LeaseName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.NewMicroTime(time.Now())
			l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = ptr.To("usurper"), &now, &now
			l.Spec.LeaseDurationSeconds = ptr.To[int32](60)
			_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-a.done:
			if !errors.Is(err, ErrLostLease) {
				t.Errorf("Run after the Lease was taken: %v, want ErrLostLease", err)
			}
		case <-time.After(testutil.HangTimeout):
			a.once.Do(a.cancel)
			t.Fatalf("Run did not return after another replica took the Lease, only once its context ended: %v", <-a.done)
		}
		a.once.Do(a.cancel) // Run returned: nothing left to stop
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
