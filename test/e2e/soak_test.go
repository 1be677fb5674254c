//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/test/e2e/framework"
)

// The soak (make soak DURATION=30m, docs/RELIABILITY.md "Soak"): random
// churn on the three nodes for a while, one operation at a time, each
// followed by a wait until every node has converged, with the invariant
// checker's safety half (framework.Invariants.Safety: no pod that held a
// MIG device lost it or saw it changed) running every second throughout,
// and a report of what it did, how long the nodes took to converge, what
// broke, and the components' memory. It is no CI test: it runs only with
// MIGFLEX_SOAK_DURATION set.
const (
	envSoakDuration = "MIGFLEX_SOAK_DURATION"
	// envSoakSeed repeats a soak's random choices (the report prints the
	// seed); unset, the seed is the clock's.
	envSoakSeed = "MIGFLEX_SOAK_SEED"
	// envSoakOut is the directory the report goes to (default
	// _output/soak under the repository root).
	envSoakOut = "MIGFLEX_SOAK_OUT"

	// soakMaxPods bounds the pods the soak keeps: past it deletions take
	// over, so that the GPUs do not stay full and the layouts keep moving.
	soakMaxPods = 10
	// memoryEvery is how often the components' memory is sampled.
	memoryEvery = 10 * time.Second
)

// The operations, by the name the report counts them under.
const (
	opAnnotate       = "annotate"
	opPod            = "pod"
	opPlannerPod     = "planner-pod"
	opDelete         = "delete-pod"
	opAgentRestart   = "agent-restart"
	opKubeletRestart = "kubelet-restart"
	opNVMLError      = "nvml-create-error"
)

var soakOps = []string{opAnnotate, opPod, opPlannerPod, opDelete, opAgentRestart, opKubeletRestart, opNVMLError}

// TestSoak is the soak. Its pods and the planner's opt-in are removed when
// it ends; the nodes keep the last layout.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(envSoakDuration))
	if err != nil || d <= 0 {
		t.Skipf("the soak runs only with %s set (make soak DURATION=30m)", envSoakDuration)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSoakSeed); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envSoakSeed, s, err)
		}
	}
	fmt.Printf("soak: seed %d (%s=%d repeats its choices), duration %s\n", seed, envSoakSeed, seed, d)
	nodes := []simNode{dpNode(), draNode(t), b200Node(t)}
	ns := planner(t, nodes...)
	s := newSoak(t, seed, ns, nodes)
	s.run(d)
}

// soak is one run's state. mu guards what the checker and the memory
// sampler share with the operations: the snapshots, the operation under
// way and the findings.
type soak struct {
	t     *testing.T
	rng   *rand.Rand
	seed  uint64
	ns    string
	nodes []soakNode
	// pods are the soak's pods that run, by name.
	pods map[string]soakPod
	seq  int

	mu sync.Mutex
	// inv is each node's snapshot (framework.Invariants), by node name,
	// taken when the node last converged.
	inv        map[string]*framework.Invariants
	op         string
	counts     map[string]int
	faults     map[string]int
	converge   map[string][]time.Duration
	violations []soakViolation
	checks     int
	readErrors int
	memory     map[string]*memSeries
	memErrors  int
	samples    []string
}

type soakNode struct {
	simNode
	model gpumodel.Model
}

type soakPod struct {
	node, profile string
}

type soakViolation struct {
	at    time.Time
	op    string
	node  string
	what  string
	times int
}

type memSeries struct {
	min, max, last int64
	n              int
}

func newSoak(t *testing.T, seed uint64, ns string, nodes []simNode) *soak {
	s := &soak{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seed: seed, ns: ns,
		pods: map[string]soakPod{}, inv: map[string]*framework.Invariants{},
		counts: map[string]int{}, faults: map[string]int{}, converge: map[string][]time.Duration{},
		memory: map[string]*memSeries{}}
	for _, n := range nodes {
		m, ok := gpumodel.Lookup(n.model)
		if !ok {
			t.Fatalf("no built-in model %s", n.model)
		}
		s.nodes = append(s.nodes, soakNode{simNode: n, model: m})
	}
	return s
}

