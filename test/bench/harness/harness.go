// Package harness runs the webhook benchmark: a real etcd and kube-apiserver
// filled with the fleet, the product webhook (cmd/webhook, informer cache)
// and the baseline (listwebhook, a list per admission) each run as their own
// process against it in turn, the same AdmissionReview load sent to both over
// HTTPS, and their throughput, latency, memory and CPU recorded with the
// API server's CPU.
package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/migflex/migflex/internal/platform/certwatch/certtest"
	"github.com/migflex/migflex/internal/webhook/fallback"
	"github.com/migflex/migflex/test/bench/cluster"
	"github.com/migflex/migflex/test/bench/fleet"
	"github.com/migflex/migflex/test/bench/load"
	"github.com/migflex/migflex/test/bench/proc"
	"github.com/migflex/migflex/test/bench/report"
)

// Sources of the cluster view that a run measures.
const (
	// SourceInformer is the product: cmd/webhook with its informer cache.
	SourceInformer = "informer"
	// SourceList is the baseline: a Nodes (and Pods) list per admission.
	SourceList = "list"
	// SourceFloor is test/bench/cmd/floorwebhook: every review allowed
	// without being read past its uid, the two processes' round trip alone.
	SourceFloor = "floor"
)

// Options configure a benchmark run.
type Options struct {
	// Assets holds etcd, kube-apiserver and kubectl.
	Assets string
	// WebhookBin is cmd/webhook; ListWebhookBin is test/bench/cmd/listwebhook.
	WebhookBin     string
	ListWebhookBin string
	// FloorWebhookBin, when set, is test/bench/cmd/floorwebhook, measured
	// after the other two at each size in existence mode with Requests
	// admissions.
	FloorWebhookBin string
	// WorkDir receives the certificates, the kubeconfig and every
	// process's log.
	WorkDir string
	// Sizes are the cluster sizes in nodes, run in ascending order on one
	// API server (nodes are added between sizes).
	Sizes []int
	// Pods, when positive, are bound to the largest cluster for the
	// capacity-mode runs.
	Pods int
	// Concurrency is the number of admissions in flight.
	Concurrency int
	// Requests is the number of measured admissions per informer run.
	Requests int
	// BaselineRequests is the number per list run, by cluster size; a
	// list per admission is too slow for Requests at the larger sizes.
	BaselineRequests map[int]int
	// CapacityBaselineRequests is the number per capacity-mode list run.
	CapacityBaselineRequests int
	// SetupWorkers create nodes and pods in parallel.
	SetupWorkers int
	// Progress receives one line per step.
	Progress io.Writer
}

// Report is everything a run measured.
type Report struct {
	Machine     report.Machine `json:"machine"`
	Concurrency int            `json:"concurrency"`
	Setup       []SetupStep    `json:"setup"`
	Lists       []ListSize     `json:"lists"`
	Runs        []Measurement  `json:"runs"`
	Elapsed     time.Duration  `json:"elapsedNs"`
}

// SetupStep is how long part of filling the cluster took.
type SetupStep struct {
	What     string        `json:"what"`
	Objects  int           `json:"objects"`
	Duration time.Duration `json:"durationNs"`
}

// ListSize is the size of one JSON list the baseline makes per admission.
type ListSize struct {
	Resource string `json:"resource"`
	Objects  int    `json:"objects"`
	Bytes    int    `json:"bytes"`
}

// Measurement is one webhook process under one load.
type Measurement struct {
	Source string `json:"source"`
	Mode   string `json:"mode"`
	Nodes  int    `json:"nodes"`
	Pods   int    `json:"pods"`
	// Load is what the client measured.
	Load load.Result `json:"load"`
	// Ready is from the process start to /readyz answering 200.
	Ready time.Duration `json:"readyNs"`
	// ReadyMemory is the webhook process's VmHWM and VmRSS once ready,
	// before any admission: the cost of building its view of the cluster.
	ReadyMemory proc.Memory `json:"readyMemory"`
	// WebhookMemory is the webhook process's VmHWM and VmRSS after the load.
	WebhookMemory proc.Memory `json:"webhookMemory"`
	// Sent is every admission sent, the warm-up included.
	Sent int `json:"sent"`
	// CPU used while Sent admissions were answered, by the webhook,
	// kube-apiserver and etcd.
	WebhookCPU   time.Duration `json:"webhookCpuNs"`
	APIServerCPU time.Duration `json:"apiserverCpuNs"`
	EtcdCPU      time.Duration `json:"etcdCpuNs"`
}

