// Package scale measures the planner (cmd/planner, as it runs in the
// cluster) and the reshape-first webhook (cmd/webhook --reshape-first)
// against thousands of opted-in Nodes on a real etcd and kube-apiserver:
// Nodes carry the layout and profiles annotations their agents would write
// (internal/domain/nodeinfo's encoders), no kubelet runs, and pending pods arrive
// in bursts, each marked unschedulable as the scheduler would. Both run as
// processes of their own, so their resident memory is theirs.
package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/platform/certwatch/certtest"
	"github.com/migflex/migflex/test/bench/cluster"
	"github.com/migflex/migflex/test/bench/load"
	"github.com/migflex/migflex/test/bench/proc"
	"github.com/migflex/migflex/test/bench/report"
)

// Options configure a run.
type Options struct {
	// Assets holds etcd, kube-apiserver and kubectl.
	Assets string
	// PlannerBin and WebhookBin are the cmd/planner and cmd/webhook
	// binaries.
	PlannerBin, WebhookBin string
	// WorkDir receives the processes' logs, kubeconfig and certificates.
	WorkDir string
	// Nodes in the fleet; Pods pending pods, created Burst at a time,
	// BurstGap apart.
	Nodes, Pods, Burst int
	BurstGap           time.Duration
	// ChurnShare of the nodes change their published layout at once
	// after the pods (0: no churn step).
	ChurnShare float64
	// PlannerArgs are added to the planner's command line.
	PlannerArgs []string
	// Settle bounds the wait for every pod's Event after the last burst,
	// and is how long the churn step watches the planner.
	Settle       time.Duration
	SetupWorkers int
	Progress     io.Writer
}

// Report is what a run measured.
type Report struct {
	Machine     report.Machine `json:"machine"`
	Nodes       int            `json:"nodes"`
	Pods        int            `json:"pods"`
	Burst       int            `json:"burst"`
	BurstGap    time.Duration  `json:"burstGapNs"`
	PlannerArgs []string       `json:"plannerArgs"`
	Setup       time.Duration  `json:"setupNs"`
	Elapsed     time.Duration  `json:"elapsedNs"`

	// WriteLatency is, per pod whose node the planner wrote after the
	// pod was marked, from the mark (the status update returned) to the
	// bench's watch seeing the node's new nvidia.com/mig.config (or
	// proposal). EventLatency is from the mark to the pod's
	// MigReshapePlanned Event, for every pod that got one.
	WriteLatency load.Percentiles `json:"writeLatency"`
	EventLatency load.Percentiles `json:"eventLatency"`
	Planned      int              `json:"planned"`
	Impossible   int              `json:"impossible"`
	Untold       int              `json:"untold"`

	// From the planner's log (--v=2): rounds, their time (decide and
	// write), and the Node writes.
	Rounds          int              `json:"rounds"`
	RoundsWithWrite int              `json:"roundsWithWrite"`
	RoundTime       load.Percentiles `json:"roundTime"`
	DecideTime      load.Percentiles `json:"decideTime"`
	NodeWrites      int              `json:"nodeWrites"`
	WriteFailures   int              `json:"writeFailures"`
	MaxWritesRound  int              `json:"maxWritesPerRound"`
	// NodesChanged are the distinct nodes the bench's watch saw the
	// planner's annotation change on, PlannerUpdates how many changes it
	// saw: one write per changed node is the goal.
	NodesChanged   int `json:"nodesChanged"`
	PlannerUpdates int `json:"plannerUpdates"`
	Events         int `json:"events"`

	Planner ProcessStats `json:"planner"`
	Webhook ProcessStats `json:"webhook"`

	Admissions      int              `json:"admissions"`
	ReshapeExpected int              `json:"reshapeExpected"`
	Rewritten       int              `json:"rewritten"`
	AdmissionTime   load.Percentiles `json:"admissionTime"`

	Churn *Churn `json:"churn,omitempty"`
}

