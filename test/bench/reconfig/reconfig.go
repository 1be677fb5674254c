package reconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/test/bench/cluster"
	"github.com/migflex/migflex/test/bench/load"
	"github.com/migflex/migflex/test/bench/proc"
	"github.com/migflex/migflex/test/bench/report"
)

// Hang protection only: no measurement depends on these.
const (
	changeTimeout = 2 * time.Minute
	stopTimeout   = 30 * time.Second
)

// NodeName is the simulated GPU node; each variant has its own, with the
// variant's name appended.
const NodeName = "bench-gpu-node"

// Variant is one way of running the agent, measured in the same run as the
// others.
type Variant struct {
	Name string `json:"name"`
	// Args are agent flags that make the variant.
	Args []string `json:"args"`
}

// Variants compare the agent's success as it is (the Node's allocatable
// shows the layout) with success as soon as the layout is served, its
// behaviour before and still available with --allocatable-timeout=0.
var Variants = []Variant{
	{Name: "served", Args: []string{"--allocatable-timeout=0"}},
	{Name: "published", Args: nil},
}

// Options configure a run.
type Options struct {
	// Assets holds etcd, kube-apiserver and kubectl.
	Assets string
	// AgentBin is the cmd/device-plugin binary.
	AgentBin string
	// WorkDir receives the kubeconfig, the simulator config and the logs.
	WorkDir string
	// Model and GPUs describe the simulated node.
	Model string
	GPUs  int
	// Changes is the number of annotation changes measured per interval.
	Changes int
	// Intervals are the pauses between changes, one phase of Changes
	// changes each. A pause lets the agent's client-side rate limit
	// (client-go's default token bucket) fill up again, as between the
	// changes of a real cluster; 0 sends each change as soon as the last
	// one is done.
	Intervals []time.Duration
	// AgentArgs are extra flags for the agent (for example --v=3).
	AgentArgs []string
	// Variants are run one after the other, each with its own Node,
	// kubelet stand-in and agent process. Default: Variants.
	Variants []Variant
	// StatusDelay is how long after a device change the kubelet stand-in
	// publishes the Node's capacity and allocatable (the real kubelet does
	// at its next node status update, up to 10 s later by default).
	StatusDelay time.Duration
	// Progress receives one line per step.
	Progress io.Writer
}

// Change is one measured reconfiguration.
type Change struct {
	From, To string
	// ToListAndWatch is from the patch to the last ListAndWatch message
	// the kubelet stand-in needed to see the new layout's devices.
	ToListAndWatch time.Duration `json:"toListAndWatchNs"`
	// ToAllocatable is from the patch to the watch event of the Node whose
	// allocatable first shows the new layout (published by the kubelet
	// stand-in).
	ToAllocatable time.Duration `json:"toAllocatableNs"`
	// ToSuccess is from the patch to the watch event of the Node with the
	// new layout and state success.
	ToSuccess time.Duration `json:"toSuccessNs"`
}

// Report is what a run measured.
type Report struct {
	Machine     report.Machine `json:"machine"`
	Model       string         `json:"model"`
	GPUs        int            `json:"gpus"`
	StatusDelay time.Duration  `json:"statusDelayNs"`
	Runs        []VariantRun   `json:"runs"`
	Elapsed     time.Duration  `json:"elapsedNs"`
}

// VariantRun is what one variant measured.
type VariantRun struct {
	Variant Variant `json:"variant"`
	// Startup is from starting the agent to state success with the first
	// layout (and its devices at the kubelet stand-in).
	Startup time.Duration `json:"startupNs"`
	Phases  []Phase       `json:"phases"`
	// AgentMemory is the agent process's VmHWM and VmRSS after the last
	// change.
	AgentMemory proc.Memory `json:"agentMemory"`
}

// Phase is a series of changes with one pause between them.
type Phase struct {
	Interval       time.Duration    `json:"intervalNs"`
	Changes        []Change         `json:"changes"`
	ToListAndWatch load.Percentiles `json:"toListAndWatch"`
	ToAllocatable  load.Percentiles `json:"toAllocatable"`
	ToSuccess      load.Percentiles `json:"toSuccess"`
	// SuccessAfterAllocatable is ToSuccess - ToAllocatable per change:
	// negative when success came first.
	SuccessAfterAllocatable load.Percentiles `json:"successAfterAllocatable"`
	// ByDirection ("A -> B") holds ToListAndWatch, ToAllocatable and
	// ToSuccess.
	ByDirection map[string][3]load.Percentiles `json:"byDirection"`
	// AgentCPU is the agent's CPU time over the phase, pauses included.
	AgentCPU time.Duration `json:"agentCpuNs"`
}