func (s *soak) run(d time.Duration) {
	t := s.t
	ctx := t.Context()
	start := time.Now()
	// A first layout of the soak's own on each node, then the snapshots
	// every check compares with.
	s.setOp("#0 start")
	for _, n := range s.nodes {
		l := s.randomLayouts(n, nil)
		n.setMigConfig(t, annotationMigConfig, migConfigPerGPU(l))
		t.Logf("%s: node %s: mig.config %v", s.currentOp(), n.NodeName, l.sorted())
	}
	s.settle(ctx, "start", start)

	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.checkEverySecond(bg) }()
	go func() { defer wg.Done(); s.sampleMemory(bg) }()

	for time.Since(start) < d && ctx.Err() == nil {
		s.step(ctx)
	}
	stop()
	wg.Wait()
	report := s.report(time.Since(start), d)
	fmt.Print(report)
	if err := s.writeReport(report); err != nil {
		t.Error(err)
	}
	if len(s.violations) > 0 {
		t.Errorf("%d violations (the report above lists them)", len(s.violations))
	}
}

// step runs one operation, chosen at random among those the cluster's
// state allows, and waits until every node has converged.
func (s *soak) step(ctx context.Context) {
	s.seq++
	kind := s.pick()
	n := s.nodes[s.rng.IntN(len(s.nodes))]
	if kind == opDelete {
		s.setOp(fmt.Sprintf("#%d %s", s.seq, kind))
	} else {
		s.setOp(fmt.Sprintf("#%d %s on %s", s.seq, kind, n.NodeName))
	}
	var err error
	var done time.Time
	var after func(context.Context) error
	switch kind {
	case opAnnotate:
		done, err = s.annotate(ctx, n, -1)
	case opPod:
		done, after, err = s.createPod(ctx, n, false)
	case opPlannerPod:
		done, after, err = s.createPod(ctx, n, true)
	case opDelete:
		done, after, err = s.deletePod(ctx)
	case opAgentRestart:
		done, after, err = s.restartAgent(ctx, n)
	case opKubeletRestart:
		done, err = s.restartKubelet(ctx, n)
	case opNVMLError:
		done, after, err = s.nvmlError(ctx, n)
	}
	if errors.Is(err, errSkip) {
		s.t.Logf("%s: skipped: %v", s.currentOp(), err)
		s.seq--
		return
	}
	if err != nil {
		s.violation("", fmt.Sprintf("the operation failed: %v", err))
		done = time.Now()
	}
	s.mu.Lock()
	s.counts[kind]++
	s.mu.Unlock()
	if after != nil {
		if err := after(ctx); err != nil {
			s.violation("", err.Error())
		}
	}
	s.settle(ctx, kind, done)
}

// errSkip says an operation has nothing to work on now (no pod to delete,
// no free GPU); another is picked.
var errSkip = errors.New("nothing to do")

// pick chooses the next operation's kind: pods come and go most, the
// faults less often; past soakMaxPods, deletions.
func (s *soak) pick() string {
	if len(s.pods) >= soakMaxPods {
		return opDelete
	}
	weights := map[string]int{opAnnotate: 4, opPod: 5, opPlannerPod: 3, opDelete: 2 + len(s.pods)/2,
		opAgentRestart: 1, opKubeletRestart: 1, opNVMLError: 2}
	total := 0
	for _, k := range soakOps {
		total += weights[k]
	}
	r := s.rng.IntN(total)
	for _, k := range soakOps {
		if r < weights[k] {
			return k
		}
		r -= weights[k]
	}
	return opAnnotate
}