// Problems lists what makes the run invalid: any failed admission of the
// product (informer) webhook or the floor, and any wrong answer. The
// baseline's admissions that got no answer (past its 30-second write
// timeout) are a result, not a problem: they are in the tables.
func (r *Report) Problems() []string {
	var out []string
	for _, run := range r.Runs {
		l := run.Load
		name := fmt.Sprintf("%s/%s at %d nodes, %d pods", run.Source, run.Mode, run.Nodes, run.Pods)
		switch {
		case l.Wrong > 0:
			out = append(out, fmt.Sprintf("%s: %d wrong answers: %v", name, l.Wrong, l.Failed))
		case run.Source != SourceList && l.Failures > 0:
			out = append(out, fmt.Sprintf("%s: %d admissions without an answer: %v", name, l.Failures, l.Failed))
		}
	}
	return out
}

type bench struct {
	o          Options
	report     *Report
	client     kubernetes.Interface
	listClient kubernetes.Interface
	kubeconfig string
	certDir    string
	caPEM      []byte
	apiPID     int
	etcdPID    int
}

// Run runs the benchmark and returns what it measured. The report is
// returned with what was measured so far when it fails part way.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	r := &Report{Machine: report.DescribeMachine(), Concurrency: o.Concurrency}
	defer func() {
		r.Machine.LoadAfter = report.LoadAverage()
		r.Elapsed = time.Since(start)
	}()
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return r, err
	}
	apiLog, err := os.Create(filepath.Join(o.WorkDir, "kube-apiserver.log"))
	if err != nil {
		return r, err
	}
	defer apiLog.Close()

	b := &bench{o: o, report: r, kubeconfig: filepath.Join(o.WorkDir, "kubeconfig"), certDir: filepath.Join(o.WorkDir, "certs")}
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
	if err := b.prepare(cp); err != nil {
		return r, err
	}
	return r, b.run(ctx)
}

func (b *bench) prepare(cp *cluster.ControlPlane) error {
	var err error
	if b.apiPID, err = proc.Default.Child(os.Getpid(), "kube-apiserver"); err != nil {
		return err
	}
	if b.etcdPID, err = proc.Default.Child(os.Getpid(), "etcd"); err != nil {
		return err
	}
	if b.client, err = cluster.SetupClient(cp.Config); err != nil {
		return err
	}
	if b.listClient, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return err
	}
	if err := cluster.WriteKubeconfig(cp.Config, b.kubeconfig); err != nil {
		return err
	}
	if err := os.MkdirAll(b.certDir, 0o700); err != nil {
		return err
	}
	b.caPEM, err = certtest.WriteServing(b.certDir)
	return err
}