// ProcessStats is a process's resident memory at the run's steps and its
// CPU time.
type ProcessStats struct {
	// RSSEmpty: synced on the empty cluster; RSSNodes: once it holds
	// every Node; RSSPods: after the pods; Peak: VmHWM at the end.
	RSSEmpty int64         `json:"rssEmptyBytes"`
	RSSNodes int64         `json:"rssNodesBytes"`
	RSSPods  int64         `json:"rssPodsBytes"`
	Peak     int64         `json:"peakBytes"`
	CPU      time.Duration `json:"cpuNs"`
}

// Churn is what the planner did when a share of the nodes changed their
// published layout at once.
type Churn struct {
	Nodes      int              `json:"nodes"`
	Updates    time.Duration    `json:"updatesNs"`
	Rounds     int              `json:"rounds"`
	RoundTime  load.Percentiles `json:"roundTime"`
	NodeWrites int              `json:"nodeWrites"`
	PlannerCPU time.Duration    `json:"plannerCpuNs"`
	WebhookCPU time.Duration    `json:"webhookCpuNs"`
	PlannerRSS int64            `json:"plannerRssBytes"`
	WebhookRSS int64            `json:"webhookRssBytes"`
}

// Problems are what makes the run invalid: pods the planner never told,
// failed writes, more writes than changed nodes.
func (r *Report) Problems() []string {
	var out []string
	if r.Untold > 0 {
		out = append(out, fmt.Sprintf("%d pods got no Event from the planner", r.Untold))
	}
	if r.Planned == 0 {
		out = append(out, "no pod got a MigReshapePlanned Event")
	}
	if r.WriteFailures > 0 {
		out = append(out, fmt.Sprintf("%d Node writes failed", r.WriteFailures))
	}
	if r.NodeWrites > r.NodesChanged {
		out = append(out, fmt.Sprintf("%d Node writes for %d changed nodes", r.NodeWrites, r.NodesChanged))
	}
	if r.Admissions != r.Pods {
		out = append(out, fmt.Sprintf("%d admissions answered for %d pods", r.Admissions, r.Pods))
	}
	return out
}

type bench struct {
	o        Options
	r        *Report
	client   kubernetes.Interface
	kubecfg  string
	certDir  string
	caPEM    []byte
	planner  *proc.Process
	webhook  *proc.Process
	hookAddr string
	hookHTTP *http.Client

	mu      sync.Mutex
	marks   map[string]time.Time   // pod -> marked unschedulable
	writes  map[string][]time.Time // node -> planner annotation changes seen
	planned map[string]told        // pod -> first MigReshapePlanned
	refused map[string]bool        // pods with a MigReshapeImpossible
	events  int
}

type told struct {
	node string
	at   time.Time
}

// Run runs the benchmark; the report holds what was measured when it
// fails part way.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	r := &Report{Machine: report.DescribeMachine(), Nodes: o.Nodes, Pods: o.Pods, Burst: o.Burst, BurstGap: o.BurstGap, PlannerArgs: o.PlannerArgs}
	defer func() {
		r.Machine.LoadAfter = report.LoadAverage()
		r.Elapsed = time.Since(start)
	}()
	if o.Burst <= 0 || o.Nodes <= 0 || o.SetupWorkers <= 0 {
		return r, errors.New("scale: nodes, burst and setup workers must be positive")
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return r, err
	}
	apiLog, err := os.Create(filepath.Join(o.WorkDir, "kube-apiserver.log"))
	if err != nil {
		return r, err
	}
	defer apiLog.Close()
	b := &bench{o: o, r: r, kubecfg: filepath.Join(o.WorkDir, "kubeconfig"), certDir: filepath.Join(o.WorkDir, "certs"),
		marks: map[string]time.Time{}, writes: map[string][]time.Time{}, planned: map[string]told{}, refused: map[string]bool{}}
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
	if b.client, err = cluster.SetupClient(cp.Config); err != nil {
		return r, err
	}
	if err := cluster.WriteKubeconfig(cp.Config, b.kubecfg); err != nil {
		return r, err
	}
	if err := os.MkdirAll(b.certDir, 0o700); err != nil {
		return r, err
	}
	if b.caPEM, err = certtest.WriteServing(b.certDir); err != nil {
		return r, err
	}
	defer b.stopProcesses()
	return r, b.run(ctx)
}