// settle waits until every node has converged (framework.Invariants: what
// its mig.config asks, served, nothing leaked, the pods of its snapshot
// untouched), every agent runs and is ready, and every pod of the soak
// runs and its agent reports it; then it takes new snapshots. It records
// the time from since (the operation's action) to then under kind, or a
// violation with what was last missing.
func (s *soak) settle(ctx context.Context, kind string, since time.Time) {
	deadline := since.Add(framework.Converge)
	var last error
	err := framework.WaitFor(ctx, "the soak's nodes to converge", time.Until(deadline), func(ctx context.Context) (bool, error) {
		err := s.converged(ctx)
		framework.KeepFinding(&last, err)
		return err == nil, err
	})
	took := time.Since(since)
	if err != nil {
		if last == nil {
			// The deadline cut every look short, or left none (the
			// operation's own wait used it up): one more look, with time
			// of its own, says what is missing.
			lctx, cancel := context.WithTimeout(ctx, framework.Timeout)
			if last = s.converged(lctx); last == nil {
				last = errors.New("converged only at a look after the deadline")
			}
			cancel()
		}
		s.violation("", fmt.Sprintf("not converged %s after the operation: %v", took.Round(time.Second), last))
	} else {
		s.mu.Lock()
		s.converge[kind] = append(s.converge[kind], took)
		s.mu.Unlock()
	}
	// The next snapshots: the pods that run now are those no later
	// operation may touch.
	snaps := map[string]*framework.Invariants{}
	for _, n := range s.nodes {
		inv, err := n.TakeInvariants(ctx, framework.Timeout)
		if err != nil {
			s.violation(n.NodeName, fmt.Sprintf("no snapshot after the operation: %v", err))
			continue
		}
		snaps[n.NodeName] = inv
	}
	s.mu.Lock()
	maps.Copy(s.inv, snaps)
	s.mu.Unlock()
	if err == nil {
		s.t.Logf("%s: converged in %s", s.currentOp(), took.Round(time.Millisecond))
	}
}

// converged is one look at everything settle waits for.
func (s *soak) converged(ctx context.Context) error {
	for _, n := range s.nodes {
		agent, err := n.AgentPod(ctx)
		if err != nil {
			return err
		}
		if !podReady(agent) {
			return fmt.Errorf("node %s: agent pod %s not ready", n.NodeName, agent.Name)
		}
		// A restarted kubelet serves its devices before it has read its
		// pods, and meanwhile rejects a pod asking for a device that a pod
		// deleted before the restart held (UnexpectedAdmissionError, which
		// is final for a pod no controller replaces): not recovered yet.
		if ok, err := n.Local().KubeletHasPod(ctx, agent.Namespace, agent.Name); err != nil || !ok {
			return errors.Join(fmt.Errorf("node %s: the kubelet does not list its agent pod %s yet", n.NodeName, agent.Name), err)
		}
		s.mu.Lock()
		inv := s.inv[n.NodeName]
		s.mu.Unlock()
		if inv == nil {
			// No snapshot yet (the start): nothing held to compare.
			if inv, err = n.TakeInvariants(ctx, time.Second); err != nil {
				return err
			}
		}
		if err := inv.Verify(ctx, nil); err != nil {
			return fmt.Errorf("node %s: %w", n.NodeName, err)
		}
	}
	if len(s.pods) == 0 {
		return nil
	}
	list, err := cluster.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byName := map[string]*corev1.Pod{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	layouts := map[string][]soakGPU{}
	for _, name := range slices.Sorted(maps.Keys(s.pods)) {
		p := s.pods[name]
		pod, ok := byName[name]
		if !ok {
			return fmt.Errorf("pod %s (%s on %s) is gone", name, p.profile, p.node)
		}
		if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
			return fmt.Errorf("pod %s (%s on %s): phase %s, deleting %v", name, p.profile, p.node, pod.Status.Phase, pod.DeletionTimestamp != nil)
		}
		if _, ok := layouts[p.node]; !ok {
			l, err := soakLayoutOf(ctx, p.node)
			if err != nil {
				return err
			}
			layouts[p.node] = l
		}
		if !holds(layouts[p.node], s.ns+"/"+name) {
			return fmt.Errorf("the agent of %s does not report pod %s on a device yet", p.node, name)
		}
	}
	return nil
}