type bench struct {
	o        Options
	client   kubernetes.Interface
	kubelet  *kubeletstub.Kubelet
	events   chan nodeEvent
	nodeName string
}

type nodeEvent struct {
	node *corev1.Node
	at   time.Time
}

// Run runs the benchmark.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	r := &Report{Machine: report.DescribeMachine(), Model: o.Model, GPUs: o.GPUs}
	defer func() {
		r.Machine.LoadAfter = report.LoadAverage()
		r.Elapsed = time.Since(start)
	}()
	if o.Changes < 1 || o.GPUs < 1 || len(o.Intervals) == 0 {
		return r, fmt.Errorf("reconfig: need changes (%d), GPUs (%d) and intervals (%v)", o.Changes, o.GPUs, o.Intervals)
	}
	if len(o.Variants) == 0 {
		o.Variants = Variants
	}
	r.StatusDelay = o.StatusDelay
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return r, err
	}
	b := &bench{o: o}
	apiLog, err := os.Create(filepath.Join(o.WorkDir, "kube-apiserver.log"))
	if err != nil {
		return r, err
	}
	defer apiLog.Close()
	b.progress("starting etcd and kube-apiserver from %s", o.Assets)
	cp, err := cluster.Start(o.Assets, apiLog)
	if err != nil {
		return r, err
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			b.progress("%v", err)
		}
	}()
	if b.client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return r, err
	}
	kubeconfig := filepath.Join(o.WorkDir, "kubeconfig")
	if err := cluster.WriteKubeconfig(cp.Config, kubeconfig); err != nil {
		return r, err
	}
	simConfig := filepath.Join(o.WorkDir, "sim.yaml")
	// In memory, no operation delay: what is measured is migflex's own
	// work and the API round trips, not a driver's.
	if err := os.WriteFile(simConfig, fmt.Appendf(nil, "version: v1\ngpus:\n- {model: %s, count: %d}\noperationDelay: 0s\n", o.Model, o.GPUs), 0o644); err != nil {
		return r, err
	}
	for _, v := range o.Variants {
		vr, err := b.runVariant(ctx, v, kubeconfig, simConfig)
		r.Runs = append(r.Runs, vr)
		if err != nil {
			return r, fmt.Errorf("variant %s: %w", v.Name, err)
		}
	}
	return r, nil
}