func (b *bench) progress(format string, args ...any) {
	if b.o.Progress != nil {
		fmt.Fprintf(b.o.Progress, "%s scale: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

func (b *bench) run(ctx context.Context) error {
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	// Both start on the empty cluster: what they hold once the Nodes are
	// in is what the Nodes cost them (their informers, the planner's
	// view).
	if err := b.startProcesses(ctx); err != nil {
		return err
	}
	if err := b.sample(func(s *ProcessStats, m proc.Memory) { s.RSSEmpty = m.Current }); err != nil {
		return err
	}
	stopWatch, err := b.watch(ctx)
	if err != nil {
		return err
	}
	defer stopWatch()

	b.progress("creating %d nodes", b.o.Nodes)
	setup := time.Now()
	if err := b.createNodes(ctx); err != nil {
		return err
	}
	b.r.Setup = time.Since(setup)
	// Until both hold every Node (their caches have no count to ask; the
	// planner's rounds on node adds end once they stop).
	if err := b.waitQuiet(ctx, 5*time.Second); err != nil {
		return err
	}
	if err := b.sample(func(s *ProcessStats, m proc.Memory) { s.RSSNodes = m.Current }); err != nil {
		return err
	}

	b.progress("%d pending pods, %d at a time every %s", b.o.Pods, b.o.Burst, b.o.BurstGap)
	if err := b.pods(ctx); err != nil {
		return err
	}
	b.waitTold(ctx)
	if err := b.sample(func(s *ProcessStats, m proc.Memory) { s.RSSPods = m.Current }); err != nil {
		return err
	}
	offset := b.logSize()
	if err := b.readLog(0, offset, false); err != nil {
		return err
	}
	b.summarize()

	if b.o.ChurnShare > 0 {
		if err := b.churn(ctx, offset); err != nil {
			return err
		}
	}
	return b.sample(func(s *ProcessStats, m proc.Memory) { s.Peak = m.Peak })
}

func (b *bench) startProcesses(ctx context.Context) error {
	var err error
	args := append([]string{"--kubeconfig=" + b.kubecfg, "--leader-elect=false", "--metrics-addr=", "--v=2"}, b.o.PlannerArgs...)
	if b.planner, err = proc.Start(filepath.Join(b.o.WorkDir, "planner.log"), b.o.PlannerBin, []string{"KUBECONFIG="}, args...); err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	b.hookAddr = addr
	if b.webhook, err = proc.Start(filepath.Join(b.o.WorkDir, "webhook.log"), b.o.WebhookBin,
		[]string{"KUBECONFIG=", "MIGFLEX_WEBHOOK_METRICS_ADDR=127.0.0.1:0"},
		"--listen="+addr, "--tls-cert-dir="+b.certDir, "--kubeconfig="+b.kubecfg, "--reshape-first"); err != nil {
		return err
	}
	if b.hookHTTP, err = load.NewClient(b.caPEM); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		synced := strings.Contains(b.readAll(), "Caches synced")
		ready := false
		if resp, err := b.hookHTTP.Get("https://" + b.hookAddr + "/readyz"); err == nil {
			ready = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
		if synced && ready {
			return nil
		}
		if err := errors.Join(b.planner.Exited(), b.webhook.Exited()); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("planner synced %v, webhook ready %v after 2 minutes", synced, ready)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *bench) stopProcesses() {
	for _, p := range []*proc.Process{b.planner, b.webhook} {
		if p != nil {
			if err := p.Stop(30 * time.Second); err != nil {
				b.progress("%v", err)
			}
		}
	}
}

// sample records each process's memory (and CPU so far) through set.
func (b *bench) sample(set func(*ProcessStats, proc.Memory)) error {
	for _, x := range []struct {
		p *proc.Process
		s *ProcessStats
	}{{b.planner, &b.r.Planner}, {b.webhook, &b.r.Webhook}} {
		if err := x.p.Exited(); err != nil {
			return err
		}
		m, err := proc.Default.Memory(x.p.PID())
		if err != nil {
			return err
		}
		set(x.s, m)
		if x.s.CPU, err = proc.Default.CPU(x.p.PID()); err != nil {
			return err
		}
	}
	return nil
}

// watch follows the Nodes (the planner's writes) and the pending pods'
// Events as a user would.
func (b *bench) watch(ctx context.Context) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(b.client, 0)
	nodes := f.Core().V1().Nodes().Informer()
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
		on, nn := o.(*corev1.Node), n.(*corev1.Node)
		for _, k := range []string{nodeinfo.AnnotationMigConfig, nodeinfo.AnnotationProposed} {
			if on.Annotations[k] != nn.Annotations[k] && nn.Annotations[k] != "" {
				b.mu.Lock()
				b.writes[nn.Name] = append(b.writes[nn.Name], time.Now())
				b.mu.Unlock()
			}
		}
	}}); err != nil {
		cancel()
		return nil, err
	}
	ef := informers.NewSharedInformerFactoryWithOptions(b.client, 0, informers.WithNamespace(Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("involvedObject.kind", "Pod").String()
		}))
	events := ef.Core().V1().Events().Informer()
	onEvent := func(obj any) {
		ev, ok := obj.(*corev1.Event)
		if !ok {
			return
		}
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		b.events++
		pod := ev.InvolvedObject.Name
		switch ev.Reason {
		case "MigReshapePlanned":
			if _, ok := b.planned[pod]; !ok {
				b.planned[pod] = told{node: plannedNode(ev.Message), at: now}
			}
		case "MigReshapeImpossible":
			b.refused[pod] = true
		}
	}
	if _, err := events.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onEvent, UpdateFunc: func(_, n any) { onEvent(n) }}); err != nil {
		cancel()
		return nil, err
	}
	f.Start(ctx.Done())
	ef.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, events.HasSynced) {
		cancel()
		return nil, errors.New("the bench's informers did not sync")
	}
	return func() { cancel(); f.Shutdown(); ef.Shutdown() }, nil
}