// soakGPU is one GPU of the agent's layout annotation, with who uses each
// instance.
type soakGPU struct {
	Index     int `json:"index"`
	Instances []struct {
		Profile string   `json:"profile"`
		UUID    string   `json:"uuid"`
		UsedBy  []string `json:"usedBy"`
	} `json:"instances"`
}

func soakLayoutOf(ctx context.Context, node string) ([]soakGPU, error) {
	n, err := cluster.OnNode(node).Node(ctx)
	if err != nil {
		return nil, err
	}
	var l []soakGPU
	if err := json.Unmarshal([]byte(n.Annotations[annotationLayout]), &l); err != nil {
		return nil, fmt.Errorf("node %s's %s: %w", node, annotationLayout, err)
	}
	return l, nil
}

// holds says whether the layout has an instance used by pod.
func holds(l []soakGPU, pod string) bool {
	for _, g := range l {
		for _, in := range g.Instances {
			if slices.Contains(in.UsedBy, pod) {
				return true
			}
		}
	}
	return false
}

// busy says whether something uses an instance of the GPU.
func (g soakGPU) busy() bool {
	for _, in := range g.Instances {
		if len(in.UsedBy) > 0 {
			return true
		}
	}
	return false
}

func (g soakGPU) profiles() []string {
	var out []string
	for _, in := range g.Instances {
		out = append(out, in.Profile)
	}
	return out
}

// randomLayouts is a layout for every GPU of the node: a busy GPU keeps
// its profiles (a GPU with pods is never repartitioned under them: asking
// would leave the node pending, not converged, until they end), a free one
// gets random profiles that fit its model.
func (s *soak) randomLayouts(n soakNode, now []soakGPU) gpuLayouts {
	out := gpuLayouts{}
	for i := range n.gpus {
		out[i] = s.randomProfiles(n.model)
	}
	for _, g := range now {
		if g.busy() {
			out[g.Index] = g.profiles()
		}
	}
	return out
}

// randomProfiles fills a GPU of model m with random profiles, each at a
// placement its table allows on memory slices still free, within the
// model's compute slices, up to each profile's count; it stops at a
// random point after the first. The media-extension profiles (+me) are
// left out: one per GPU, and which others they allow beside them is the
// driver's business, not a layout the soak can tell valid.
func (s *soak) randomProfiles(m gpumodel.Model) []string {
	memSlices, computeSlices := m.Geometry()
	used := make([]bool, memSlices)
	compute := 0
	count := map[string]int{}
	var out []string
	for {
		type fit struct {
			p     gpumodel.Profile
			start int
		}
		var fits []fit
		for _, p := range m.Profiles {
			if strings.Contains(p.Name, "+") || count[p.Name] >= p.MaxCount || compute+p.Slices > computeSlices {
				continue
			}
			for _, st := range p.Placements {
				free := st+p.MemorySlices <= memSlices
				for j := st; free && j < st+p.MemorySlices; j++ {
					free = !used[j]
				}
				if free {
					fits = append(fits, fit{p, st})
				}
			}
		}
		if len(fits) == 0 {
			break
		}
		f := fits[s.rng.IntN(len(fits))]
		for j := f.start; j < f.start+f.p.MemorySlices; j++ {
			used[j] = true
		}
		compute += f.p.Slices
		count[f.p.Name]++
		out = append(out, f.p.Name)
		if s.rng.IntN(4) == 0 {
			break
		}
	}
	return out
}

