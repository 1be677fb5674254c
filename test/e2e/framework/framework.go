// Package framework holds the helpers migflex's end-to-end tests share: a
// connection to the local cluster, per-test namespaces, pod builders for
// the test images, and waits on conditions.
package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/migflex/migflex/test/apiwarn"
)

const (
	// TestboxImage and PauseImage are built by hack/cluster/images.sh and
	// imported by up.sh; there is no registry, so pods must never pull.
	TestboxImage = "lc.local/testbox:1"
	// MigflexImage holds /device-plugin and /webhook from bin/ (make build).
	MigflexImage = "lc.local/migflex:e2e"

	// APIServerHost and APIServerPort are where a hostNetwork pod reaches the
	// API server: ClusterIPs are not routed on this machine (no kube-proxy).
	APIServerHost = "127.0.0.1"
	APIServerPort = "6443"
	// EnvPodAPIServerHost is where a pod on the pod network reaches the API
	// server; e2e.sh sets it from hack/cluster/lib.sh's POD_GATEWAY.
	EnvPodAPIServerHost = "POD_APISERVER_HOST"
	// defaultPodAPIServerHost is lib.sh's default POD_GATEWAY.
	defaultPodAPIServerHost = "10.88.0.1"

	// Poll is how often waits re-check their condition.
	Poll = 250 * time.Millisecond
	// Timeout bounds a single wait. It is hang protection, not a performance
	// assertion: the slowest step here (a pod start on a loaded 2-core
	// machine) takes seconds.
	Timeout = 3 * time.Minute

	// EnvKeep keeps test namespaces after the test when set to 1, for
	// debugging with kubectl.
	EnvKeep = "MIGFLEX_E2E_KEEP"
	// EnvKubectl names the kubectl binary; e2e.sh sets it to the pinned one.
	EnvKubectl = "KUBECTL"
	// EnvCDIDir names the directory node 1's containerd reads CDI specs
	// from (hack/cluster/lib.sh's CDI_DIR, under CLUSTER_DIR).
	EnvCDIDir = "MIGFLEX_CDI_DIR"
	// EnvNodes names the cluster's nodes, node 1 first, space-separated;
	// EnvClusterDir the cluster's state directory (hack/cluster/lib.sh's
	// CLUSTER_DIR), where the nodes after the first keep their files. up.sh
	// writes both to the cluster's env file.
	EnvNodes      = "MIGFLEX_NODES"
	EnvClusterDir = "MIGFLEX_CLUSTER_DIR"
)

// ClientQPS and ClientBurst are the suite's client-side rate limit. With
// client-go's default (5 requests/s, burst 10) the soak's checker, which
// reads every node each second while the convergence poll reads them too,
// was throttled past its deadlines (docs/BENCHMARKS.md, "The soak"); the
// suite is the API server's only heavy client here, and the server's
// priority and fairness still guards it.
const (
	ClientQPS   = 50
	ClientBurst = 100
)

// Cluster is a connection to the local test cluster.
type Cluster struct {
	Config     *rest.Config
	Client     kubernetes.Interface
	Kubeconfig string
	// NodeName is the node the node-scoped helpers (Node, TestboxPod,
	// AgentPod, RestartKubelet, ...) address: node 1 on the Cluster
	// FromEnv returns, another on one from OnNode.
	NodeName string
	// Nodes are the cluster's nodes as the harness runs them, node 1 (this
	// host) first.
	Nodes []LocalNode
	// Minor is the API server's Kubernetes minor (35 for v1.35.4), for the
	// few checks that differ by minor (hack/cluster/k8s/minors).
	Minor int
	// GitVersion is the API server's version, e.g. v1.37.2.
	GitVersion string
	// Warnings collects every warning the API server sent the suite: those
	// of Client and those kubectl and helm printed (Kubectl, Helm).
	Warnings *apiwarn.Collector
}