func (b *bench) run(ctx context.Context) error {
	sizes := slices.Sorted(slices.Values(b.o.Sizes))
	created := 0
	for _, size := range sizes {
		if err := b.step(fmt.Sprintf("create nodes %d..%d (Create + UpdateStatus)", created, size-1), size-created, func() error {
			return cluster.CreateNodes(ctx, b.client, created, size, b.o.SetupWorkers)
		}); err != nil {
			return err
		}
		created = size
		if err := b.measureList(ctx, "nodes", size); err != nil {
			return err
		}
		for _, src := range []string{SourceInformer, SourceList, SourceFloor} {
			n := b.o.Requests
			switch src {
			case SourceList:
				n = b.o.BaselineRequests[size]
			case SourceFloor:
				if b.o.FloorWebhookBin == "" {
					continue
				}
			}
			if err := b.measure(ctx, src, fallback.ModeExistence, size, 0, n); err != nil {
				return err
			}
		}
	}
	if b.o.Pods <= 0 || created == 0 {
		return nil
	}
	pods, err := fleet.BoundPods(created, b.o.Pods)
	if err != nil {
		return err
	}
	if err := cluster.CreateNamespaces(ctx, b.client); err != nil {
		return err
	}
	if err := b.step(fmt.Sprintf("create pods bound to %d nodes", created), len(pods), func() error {
		return cluster.CreatePods(ctx, b.client, pods, b.o.SetupWorkers)
	}); err != nil {
		return err
	}
	if err := b.measureList(ctx, "pods", len(pods)); err != nil {
		return err
	}
	for _, src := range []string{SourceInformer, SourceList} {
		n := b.o.Requests
		if src == SourceList {
			n = b.o.CapacityBaselineRequests
		}
		if err := b.measure(ctx, src, fallback.ModeCapacity, created, len(pods), n); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) progress(format string, args ...any) {
	if b.o.Progress != nil {
		fmt.Fprintf(b.o.Progress, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

func (b *bench) step(what string, objects int, f func() error) error {
	b.progress("%s ...", what)
	start := time.Now()
	if err := f(); err != nil {
		return err
	}
	d := time.Since(start)
	b.report.Setup = append(b.report.Setup, SetupStep{What: what, Objects: objects, Duration: d})
	b.progress("%s: %d objects in %v (%.0f/s)", what, objects, d.Round(time.Millisecond), float64(objects)/d.Seconds())
	return nil
}

// measureList records the size of the JSON list the baseline fetches.
func (b *bench) measureList(ctx context.Context, resource string, objects int) error {
	req := b.listClient.CoreV1().RESTClient().Get().Resource(resource)
	if resource == "pods" {
		req = req.Param("fieldSelector", "spec.nodeName!=")
	}
	body, err := req.DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("listing %s: %w", resource, err)
	}
	b.report.Lists = append(b.report.Lists, ListSize{Resource: resource, Objects: objects, Bytes: len(body)})
	return nil
}

// requests are the admission mix in mode's sequence; checked, each answer
// must be of the class the mix wants (the floor's are only matched by uid).
func (b *bench) requests(mode fallback.Mode, checked bool) ([]load.Request, error) {
	mix := fleet.Mix()
	seq, err := fleet.Sequence(mix)
	if err != nil {
		return nil, err
	}
	var reqs []load.Request
	for _, i := range seq {
		a := mix[i]
		want := a.Want[mode]
		check := func(resp *admissionv1.AdmissionResponse) error {
			if got := fleet.Classify(resp); got != want {
				msg := ""
				if resp.Result != nil {
					msg = resp.Result.Message
				}
				return fmt.Errorf("class %s, want %s (warnings %q, message %q)", got, want, resp.Warnings, msg)
			}
			return nil
		}
		if !checked {
			check = nil
		}
		r, err := load.NewRequest(a.Name, a.Pod, check)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
	}
	return reqs, nil
}

func (b *bench) measure(ctx context.Context, source string, mode fallback.Mode, nodes, pods, requests int) error {
	if requests <= 0 {
		b.progress("%s/%s at %d nodes: no requests configured, skipped", source, mode, nodes)
		return nil
	}
	bin := b.o.WebhookBin
	switch source {
	case SourceList:
		bin = b.o.ListWebhookBin
	case SourceFloor:
		bin = b.o.FloorWebhookBin
	}
	reqs, err := b.requests(mode, source != SourceFloor)
	if err != nil {
		return err
	}
	client, err := load.NewClient(b.caPEM)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%s-%dn-%dp", source, mode, nodes, pods)
	b.progress("%s: starting %s", name, bin)
	p, err := startWebhook(bin, b.certDir, b.kubeconfig, string(mode), logPath(b.o.WorkDir, name))
	if err != nil {
		return err
	}
	run := Measurement{Source: source, Mode: string(mode), Nodes: nodes, Pods: pods}
	err = b.load(ctx, p, client, reqs, requests, &run)
	if stopErr := p.Stop(stopTimeout); err == nil {
		err = stopErr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	b.report.Runs = append(b.report.Runs, run)
	l := run.Load
	b.progress("%s: %d requests, %d failed, %.1f/s, p50 %v p90 %v p99 %v, ready after %v, peak RSS %d MiB",
		name, l.Requests, l.Failures, l.Throughput, l.Latency.P50, l.Latency.P90, l.Latency.P99,
		run.Ready.Round(time.Millisecond), run.WebhookMemory.Peak>>20)
	for _, f := range l.Failed {
		b.progress("%s: FAILED %s", name, f)
	}
	return nil
}

// cpuTimes are the CPU times of the webhook, kube-apiserver and etcd.
func (b *bench) cpuTimes(webhook int) ([3]time.Duration, error) {
	var out [3]time.Duration
	for i, pid := range []int{webhook, b.apiPID, b.etcdPID} {
		d, err := proc.Default.CPU(pid)
		if err != nil {
			return out, err
		}
		out[i] = d
	}
	return out, nil
}

func (b *bench) load(ctx context.Context, p *webhookProcess, client *http.Client, reqs []load.Request, requests int, run *Measurement) error {
	ready, err := p.waitReady(ctx, client)
	if err != nil {
		return err
	}
	run.Ready = ready
	if run.ReadyMemory, err = proc.Default.Memory(p.PID()); err != nil {
		return err
	}
	before, err := b.cpuTimes(p.PID())
	if err != nil {
		return err
	}
	run.Load, err = load.Run(ctx, load.Options{
		URL:         "https://" + p.addr + "/mutate",
		Client:      client,
		Concurrency: b.o.Concurrency,
		Requests:    requests,
		Warmup:      b.o.Concurrency,
	}, reqs)
	if err != nil {
		return err
	}
	after, err := b.cpuTimes(p.PID())
	if err != nil {
		return err
	}
	run.Sent = requests + b.o.Concurrency
	run.WebhookCPU, run.APIServerCPU, run.EtcdCPU = after[0]-before[0], after[1]-before[1], after[2]-before[2]
	run.WebhookMemory, err = proc.Default.Memory(p.PID())
	return err
}