// annotate writes a new random mig.config on the node (free GPUs only
// change); with gpu >= 0, that GPU, which must be free, gets a layout
// other than its own, so that the agent creates something on it.
func (s *soak) annotate(ctx context.Context, n soakNode, gpu int) (time.Time, error) {
	now, err := soakLayoutOf(ctx, n.NodeName)
	if err != nil {
		return time.Time{}, err
	}
	free := 0
	for _, g := range now {
		if !g.busy() {
			free++
		}
	}
	if free == 0 {
		return time.Time{}, fmt.Errorf("%w: every GPU of %s has pods", errSkip, n.NodeName)
	}
	l := s.randomLayouts(n, now)
	for _, g := range now {
		if g.Index != gpu {
			continue
		}
		// Something to create: a layout that only drops instances would
		// never reach the create the fault waits at.
		for subset(l[gpu], g.profiles()) {
			l[gpu] = s.randomProfiles(n.model)
		}
	}
	doc := migConfigPerGPU(l)
	if err := n.SetNodeAnnotations(ctx, map[string]*string{annotationMigConfig: &doc, annotationRunAI: nil}); err != nil {
		return time.Time{}, err
	}
	s.t.Logf("%s: mig.config %v", s.currentOp(), l.sorted())
	return time.Now(), nil
}

// subset says whether every profile of a, counted, is in b: going from b
// to a creates nothing.
func subset(a, b []string) bool {
	have := map[string]int{}
	for _, p := range b {
		have[p]++
	}
	for _, p := range a {
		if have[p]--; have[p] < 0 {
			return false
		}
	}
	return true
}

// createPod creates a pod pinned to the node asking for one MIG device:
// of a profile the node has free now, or (viaPlanner) of one it has no
// free device of, which a free GPU of its model can hold, so that the
// planner must reshape for it. The returned func waits until it runs.
func (s *soak) createPod(ctx context.Context, n soakNode, viaPlanner bool) (time.Time, func(context.Context) error, error) {
	now, err := soakLayoutOf(ctx, n.NodeName)
	if err != nil {
		return time.Time{}, nil, err
	}
	freeProfiles := map[string]bool{}
	freeGPU := false
	for _, g := range now {
		freeGPU = freeGPU || !g.busy()
		for _, in := range g.Instances {
			if len(in.UsedBy) == 0 && in.UUID != "" {
				freeProfiles[in.Profile] = true
			}
		}
	}
	var choices []string
	if viaPlanner {
		if !freeGPU {
			return time.Time{}, nil, fmt.Errorf("%w: no free GPU on %s for the planner", errSkip, n.NodeName)
		}
		for _, p := range n.model.Profiles {
			if !strings.Contains(p.Name, "+") && !freeProfiles[p.Name] {
				choices = append(choices, p.Name)
			}
		}
	} else {
		choices = slices.Sorted(maps.Keys(freeProfiles))
	}
	if len(choices) == 0 {
		return time.Time{}, nil, fmt.Errorf("%w: no profile to ask %s for", errSkip, n.NodeName)
	}
	profile := choices[s.rng.IntN(len(choices))]
	name := fmt.Sprintf("soak-%d", s.seq)
	pod := n.gpuPod(s.ns, name, "nvidia.com/mig-"+profile, 1, "sleep", "86400")
	if _, err := cluster.Client.CoreV1().Pods(s.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return time.Time{}, nil, err
	}
	done := time.Now()
	s.pods[name] = soakPod{node: n.NodeName, profile: profile}
	s.t.Logf("%s: pod %s asks for %s", s.currentOp(), name, profile)
	return done, func(ctx context.Context) error {
		_, err := cluster.WaitForPodPhase(ctx, s.ns, name, corev1.PodRunning)
		if err == nil {
			return nil
		}
		// Found once: the pod goes, so that the operations after it are
		// judged on their own.
		delete(s.pods, name)
		if derr := cluster.Client.CoreV1().Pods(s.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); derr != nil && !apierrors.IsNotFound(derr) {
			s.t.Logf("deleting pod %s, which did not run: %v", name, derr)
		}
		return fmt.Errorf("pod %s (%s on %s) does not run: %w", name, profile, n.NodeName, err)
	}, nil
}