// FromEnv connects to the cluster named by $KUBECONFIG and finds its
// nodes: those $MIGFLEX_NODES names, which must be all the API server has;
// without it, the one node the API server has.
func FromEnv(ctx context.Context) (*Cluster, error) {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		return nil, errors.New("KUBECONFIG is unset: run the suite with `make test-e2e` or hack/cluster/e2e.sh, or export the KUBECONFIG hack/cluster/up.sh printed")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	warnings := &apiwarn.Collector{Source: "client-go"}
	cfg.WarningHandlerWithContext = warnings
	cfg.QPS, cfg.Burst = ClientQPS, ClientBurst
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("the API server's version through %s: %w", path, err)
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil {
		return nil, fmt.Errorf("the API server's minor version %q: %w", v.Minor, err)
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes through %s: %w", path, err)
	}
	var have []string
	for _, n := range list.Items {
		have = append(have, n.Name)
	}
	nodes, err := localNodes(strings.Fields(os.Getenv(EnvNodes)), have, os.Getenv(EnvClusterDir), os.Getenv(EnvCDIDir))
	if err != nil {
		return nil, err
	}
	return &Cluster{Config: cfg, Client: cs, Kubeconfig: path, NodeName: nodes[0].Name, Nodes: nodes,
		Minor: minor, GitVersion: v.GitVersion, Warnings: warnings}, nil
}

// WaitFor polls cond until it returns true, returns an error, or timeout
// passes (or ctx ends). The returned error names what was awaited and the
// last condition error.
func WaitFor(ctx context.Context, what string, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, Poll, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			// Transient API errors: keep polling. The poll's own deadline
			// cutting the last call short is no finding: keep the one
			// before, which says what was missing.
			KeepFinding(&last, err)
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		if last != nil {
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, err, last)
		}
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// Namespace creates a namespace for t, waits until its default
// ServiceAccount exists (pods cannot be admitted before), and deletes it
// when t ends unless MIGFLEX_E2E_KEEP=1.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ctx := t.Context()
	base := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(base) > 40 {
		base = base[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   strings.Trim(base, "-") + "-" + rand.String(5),
		Labels: map[string]string{"e2e.migflex.io/test": "true"},
	}}
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		if os.Getenv(EnvKeep) == "1" {
			t.Logf("keeping namespace %s (%s=1)", ns.Name, EnvKeep)
			return
		}
		// t.Context is done during cleanup.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := c.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", ns.Name, err)
		}
	})
	err = WaitFor(ctx, "the default ServiceAccount in "+ns.Name, Timeout, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// TestboxPod returns a run-once pod on the node running testbox with args
// (env, sleep N, ls DIR, cat FILE, whoami).
func (c *Cluster) TestboxPod(namespace, name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:      c.NodeName,
			RestartPolicy: corev1.RestartPolicyNever,
			// Nothing to wait for on delete: the test images exit on SIGTERM.
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           TestboxImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
			}},
		},
	}
}

// UseHostNetworkAPIServer makes pod an in-cluster API client that works
// here: on the host network, with the API server at 127.0.0.1:6443 for
// every container.
func UseHostNetworkAPIServer(pod *corev1.Pod) {
	pod.Spec.HostNetwork = true
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env,
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: APIServerHost},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: APIServerPort},
		)
	}
}

// PodAPIServerHost is the address at which a pod on the pod network (not
// hostNetwork) reaches the API server: the host's address on the cluster's
// bridge, where up.sh lets the API server answer. In a cluster with
// kube-proxy that is the kubernetes Service; here nothing routes it.
func PodAPIServerHost() string {
	if h := os.Getenv(EnvPodAPIServerHost); h != "" {
		return h
	}
	return defaultPodAPIServerHost
}

// CreatePod creates pod and deletes it (without waiting) when t ends.
func (c *Cluster) CreatePod(t testing.TB, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := c.Client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := c.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting pod %s/%s: %v", pod.Namespace, pod.Name, err)
		}
	})
	return out
}

// WaitForPodPhase waits until the pod reaches one of phases and returns it.
// A pod that reaches another terminal phase fails the wait at once, with
// its container states for the log.
func (c *Cluster) WaitForPodPhase(ctx context.Context, namespace, name string, phases ...corev1.PodPhase) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := WaitFor(ctx, fmt.Sprintf("pod %s/%s to be %v", namespace, name, phases), Timeout, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		// Failed and Succeeded are final: no need to wait out Timeout.
		return slices.Contains(phases, p.Status.Phase) || terminal(p.Status.Phase), nil
	})
	if err == nil && !slices.Contains(phases, pod.Status.Phase) {
		return pod, fmt.Errorf("pod %s/%s is %s, which it cannot leave, not %v: reason %q, message %q, containers %s",
			namespace, name, pod.Status.Phase, phases, pod.Status.Reason, pod.Status.Message, containerStates(pod))
	}
	if err == nil {
		return pod, nil
	}
	if pod != nil {
		return pod, fmt.Errorf("%w; last phase %s, reason %q, message %q, containers %s",
			err, pod.Status.Phase, pod.Status.Reason, pod.Status.Message, containerStates(pod))
	}
	return nil, err
}

