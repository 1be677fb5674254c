package reconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/migflex/migflex/internal/agent"
	"github.com/migflex/migflex/internal/deviceplugin/kubeletstub"
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

// NodeName is the simulated GPU node.
const NodeName = "bench-gpu-node"

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
	// Progress receives one line per step.
	Progress io.Writer
}

// Change is one measured reconfiguration.
type Change struct {
	From, To string
	// ToListAndWatch is from the patch to the last ListAndWatch message
	// the kubelet stand-in needed to see the new layout's devices.
	ToListAndWatch time.Duration `json:"toListAndWatchNs"`
	// ToSuccess is from the patch to the watch event of the Node with the
	// new layout and state success.
	ToSuccess time.Duration `json:"toSuccessNs"`
}

// Report is what a run measured.
type Report struct {
	Machine report.Machine `json:"machine"`
	Model   string         `json:"model"`
	GPUs    int            `json:"gpus"`
	// Startup is from starting the agent to state success with the first
	// layout (and its devices at the kubelet stand-in).
	Startup time.Duration `json:"startupNs"`
	Phases  []Phase       `json:"phases"`
	// AgentMemory is the agent process's VmHWM and VmRSS after the last
	// change.
	AgentMemory proc.Memory   `json:"agentMemory"`
	Elapsed     time.Duration `json:"elapsedNs"`
}

// Phase is a series of changes with one pause between them.
type Phase struct {
	Interval       time.Duration    `json:"intervalNs"`
	Changes        []Change         `json:"changes"`
	ToListAndWatch load.Percentiles `json:"toListAndWatch"`
	ToSuccess      load.Percentiles `json:"toSuccess"`
	// ByDirection ("A -> B") holds ToListAndWatch and ToSuccess.
	ByDirection map[string][2]load.Percentiles `json:"byDirection"`
	// AgentCPU is the agent's CPU time over the phase, pauses included.
	AgentCPU time.Duration `json:"agentCpuNs"`
}

type bench struct {
	o       Options
	client  kubernetes.Interface
	kubelet *kubeletstub.Kubelet
	events  chan nodeEvent
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
	// Unix socket paths are short; the work dir may be deep.
	sockets, err := os.MkdirTemp("", "migflex-bench")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(sockets)
	if b.kubelet, err = kubeletstub.Start(sockets); err != nil {
		return r, err
	}
	defer b.kubelet.Stop()
	podres, err := startPodResources(sockets)
	if err != nil {
		return r, err
	}
	defer podres.stop()

	if _, err := b.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        NodeName,
		Labels:      map[string]string{corev1.LabelHostname: NodeName},
		Annotations: map[string]string{agent.AnnotationMigConfig: Layouts[0].Doc()},
	}}, metav1.CreateOptions{}); err != nil {
		return r, fmt.Errorf("creating the node: %w", err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := b.watchNode(watchCtx); err != nil {
		return r, err
	}

	b.progress("starting the agent %s on %d simulated %s", o.AgentBin, o.GPUs, o.Model)
	agentStart := time.Now()
	args := append([]string{
		"--node-name", NodeName, "--kubeconfig", kubeconfig,
		"--nvml-backend", "simulated", "--sim-config", simConfig,
		"--device-plugin-dir", sockets, "--pod-resources-socket", podres.socket,
		"--metrics-addr", "",
	}, o.AgentArgs...)
	// The flags say everything; the caller's environment twins must not.
	p, err := proc.Start(filepath.Join(o.WorkDir, "agent.log"), o.AgentBin,
		[]string{"NODE_NAME=", "KUBECONFIG=", "NVML_BACKEND=", "SIM_CONFIG="}, args...)
	if err != nil {
		return r, err
	}
	err = b.measure(ctx, p, agentStart, r)
	if stopErr := p.Stop(stopTimeout); err == nil {
		err = stopErr
	}
	return r, err
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
		FieldSelector: fields.OneTermEqualSelector("metadata.name", NodeName).String(),
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

// waitSuccess returns when the Node first shows l with state success.
func (b *bench) waitSuccess(ctx context.Context, l Layout) (time.Time, error) {
	for {
		select {
		case ev, ok := <-b.events:
			if !ok {
				return time.Time{}, errors.New("the node watch ended")
			}
			n := ev.node
			if n.Labels[agent.LabelMigConfigState] == agent.StateSuccess && layoutMatches(n.Annotations[agent.AnnotationLayout], l, b.o.GPUs) {
				return ev.at, nil
			}
			if n.Labels[agent.LabelMigConfigState] == agent.StateFailed {
				return time.Time{}, fmt.Errorf("state failed: %s", n.Annotations[agent.AnnotationReason])
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for state success with %s: %w", l.Name, ctx.Err())
		}
	}
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

// waitBoth waits for l at the kubelet and on the Node.
func (b *bench) waitBoth(ctx context.Context, l Layout) (devices, success time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, changeTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var err error
		devices, err = b.waitDevices(ctx, l)
		done <- err
	}()
	success, err = b.waitSuccess(ctx, l)
	return devices, success, errors.Join(err, <-done)
}

func (b *bench) measure(ctx context.Context, p *proc.Process, agentStart time.Time, r *Report) error {
	_, success, err := b.waitBoth(ctx, Layouts[0])
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
		b.progress("%d changes %v apart: to ListAndWatch p50 %v p99 %v; to success p50 %v p99 %v",
			len(ph.Changes), interval, ph.ToListAndWatch.P50, ph.ToListAndWatch.P99, ph.ToSuccess.P50, ph.ToSuccess.P99)
	}
	r.AgentMemory, err = proc.Default.Memory(p.PID())
	return err
}

// phase makes b.o.Changes changes, interval apart; *next counts changes
// over all phases so that the layouts keep alternating.
func (b *bench) phase(ctx context.Context, p *proc.Process, interval time.Duration, next *int) (Phase, error) {
	ph := Phase{Interval: interval, ByDirection: map[string][2]load.Percentiles{}}
	cpuBefore, err := proc.Default.CPU(p.PID())
	if err != nil {
		return ph, err
	}
	var toLW, toSuccess []time.Duration
	dirLW, dirSuccess := map[string][]time.Duration{}, map[string][]time.Duration{}
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
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, agent.AnnotationMigConfig, to.Doc())
		start := time.Now()
		if _, err := b.client.CoreV1().Nodes().Patch(ctx, NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return ph, fmt.Errorf("change %d: patching the annotation: %w", i, err)
		}
		devices, success, err := b.waitBoth(ctx, to)
		if err != nil {
			return ph, fmt.Errorf("change %d (%s -> %s): %w", i, from.Name, to.Name, err)
		}
		c := Change{From: from.Name, To: to.Name, ToListAndWatch: devices.Sub(start), ToSuccess: success.Sub(start)}
		ph.Changes = append(ph.Changes, c)
		toLW, toSuccess = append(toLW, c.ToListAndWatch), append(toSuccess, c.ToSuccess)
		dir := from.Name + " -> " + to.Name
		dirLW[dir], dirSuccess[dir] = append(dirLW[dir], c.ToListAndWatch), append(dirSuccess[dir], c.ToSuccess)
	}
	cpuAfter, err := proc.Default.CPU(p.PID())
	if err != nil {
		return ph, err
	}
	ph.AgentCPU = cpuAfter - cpuBefore
	ph.ToListAndWatch, ph.ToSuccess = load.Compute(toLW), load.Compute(toSuccess)
	for dir := range dirLW {
		ph.ByDirection[dir] = [2]load.Percentiles{load.Compute(dirLW[dir]), load.Compute(dirSuccess[dir])}
	}
	return ph, nil
}