// deletePod deletes one of the soak's pods, at random; the returned func
// waits until it is gone and its agent no longer reports it.
func (s *soak) deletePod(ctx context.Context) (time.Time, func(context.Context) error, error) {
	if len(s.pods) == 0 {
		return time.Time{}, nil, fmt.Errorf("%w: no pod", errSkip)
	}
	names := slices.Sorted(maps.Keys(s.pods))
	name := names[s.rng.IntN(len(names))]
	p := s.pods[name]
	delete(s.pods, name)
	// Before the delete: the checker must not take it for a lost pod.
	s.mu.Lock()
	if inv := s.inv[p.node]; inv != nil {
		inv.Forget(s.ns + "/" + name)
	}
	s.mu.Unlock()
	err := cluster.Client.CoreV1().Pods(s.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, nil, err
	}
	done := time.Now()
	s.t.Logf("%s: deleted pod %s (%s on %s)", s.currentOp(), name, p.profile, p.node)
	return done, func(ctx context.Context) error {
		return framework.WaitFor(ctx, "pod "+name+" gone and its device free", framework.Converge, func(ctx context.Context) (bool, error) {
			_, err := cluster.Client.CoreV1().Pods(s.ns).Get(ctx, name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return false, err
			}
			l, err := soakLayoutOf(ctx, p.node)
			return err == nil && !holds(l, s.ns+"/"+name), err
		})
	}, nil
}

// restartAgent deletes the node's agent pod, as an operator or an
// eviction would; its DaemonSet starts another. The returned func waits
// for the new one.
func (s *soak) restartAgent(ctx context.Context, n soakNode) (time.Time, func(context.Context) error, error) {
	old, err := n.AgentPod(ctx)
	if err != nil {
		return time.Time{}, nil, err
	}
	if err := cluster.Client.CoreV1().Pods(framework.MigflexNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		return time.Time{}, nil, err
	}
	done := time.Now()
	s.mu.Lock()
	s.faults["agent pod deleted"]++
	s.mu.Unlock()
	return done, func(ctx context.Context) error {
		return framework.WaitFor(ctx, "a new agent on "+n.NodeName, framework.Converge, func(ctx context.Context) (bool, error) {
			p, err := n.AgentPod(ctx)
			return err == nil && p.UID != old.UID && podReady(p), err
		})
	}, nil
}

