package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// hangTimeout only protects against hangs; every wait polls a condition.
const hangTimeout = 90 * time.Second

var (
	buildOnce sync.Once
	binDir    string
	binary    string
	buildErr  error
)

// TestMain removes the binary buildBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary builds this command once per test binary run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		var err error
		if binDir, err = os.MkdirTemp("", "device-plugin-bin"); err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(binDir, "device-plugin")
		out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// process is the agent binary running.
type process struct {
	cmd  *exec.Cmd
	logs *os.File
	done chan struct{}
}

func startProcess(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	logs, err := os.CreateTemp(t.TempDir(), "agent-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Env = append(os.Environ(), "NODE_NAME=", "MIGFLEX_AGENT_NODE_NAME=", "KUBECONFIG=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			out, _ := os.ReadFile(logs.Name())
			t.Logf("agent log %s:\n%s", logs.Name(), tail(string(out), 6000))
		}
	})
	return p
}

func (p *process) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil { // SIGKILL: no cleanup, no rollback
		t.Fatal(err)
	}
	<-p.done
}

func (p *process) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(hangTimeout):
		t.Fatal("the agent did not stop on SIGINT")
	}
	return p.cmd.ProcessState.ExitCode()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// simInstances reads the simulator's persisted state as another process
// sees it: the number of GPU instances per GPU.
func simInstances(t *testing.T, cfg sim.Config) []int {
	t.Helper()
	ro := cfg
	ro.ReadOnly = true
	lib, err := sim.New(ro)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	var out []int
	for _, g := range lib.Snapshot() {
		out = append(out, len(g.Instances))
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestAgentKilledMidApplyConverges runs the real binary on a persisted
// simulator that holds MIG changes after the first few, SIGKILLs it half way
// through a reconfiguration, starts it again and checks that the second
// process finishes the layout from what NVML reports.
func TestAgentKilledMidApplyConverges(t *testing.T) {
	restCfg := testenv.Start(t)
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	kubeconfig := testutil.WriteKubeconfig(t, restCfg)

	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	simConfig := filepath.Join(dir, "sim.yaml")
	// The simulator lets the first holdAfter MIG changes through and holds
	// the others until the release file exists: the first process cannot
	// finish the layout (2 MIG mode changes, 14 GPU and compute instances),
	// however fast or loaded the machine is.
	release := filepath.Join(dir, "release")
	const holdAfter = 9
	if err := os.WriteFile(simConfig, []byte(fmt.Sprintf("version: v1\ngpus:\n- {model: H100-SXM5-80GB, count: 2}\nstateDir: %s\nholdFile: %s\nholdAfter: %d\n", stateDir, release, holdAfter)), 0o644); err != nil {
		t.Fatal(err)
	}
	simCfg := sim.Config{GPUs: []sim.GPUSpec{{Model: "H100-SXM5-80GB", Count: 2}}, StateDir: stateDir, UUIDSeed: "kill-node"}

	pluginDir := testutil.SocketDir(t)
	kubelet, err := kubeletstub.Start(pluginDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	podres := podresourcestest.Start(t)

	const nodeName = "kill-node"
	const allSeven = "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 7}\n"
	ctx := context.Background()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: nodeName, Annotations: map[string]string{nodeinfo.AnnotationMigConfig: allSeven},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	metricsAddr := freeAddr(t)
	args := []string{
		"--node-name", nodeName, "--kubeconfig", kubeconfig,
		"--nvml-backend", "simulated", "--sim-config", simConfig,
		"--device-plugin-dir", pluginDir, "--pod-resources-socket", podres.Socket,
		"--metrics-addr", metricsAddr, "--retry-interval", "100ms",
	}

	first := startProcess(t, bin, args...)
	// Kill once GPU 0 is partly done; the hold keeps the apply from
	// finishing first.
	deadline := time.Now().Add(hangTimeout)
	for {
		n := simInstances(t, simCfg)
		total := 0
		for _, c := range n {
			total += c
		}
		if total >= 3 && total < 14 {
			break
		}
		if total == 14 {
			t.Fatalf("the apply finished before the kill (instances %v); the hold did not hold", n)
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never started applying")
		}
		time.Sleep(10 * time.Millisecond) // polling the state file, which nothing signals
	}
	first.kill(t)
	partial := simInstances(t, simCfg)
	t.Logf("killed with instances per GPU %v", partial)
	if partial[0]+partial[1] < 3 || partial[0]+partial[1] >= 14 {
		t.Fatalf("instances %v after the kill: not mid-apply", partial)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil { // the second process is not held
		t.Fatal(err)
	}
	second := startProcess(t, bin, args...)
	// The agent reports success once the Node's allocatable shows the
	// layout: the kubelet's part, which the stand-in plays here.
	pubCtx, stopPub := context.WithCancel(ctx)
	pubDone := make(chan error, 1)
	go func() { pubDone <- kubelet.PublishNodeStatus(pubCtx, client, nodeName, 0) }()
	defer func() {
		stopPub()
		if err := <-pubDone; err != nil {
			t.Error(err)
		}
	}()
	testutil.Eventually(t, "state success", func() bool {
		n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil && n.Labels[nodeinfo.LabelMigConfigState] == nodeinfo.StateSuccess
	})
	if diff := cmp.Diff([]int{7, 7}, simInstances(t, simCfg)); diff != "" {
		t.Errorf("instances per GPU (-want +got):\n%s", diff)
	}
	waitCtx, cancel := context.WithTimeout(ctx, hangTimeout)
	defer cancel()
	if st, err := kubelet.Wait(waitCtx, func(st kubeletstub.State) bool {
		p, ok := st.Plugins["nvidia.com/mig-1g.10gb"]
		return ok && p.Connected && len(p.Devices) == 14
	}); err != nil {
		t.Errorf("the kubelet stand-in never saw 14 1g.10gb devices: %v (%+v)", err, st.Plugins)
	}
	// HTTPS with a certificate of its own; /healthz for the kubelet's
	// probes, /metrics only with a token (internal/platform/metricsserver).
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/metrics": http.StatusUnauthorized} {
		resp, err := https.Get("https://" + metricsAddr + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %s, want %d", path, resp.Status, want)
		}
	}
	if code := second.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGINT, want 0", code)
	}
}