// plannedNode is the node a MigReshapePlanned message names: "will run on
// node NAME: ...".
func plannedNode(msg string) string {
	_, rest, ok := strings.Cut(msg, " on node ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	return name
}

func (b *bench) createNodes(ctx context.Context) error {
	return cluster.Parallel(ctx, b.o.Nodes, b.o.SetupWorkers, func(ctx context.Context, i int) error {
		want, err := Node(i)
		if err != nil {
			return err
		}
		n, err := b.client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{FieldManager: "migflex-agent"})
		if err != nil {
			return fmt.Errorf("creating node %s: %w", want.Name, err)
		}
		if n.Status, err = Status(i); err != nil {
			return err
		}
		if n, err = b.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("status of node %s: %w", want.Name, err)
		}
		// The not-ready taint the API server put on the new Node goes, as
		// the node lifecycle controller removes it from a Ready node.
		if len(n.Spec.Taints) > 0 {
			n.Spec.Taints = nil
			if _, err := b.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("untainting node %s: %w", want.Name, err)
			}
		}
		return nil
	})
}

// waitQuiet waits until the planner's log has not grown for quiet: its
// rounds on the Node adds are over.
func (b *bench) waitQuiet(ctx context.Context, quiet time.Duration) error {
	last, since := b.logSize(), time.Now()
	for time.Since(since) < quiet {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if err := b.planner.Exited(); err != nil {
			return err
		}
		if n := b.logSize(); n != last {
			last, since = n, time.Now()
		}
	}
	return nil
}