// WaitForPodSucceeded waits for a run-once pod to exit 0, failing early if it
// fails.
func (c *Cluster) WaitForPodSucceeded(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod, err := c.WaitForPodPhase(ctx, namespace, name, corev1.PodSucceeded, corev1.PodFailed)
	if err != nil {
		return pod, err
	}
	if pod.Status.Phase != corev1.PodSucceeded {
		logs, _ := c.PodLogs(ctx, namespace, name, "")
		return pod, fmt.Errorf("pod %s/%s failed: containers %s; logs:\n%s", namespace, name, containerStates(pod), logs)
	}
	return pod, nil
}

// terminal says whether a pod in phase ph stays in it.
func terminal(ph corev1.PodPhase) bool {
	return ph == corev1.PodFailed || ph == corev1.PodSucceeded
}

func containerStates(pod *corev1.Pod) string {
	var b strings.Builder
	for _, s := range pod.Status.ContainerStatuses {
		switch {
		case s.State.Waiting != nil:
			fmt.Fprintf(&b, "[%s waiting %s: %s]", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
		case s.State.Running != nil:
			fmt.Fprintf(&b, "[%s running]", s.Name)
		case s.State.Terminated != nil:
			fmt.Fprintf(&b, "[%s exited %d %s: %s]", s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Reason, s.State.Terminated.Message)
		}
	}
	if b.Len() == 0 {
		return "[none]"
	}
	return b.String()
}

// PodLogs returns a container's log (container "" means the only one),
// through the API server's pods/log path to the kubelet, as kubectl logs.
func (c *Cluster) PodLogs(ctx context.Context, namespace, name, container string) (string, error) {
	b, err := c.Client.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of %s/%s: %w", namespace, name, err)
	}
	return string(b), nil
}

// Kubectl runs the pinned kubectl against the cluster and returns its
// stdout; the error carries stderr. The API server's warnings it printed
// go to c.Warnings.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	bin, err := kubectlPath()
	if err != nil {
		return "", err
	}
	return c.runTool(ctx, "kubectl", bin, args)
}

// runTool runs the client bin (name, for messages) with the cluster's
// kubeconfig and args, and returns its stdout; the error carries stderr.
// What it printed on stderr goes to c.Warnings (the API server's
// warnings among it).
func (c *Cluster) runTool(ctx context.Context, name, bin string, args []string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if c.Warnings != nil {
		c.Warnings.AddOutput(name+" "+strings.Join(args, " "), stderr.String())
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// kubectlPath is $KUBECTL, else the one kubectl hack/cluster/build.sh built
// under the module's .cache. The host's kubectl is never used: its version
// is unknown and a CI machine may have none.
func kubectlPath() (string, error) {
	if p := os.Getenv(EnvKubectl); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		matches, _ := filepath.Glob(filepath.Join(dir, ".cache", "k8s", "*", "bin", "kubectl"))
		if len(matches) == 1 {
			return matches[0], nil
		}
		if len(matches) > 1 {
			return "", fmt.Errorf("several kubectl builds %v: set %s", matches, EnvKubectl)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no kubectl: set %s or run hack/cluster/build.sh", EnvKubectl)
		}
		dir = parent
	}
}

func ptr[T any](v T) *T { return &v }

// CDIDir is where the cluster's containerd reads CDI specs from
// ($MIGFLEX_CDI_DIR, which e2e.sh exports from the cluster's env file), or
// an error saying how to get it.
func CDIDir() (string, error) {
	if d := os.Getenv(EnvCDIDir); d != "" {
		return d, nil
	}
	return "", fmt.Errorf("%s is unset: run the suite with hack/cluster/e2e.sh, or source $CLUSTER_DIR/env from hack/cluster/up.sh", EnvCDIDir)
}