// runVariant measures one variant on its own Node, kubelet stand-in and
// agent process.
func (b *bench) runVariant(ctx context.Context, v Variant, kubeconfig, simConfig string) (VariantRun, error) {
	vr := VariantRun{Variant: v}
	o := b.o
	b.nodeName = NodeName + "-" + v.Name
	// Unix socket paths are short; the work dir may be deep.
	sockets, err := os.MkdirTemp("", "migflex-bench")
	if err != nil {
		return vr, err
	}
	defer os.RemoveAll(sockets)
	if b.kubelet, err = kubeletstub.Start(sockets); err != nil {
		return vr, err
	}
	defer b.kubelet.Stop()
	podres, err := startPodResources(sockets)
	if err != nil {
		return vr, err
	}
	defer podres.stop()

	if _, err := b.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        b.nodeName,
		Labels:      map[string]string{corev1.LabelHostname: b.nodeName},
		Annotations: map[string]string{nodeinfo.AnnotationMigConfig: Layouts[0].Doc()},
	}}, metav1.CreateOptions{}); err != nil {
		return vr, fmt.Errorf("creating the node: %w", err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := b.watchNode(watchCtx); err != nil {
		return vr, err
	}
	// The kubelet's part: the Node's allocatable follows the devices.
	pubErr := make(chan error, 1)
	go func() { pubErr <- b.kubelet.PublishNodeStatus(watchCtx, b.client, b.nodeName, o.StatusDelay) }()
	defer func() {
		stopWatch()
		if err := <-pubErr; err != nil {
			b.progress("%v", err)
		}
	}()

	b.progress("variant %s: starting the agent %s %v on %d simulated %s", v.Name, o.AgentBin, v.Args, o.GPUs, o.Model)
	agentStart := time.Now()
	args := append([]string{
		"--node-name", b.nodeName, "--kubeconfig", kubeconfig,
		"--nvml-backend", "simulated", "--sim-config", simConfig,
		"--device-plugin-dir", sockets, "--pod-resources-socket", podres.socket,
		"--metrics-addr", "",
	}, v.Args...)
	args = append(args, o.AgentArgs...)
	// The flags say everything; the caller's environment twins must not.
	p, err := proc.Start(filepath.Join(o.WorkDir, "agent-"+v.Name+".log"), o.AgentBin,
		[]string{"NODE_NAME=", "KUBECONFIG=", "NVML_BACKEND=", "SIM_CONFIG=", "ALLOCATABLE_TIMEOUT=",
			"MIGFLEX_AGENT_NODE_NAME=", "MIGFLEX_AGENT_NVML_BACKEND=", "MIGFLEX_AGENT_SIM_CONFIG=", "MIGFLEX_AGENT_ALLOCATABLE_TIMEOUT="}, args...)
	if err != nil {
		return vr, err
	}
	err = b.measure(ctx, p, agentStart, &vr)
	if stopErr := p.Stop(stopTimeout); err == nil {
		err = stopErr
	}
	return vr, err
}

func (b *bench) progress(format string, args ...any) {
	if b.o.Progress != nil {
		fmt.Fprintf(b.o.Progress, "%s reconfig: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

// watchNode sends every version of the Node, with when it arrived, to
// b.events until ctx ends.
func (b *bench) watchNode(ctx context.Context) error {
	w, err := b.client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", b.nodeName).String(),
	})
	if err != nil {
		return fmt.Errorf("watching the node: %w", err)
	}
	b.events = make(chan nodeEvent, 1024)
	go func() {
		defer w.Stop()
		defer close(b.events)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			select {
			case b.events <- nodeEvent{node: n, at: time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// waitNodeShows returns when the Node first shows l in its allocatable and
// when it first shows l with state success, whichever comes first.
func (b *bench) waitNodeShows(ctx context.Context, l Layout) (allocatable, success time.Time, err error) {
	want := l.Resources(b.o.GPUs)
	for allocatable.IsZero() || success.IsZero() {
		select {
		case ev, ok := <-b.events:
			if !ok {
				return allocatable, success, errors.New("the node watch ended")
			}
			n := ev.node
			if allocatable.IsZero() && allocatableMatches(n.Status.Allocatable, want) {
				allocatable = ev.at
			}
			if success.IsZero() && n.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateSuccess && layoutMatches(n.Annotations[nodeinfo.AnnotationLayout], l, b.o.GPUs) {
				success = ev.at
			}
			if n.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateFailed {
				return allocatable, success, fmt.Errorf("state failed: %s", n.Annotations[nodeinfo.AnnotationReason])
			}
		case <-ctx.Done():
			return allocatable, success, fmt.Errorf("waiting for %s in allocatable and state success: %w", l.Name, ctx.Err())
		}
	}
	return allocatable, success, nil
}

// allocatableMatches reports whether allocatable shows exactly want among
// the nvidia.com/mig-* resources: want's counts, every other one 0.
func allocatableMatches(allocatable corev1.ResourceList, want map[string]int) bool {
	for name, q := range allocatable {
		if strings.HasPrefix(string(name), "nvidia.com/mig-") && q.Value() != int64(want[string(name)]) {
			return false
		}
	}
	for name, n := range want {
		q, ok := allocatable[corev1.ResourceName(name)]
		if !ok || q.Value() != int64(n) {
			return false
		}
	}
	return true
}

// waitDevices returns the arrival of the last ListAndWatch message that
// made the kubelet stand-in's devices those of l: every resource of l
// connected with all its devices healthy, every other resource gone or
// empty.
func (b *bench) waitDevices(ctx context.Context, l Layout) (time.Time, error) {
	want := l.Resources(b.o.GPUs)
	st, err := b.kubelet.Wait(ctx, func(st kubeletstub.State) bool {
		for r, p := range st.Plugins {
			n, ok := want[r]
			if !ok {
				if p.Connected && len(p.Devices) > 0 {
					return false
				}
				continue
			}
			if !p.Connected || len(p.Devices) != n {
				return false
			}
			for _, d := range p.Devices {
				if d.Health != "Healthy" {
					return false
				}
			}
		}
		for r := range want {
			if _, ok := st.Plugins[r]; !ok {
				return false
			}
		}
		return true
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("waiting for the devices of %s at the kubelet: %w (plugins %d)", l.Name, err, len(st.Plugins))
	}
	var last time.Time
	for r := range want {
		if at := st.Plugins[r].LastMessage; at.After(last) {
			last = at
		}
	}
	return last, nil
}

// waitAll waits for l at the kubelet, in the Node's allocatable and in its
// state.
func (b *bench) waitAll(ctx context.Context, l Layout) (devices, allocatable, success time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, changeTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var err error
		devices, err = b.waitDevices(ctx, l)
		done <- err
	}()
	allocatable, success, err = b.waitNodeShows(ctx, l)
	return devices, allocatable, success, errors.Join(err, <-done)
}

func (b *bench) measure(ctx context.Context, p *proc.Process, agentStart time.Time, r *VariantRun) error {
	_, _, success, err := b.waitAll(ctx, Layouts[0])
	if err != nil {
		return fmt.Errorf("first layout: %w", err)
	}
	r.Startup = success.Sub(agentStart)
	b.progress("agent up with %s after %v", Layouts[0].Name, r.Startup.Round(time.Millisecond))
	next := 0
	for _, interval := range b.o.Intervals {
		ph, err := b.phase(ctx, p, interval, &next)
		if err != nil {
			return err
		}
		r.Phases = append(r.Phases, ph)
		b.progress("%d changes %v apart: to ListAndWatch p50 %v p99 %v; to allocatable p50 %v p99 %v; to success p50 %v p99 %v",
			len(ph.Changes), interval, ph.ToListAndWatch.P50, ph.ToListAndWatch.P99, ph.ToAllocatable.P50, ph.ToAllocatable.P99, ph.ToSuccess.P50, ph.ToSuccess.P99)
	}
	r.AgentMemory, err = proc.Default.Memory(p.PID())
	return err
}

// phase makes b.o.Changes changes, interval apart; *next counts changes
// over all phases so that the layouts keep alternating.
func (b *bench) phase(ctx context.Context, p *proc.Process, interval time.Duration, next *int) (Phase, error) {
	ph := Phase{Interval: interval, ByDirection: map[string][3]load.Percentiles{}}
	cpuBefore, err := proc.Default.CPU(p.PID())
	if err != nil {
		return ph, err
	}
	var toLW, toAlloc, toSuccess, lag []time.Duration
	dirLW, dirAlloc, dirSuccess := map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
	for range b.o.Changes {
		i := *next
		*next++
		if interval > 0 {
			select {
			// Pacing the load, not waiting for a condition.
			case <-time.After(interval):
			case <-ctx.Done():
				return ph, ctx.Err()
			}
		}
		from, to := Layouts[i%len(Layouts)], Layouts[(i+1)%len(Layouts)]
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, nodeinfo.AnnotationMigConfig, to.Doc())
		start := time.Now()
		if _, err := b.client.CoreV1().Nodes().Patch(ctx, b.nodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return ph, fmt.Errorf("change %d: patching the annotation: %w", i, err)
		}
		devices, allocatable, success, err := b.waitAll(ctx, to)
		if err != nil {
			return ph, fmt.Errorf("change %d (%s -> %s): %w", i, from.Name, to.Name, err)
		}
		c := Change{From: from.Name, To: to.Name, ToListAndWatch: devices.Sub(start), ToAllocatable: allocatable.Sub(start), ToSuccess: success.Sub(start)}
		ph.Changes = append(ph.Changes, c)
		toLW, toAlloc, toSuccess = append(toLW, c.ToListAndWatch), append(toAlloc, c.ToAllocatable), append(toSuccess, c.ToSuccess)
		lag = append(lag, c.ToSuccess-c.ToAllocatable)
		dir := from.Name + " -> " + to.Name
		dirLW[dir], dirAlloc[dir], dirSuccess[dir] = append(dirLW[dir], c.ToListAndWatch), append(dirAlloc[dir], c.ToAllocatable), append(dirSuccess[dir], c.ToSuccess)
	}
	cpuAfter, err := proc.Default.CPU(p.PID())
	if err != nil {
		return ph, err
	}
	ph.AgentCPU = cpuAfter - cpuBefore
	ph.ToListAndWatch, ph.ToAllocatable, ph.ToSuccess = load.Compute(toLW), load.Compute(toAlloc), load.Compute(toSuccess)
	ph.SuccessAfterAllocatable = load.Compute(lag)
	for dir := range dirLW {
		ph.ByDirection[dir] = [3]load.Percentiles{load.Compute(dirLW[dir]), load.Compute(dirAlloc[dir]), load.Compute(dirSuccess[dir])}
	}
	return ph, nil
}