// pods creates the pending pods in bursts: each is reviewed by the webhook
// (as the API server would call it), created as asked, and marked
// unschedulable as the scheduler would.
func (b *bench) pods(ctx context.Context) error {
	var admission []time.Duration
	var amu sync.Mutex
	for from := 0; from < b.o.Pods; from += b.o.Burst {
		to := min(from+b.o.Burst, b.o.Pods)
		err := cluster.Parallel(ctx, to-from, b.o.SetupWorkers, func(ctx context.Context, k int) error {
			p := Pod(from + k)
			took, verdict, err := b.admit(p)
			if err != nil {
				return err
			}
			amu.Lock()
			admission = append(admission, took)
			b.r.Admissions++
			switch verdict {
			case "reshape":
				b.r.ReshapeExpected++
			case "rewrite":
				b.r.Rewritten++
			}
			amu.Unlock()
			created, err := b.client.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating pod %s: %w", p.Name, err)
			}
			created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/N nodes are available: insufficient " + string(PodResource(from+k)),
				LastTransitionTime: metav1.Now()}}
			if _, err := b.client.CoreV1().Pods(Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("marking pod %s unschedulable: %w", p.Name, err)
			}
			b.mu.Lock()
			b.marks[p.Name] = time.Now()
			b.mu.Unlock()
			return nil
		})
		if err != nil {
			return err
		}
		if to < b.o.Pods {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(b.o.BurstGap):
			}
		}
	}
	b.r.AdmissionTime = load.Compute(admission)
	return nil
}

// admit sends the pod's CREATE review to the webhook and says what it did:
// "reshape" (left for the planner), "rewrite" (another profile), "allow".
func (b *bench) admit(p *corev1.Pod) (time.Duration, string, error) {
	req, err := load.NewRequest(p.Name, p, nil)
	if err != nil {
		return 0, "", err
	}
	start := time.Now()
	resp, err := b.hookHTTP.Post("https://"+b.hookAddr+"/mutate", "application/json", bytes.NewReader(req.Body))
	if err != nil {
		return 0, "", fmt.Errorf("admitting %s: %w", p.Name, err)
	}
	defer resp.Body.Close()
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
		return 0, "", fmt.Errorf("admitting %s: %s: %w", p.Name, resp.Status, err)
	}
	took := time.Since(start)
	if review.Response == nil || !review.Response.Allowed {
		return took, "", fmt.Errorf("admitting %s: not allowed: %+v", p.Name, review.Response)
	}
	patch := string(review.Response.Patch)
	switch {
	case strings.Contains(patch, "migflex.io~1reshape") || strings.Contains(patch, `"migflex.io/reshape"`):
		return took, "reshape", nil
	case strings.Contains(patch, "resources"):
		return took, "rewrite", nil
	}
	return took, "allow", nil
}