// restartKubelet restarts the node's kubelet (hack/cluster/restart.sh),
// which returns once the new one answers.
func (s *soak) restartKubelet(ctx context.Context, n soakNode) (time.Time, error) {
	out, err := n.RestartKubelet(ctx)
	if err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	s.faults["kubelet restarted"]++
	s.mu.Unlock()
	s.t.Logf("%s: %s", s.currentOp(), strings.TrimSpace(lastLine(out)))
	return time.Now(), nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// nvmlError arms an error on the simulator's next GPU-instance create on
// a free GPU of the node and changes that GPU's layout, so that a create
// fails in the middle of the change: the agent must roll the GPU back and
// try again. The returned func clears the fault once the node has
// converged, and counts it if it fired.
func (s *soak) nvmlError(ctx context.Context, n soakNode) (time.Time, func(context.Context) error, error) {
	now, err := soakLayoutOf(ctx, n.NodeName)
	if err != nil {
		return time.Time{}, nil, err
	}
	var free []int
	for _, g := range now {
		if !g.busy() {
			free = append(free, g.Index)
		}
	}
	if len(free) == 0 {
		return time.Time{}, nil, fmt.Errorf("%w: every GPU of %s has pods", errSkip, n.NodeName)
	}
	gpu := free[s.rng.IntN(len(free))]
	name := fmt.Sprintf("soak-%d", s.seq)
	if _, err := n.Sim(ctx, "fault", "--kind", "error", "--call", "createGpuInstance", "--gpu", strconv.Itoa(gpu), "--name", name); err != nil {
		return time.Time{}, nil, err
	}
	done, err := s.annotate(ctx, n, gpu)
	if err != nil {
		return done, nil, err
	}
	return done, func(ctx context.Context) error {
		// Fired once the agent's first create on the GPU failed; settle
		// then waits for the retry to converge.
		f, err := n.WaitForSimFault(ctx, name, false)
		if _, cerr := n.Sim(context.WithoutCancel(ctx), "clear-faults", "--name", name); cerr != nil {
			s.t.Logf("clearing fault %s: %v", name, cerr)
		}
		if err != nil {
			return fmt.Errorf("the create error armed on GPU %d did not fire: %w", gpu, err)
		}
		s.mu.Lock()
		s.faults["NVML create error fired"] += f.Fired
		s.mu.Unlock()
		return nil
	}, nil
}

// checkEverySecond runs every node's Safety check every second until ctx
// ends, recording what it finds broken.
func (s *soak) checkEverySecond(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		// One list of the held pods for every node's check.
		var invs []*framework.Invariants
		for _, n := range s.nodes {
			if inv := s.inv[n.NodeName]; inv != nil {
				invs = append(invs, inv)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		pods, lerr := cluster.HeldPods(cctx, invs...)
		for _, n := range s.nodes {
			inv := s.inv[n.NodeName]
			if inv == nil {
				continue
			}
			err := lerr
			if err == nil {
				err = inv.Safety(cctx, pods)
			}
			s.checks++
			var v *framework.Violation
			switch {
			case errors.As(err, &v):
				s.violationLocked(n.NodeName, v.Error())
			case err != nil && ctx.Err() == nil:
				s.readErrors++
			}
		}
		cancel()
		s.mu.Unlock()
	}
}

// sampleMemory records the resident memory of every agent, webhook and
// planner process every memoryEvery until ctx ends.
func (s *soak) sampleMemory(ctx context.Context) {
	components := map[string]string{framework.AgentDaemonSet: "/device-plugin", framework.WebhookName: "/webhook", plannerName: "/planner"}
	for {
		pods, err := cluster.Client.CoreV1().Pods(framework.MigflexNamespace).List(ctx, metav1.ListOptions{})
		at := time.Now().UTC().Format(time.RFC3339)
		got := map[string]int64{}
		errs := 0
		if err != nil && ctx.Err() == nil {
			errs++
		}
		if err == nil {
			for _, p := range pods.Items {
				cmd, ok := components[p.Labels["app"]]
				if !ok || p.Status.Phase != corev1.PodRunning {
					continue
				}
				rss, err := framework.PodRSS(p.UID, cmd)
				if err != nil {
					errs++
					continue
				}
				got[p.Labels["app"]+" "+p.Name+" ("+p.Spec.NodeName+")"] = rss
			}
		}
		s.mu.Lock()
		s.memErrors += errs
		for _, key := range slices.Sorted(maps.Keys(got)) {
			rss := got[key]
			m := s.memory[key]
			if m == nil {
				m = &memSeries{min: rss, max: rss}
				s.memory[key] = m
			}
			m.min, m.max, m.last = min(m.min, rss), max(m.max, rss), rss
			m.n++
			s.samples = append(s.samples, fmt.Sprintf("%s,%s,%d", at, key, rss))
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(memoryEvery):
		}
	}
}

func (s *soak) setOp(op string) {
	s.mu.Lock()
	s.op = op
	s.mu.Unlock()
}

func (s *soak) currentOp() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.op
}

func (s *soak) violation(node, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violationLocked(node, what)
}

// violationLocked records a violation; the same one seen again during the
// same operation counts as one, seen so many times.
func (s *soak) violationLocked(node, what string) {
	s.t.Logf("VIOLATION during %s, node %s: %s", s.op, node, what)
	for i := range s.violations {
		v := &s.violations[i]
		if v.op == s.op && v.node == node && v.what == what {
			v.times++
			return
		}
	}
	s.violations = append(s.violations, soakViolation{at: time.Now(), op: s.op, node: node, what: what, times: 1})
}

// report is the soak's report in Markdown.
func (s *soak) report(ran, asked time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n# migflex soak report\n\n")
	fmt.Fprintf(&b, "- command: `make soak DURATION=%s SEED=%d`\n", asked, s.seed)
	fmt.Fprintf(&b, "- seed: %d; ran %s (asked %s), ended %s\n", s.seed, ran.Round(time.Second), asked, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- cluster: Kubernetes %s, nodes", cluster.GitVersion)
	for _, n := range s.nodes {
		path := "device plugin"
		if n.dra {
			path = "DRA"
		}
		fmt.Fprintf(&b, " %s (%d x %s, %s)", n.NodeName, n.gpus, n.model.Name, path)
	}
	fmt.Fprintf(&b, "\n\n## Operations and time to converge\n\n")
	fmt.Fprintf(&b, "From the operation's action (the write, the create, the delete, the restart once restart.sh returned) until every invariant holds on every node, every agent is ready and every soak pod runs and is reported.\n\n")
	fmt.Fprintf(&b, "| operation | count | converged | p50 | p99 | max |\n| --- | --- | --- | --- | --- | --- |\n")
	var all []time.Duration
	total := 0
	for _, k := range append([]string{"start"}, soakOps...) {
		d := s.converge[k]
		all = append(all, d...)
		c := s.counts[k]
		if k == "start" {
			c = 1
		}
		total += c
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", k, c, len(d), quantiles(d))
	}
	fmt.Fprintf(&b, "| all | %d | %d | %s |\n", total, len(all), quantiles(all))
	fmt.Fprintf(&b, "\n## Faults injected\n\n")
	for _, k := range slices.Sorted(maps.Keys(s.faults)) {
		fmt.Fprintf(&b, "- %s: %d\n", k, s.faults[k])
	}
	fmt.Fprintf(&b, "\n## Violations: %d\n\n", len(s.violations))
	fmt.Fprintf(&b, "Safety checked every second on every node (%d checks; %d could not read the cluster at that moment and were not counted), convergence after every operation.\n\n", s.checks, s.readErrors)
	for _, v := range s.violations {
		fmt.Fprintf(&b, "- %s, during %s, node %q (seen %d times): %s\n", v.at.UTC().Format(time.RFC3339), v.op, v.node, v.times, v.what)
	}
	fmt.Fprintf(&b, "\n## Memory (RSS, sampled every %s; a restarted pod is a new series)\n\n", memoryEvery)
	fmt.Fprintf(&b, "| process | samples | min | max | last |\n| --- | --- | --- | --- | --- |\n")
	for _, k := range slices.Sorted(maps.Keys(s.memory)) {
		m := s.memory[k]
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", k, m.n, mib(m.min), mib(m.max), mib(m.last))
	}
	if s.memErrors > 0 {
		fmt.Fprintf(&b, "\n%d samples could not be read (a process between restarts).\n", s.memErrors)
	}
	return b.String()
}

func quantiles(d []time.Duration) string {
	if len(d) == 0 {
		return "- | - | -"
	}
	r := func(x time.Duration) string { return x.Round(100 * time.Millisecond).String() }
	return fmt.Sprintf("%s | %s | %s", r(percentile(d, 0.5)), r(percentile(d, 0.99)), r(slices.Max(d)))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// writeReport writes the report and the memory samples (CSV) under
// MIGFLEX_SOAK_OUT, by default _output/soak.
func (s *soak) writeReport(report string) error {
	dir := os.Getenv(envSoakOut)
	if dir == "" {
		root, err := framework.RepoRoot()
		if err != nil {
			return err
		}
		dir = filepath.Join(root, "_output", "soak")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, fmt.Sprintf("soak-%s-seed%d", time.Now().UTC().Format("20060102T150405Z"), s.seed))
	if err := os.WriteFile(base+".md", []byte(report), 0o644); err != nil {
		return err
	}
	s.mu.Lock()
	csv := "time,process,rss_bytes\n" + strings.Join(s.samples, "\n") + "\n"
	s.mu.Unlock()
	if err := os.WriteFile(base+"-memory.csv", []byte(csv), 0o644); err != nil {
		return err
	}
	fmt.Printf("soak: report in %s.md, memory samples in %s-memory.csv\n", base, base)
	return nil
}