// waitTold waits until every pod has a MigReshapePlanned or
// MigReshapeImpossible Event, or Settle passed.
func (b *bench) waitTold(ctx context.Context) {
	deadline := time.Now().Add(b.o.Settle)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		b.mu.Lock()
		left := 0
		for pod := range b.marks {
			if _, ok := b.planned[pod]; !ok && !b.refused[pod] {
				left++
			}
		}
		b.mu.Unlock()
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// summarize turns what the watches saw into latencies and counts.
func (b *bench) summarize() {
	b.mu.Lock()
	defer b.mu.Unlock()
	var write, event []time.Duration
	for pod, mark := range b.marks {
		t, ok := b.planned[pod]
		switch {
		case ok:
			b.r.Planned++
			event = append(event, t.at.Sub(mark))
			// The write for it: the first change of its node after its
			// mark, if the node was written for it (not served from a
			// change written before).
			for _, w := range b.writes[t.node] {
				if !w.Before(mark) && !w.After(t.at) {
					write = append(write, w.Sub(mark))
					break
				}
			}
		case b.refused[pod]:
			b.r.Impossible++
		default:
			b.r.Untold++
		}
	}
	b.r.WriteLatency, b.r.EventLatency = load.Compute(write), load.Compute(event)
	b.r.NodesChanged = len(b.writes)
	for _, w := range b.writes {
		b.r.PlannerUpdates += len(w)
	}
	b.r.Events = b.events
}

var (
	reRound  = regexp.MustCompile(`"Round ended".* took="?([0-9.]+[a-zµ]+)"?`)
	reDecide = regexp.MustCompile(`"Round decided".* writes=([0-9]+) took="?([0-9.]+[a-zµ]+)"?`)
)

// readLog counts the planner's rounds and writes in its log between from
// and to (bytes); churn puts them in the churn step.
func (b *bench) readLog(from, to int64, churn bool) error {
	f, err := os.Open(filepath.Join(b.o.WorkDir, "planner.log"))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.NewSectionReader(f, from, to-from))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var rounds, decides []time.Duration
	writes, failures, withWrite, maxWrites := 0, 0, 0, 0
	for sc.Scan() {
		line := sc.Text()
		if m := reRound.FindStringSubmatch(line); m != nil {
			if d, err := time.ParseDuration(m[1]); err == nil {
				rounds = append(rounds, d)
			}
		}
		if m := reDecide.FindStringSubmatch(line); m != nil {
			var n int
			fmt.Sscan(m[1], &n)
			if n > 0 {
				withWrite++
			}
			maxWrites = max(maxWrites, n)
			if d, err := time.ParseDuration(m[2]); err == nil {
				decides = append(decides, d)
			}
		}
		switch {
		case strings.Contains(line, `"Wrote a layout"`):
			writes++
		case strings.Contains(line, `"Writing a layout"`):
			failures++
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if churn {
		b.r.Churn.Rounds, b.r.Churn.RoundTime, b.r.Churn.NodeWrites = len(rounds), load.Compute(rounds), writes
		return nil
	}
	b.r.Rounds, b.r.RoundsWithWrite, b.r.MaxWritesRound = len(rounds), withWrite, maxWrites
	b.r.RoundTime, b.r.DecideTime = load.Compute(rounds), load.Compute(decides)
	b.r.NodeWrites, b.r.WriteFailures = writes, failures
	return nil
}

// churn changes the published layout of a share of the nodes at once (new
// pods on their busy instances, as agents would report them) and follows
// the planner for Settle.
func (b *bench) churn(ctx context.Context, offset int64) error {
	var nodes []int
	every := max(int(1/b.o.ChurnShare+0.5), 1)
	for i := 0; i < b.o.Nodes; i += every {
		nodes = append(nodes, i)
	}
	c := &Churn{Nodes: len(nodes)}
	b.r.Churn = c
	b.progress("churn: %d nodes change their published layout at once", len(nodes))
	pcpu, err := proc.Default.CPU(b.planner.PID())
	if err != nil {
		return err
	}
	wcpu, err := proc.Default.CPU(b.webhook.PID())
	if err != nil {
		return err
	}
	start := time.Now()
	err = cluster.Parallel(ctx, len(nodes), b.o.SetupWorkers, func(ctx context.Context, k int) error {
		i := nodes[k]
		ann, _, err := Annotations(i, 1)
		if err != nil {
			return err
		}
		for {
			n, err := b.client.CoreV1().Nodes().Get(ctx, NodeName(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Annotations[nodeinfo.AnnotationLayout] = ann[nodeinfo.AnnotationLayout]
			_, err = b.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: "migflex-agent"})
			if !apierrors.IsConflict(err) {
				return err
			}
		}
	})
	if err != nil {
		return err
	}
	c.Updates = time.Since(start)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.o.Settle):
	}
	if c.PlannerCPU, err = proc.Default.CPU(b.planner.PID()); err != nil {
		return err
	}
	if c.WebhookCPU, err = proc.Default.CPU(b.webhook.PID()); err != nil {
		return err
	}
	c.PlannerCPU -= pcpu
	c.WebhookCPU -= wcpu
	for _, x := range []struct {
		p   *proc.Process
		rss *int64
	}{{b.planner, &c.PlannerRSS}, {b.webhook, &c.WebhookRSS}} {
		m, err := proc.Default.Memory(x.p.PID())
		if err != nil {
			return err
		}
		*x.rss = m.Current
	}
	return b.readLog(offset, b.logSize(), true)
}

func (b *bench) logSize() int64 {
	st, err := os.Stat(filepath.Join(b.o.WorkDir, "planner.log"))
	if err != nil {
		return 0
	}
	return st.Size()
}

func (b *bench) readAll() string {
	data, _ := os.ReadFile(filepath.Join(b.o.WorkDir, "planner.log"))
	return string(data)
}

// freeAddr finds a free port on 127.0.0.1 for the webhook.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
