package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/migflex/migflex/internal/agent"
	"github.com/migflex/migflex/internal/deviceplugin"
	"github.com/migflex/migflex/internal/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/dra/cdi"
	"github.com/migflex/migflex/internal/health"
	"github.com/migflex/migflex/internal/nodeagent"
	"github.com/migflex/migflex/internal/nodeinfo"
	"github.com/migflex/migflex/internal/nvmlbackend"
	"github.com/migflex/migflex/internal/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/podresources"
	"github.com/migflex/migflex/internal/podresources/podresourcestest"
	"github.com/migflex/migflex/internal/testenv"
	"github.com/migflex/migflex/internal/testutil"
)

func TestParseAgentFlags(t *testing.T) {
	defaults := func(c nodeagent.Config) nodeagent.Config {
		c.NVML.Backend = nvmlbackend.BackendAuto
		c.PluginDir = deviceplugin.DefaultPluginDir
		c.PodResourcesSocket = podresources.DefaultSocket
		c.Serving, c.CDIDir = nodeagent.ServingDevicePlugin, cdi.DefaultDir
		c.MigStrategy = "mixed"
		c.DeviceListStrategy = "envvar"
		c.AllocationPolicy = "packed"
		c.HostRoot = "/"
		c.DriverRoot = "/"
		c.HealthQuietPeriod = health.DefaultQuietPeriod
		c.HealthIgnoredXids = "13,31,43,45,68,109"
		c.BusyPolicy = "wait"
		c.MetricsAddr = agent.DefaultMetricsAddr
		c.RetryInterval = agent.DefaultRetryInterval
		c.ResyncInterval = agent.DefaultResyncInterval
		c.AllocatableTimeout = agent.DefaultAllocatableTimeout
		c.InUseInterval = agent.DefaultInUseInterval
		c.PublishAllocatable = true
		c.KubeAPIQPS, c.KubeAPIBurst = 20, 40
		return c
	}
	everything := nodeagent.Config{
		NodeName: "n2", NVML: nvmlbackend.Options{Backend: "simulated", SimConfig: "/etc/sim.yaml"}, PluginDir: "/dp", PodResourcesSocket: "/pr.sock", MigStrategy: "single",
		DeviceListStrategy: "cdi-cri", AllocationPolicy: "distributed", HostRoot: "/host", DriverRoot: "/run/nvidia/driver",
		DisableHealthChecks: "all", HealthIgnoredXids: "79,48", HealthQuietPeriod: time.Minute, ConfigFile: "/cfg/config.yaml", BusyPolicy: "evict",
		MetricsAddr: ":9999", MetricsCertDir: "/certs", RetryInterval: 3 * time.Second, ResyncInterval: time.Hour, InUseInterval: 5 * time.Second,
		KubeAPIQPS: 2.5, KubeAPIBurst: 5, Serving: nodeagent.ServingDRA, CDIDir: "/run/cdi",
	}
	// --in-use-interval came after MIGFLEX_AGENT_*: it has no older name.
	legacy := everything
	legacy.InUseInterval = agent.DefaultInUseInterval
	legacy.PublishAllocatable = true
	legacy.MetricsCertDir = ""
	legacy.Serving, legacy.CDIDir = nodeagent.ServingDevicePlugin, cdi.DefaultDir
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		want     nodeagent.Config
		wantCode int
		wantErr  string
	}{
		{
			name: "defaults", args: []string{"--node-name", "n1"},
			want: defaults(nodeagent.Config{NodeName: "n1"}), wantCode: -1,
		},
		{
			name: "environment twins",
			env: map[string]string{
				"MIGFLEX_AGENT_NODE_NAME": "n2", "MIGFLEX_AGENT_NVML_BACKEND": "simulated", "MIGFLEX_AGENT_SIM_CONFIG": "/etc/sim.yaml",
				"MIGFLEX_AGENT_DEVICE_PLUGIN_DIR": "/dp", "MIGFLEX_AGENT_POD_RESOURCES_SOCKET": "/pr.sock", "MIGFLEX_AGENT_MIG_STRATEGY": "single",
				"MIGFLEX_AGENT_DEVICE_LIST_STRATEGY": "cdi-cri", "MIGFLEX_AGENT_ALLOCATION_POLICY": "distributed", "MIGFLEX_AGENT_HOST_ROOT": "/host",
				"MIGFLEX_AGENT_DRIVER_ROOT": "/run/nvidia/driver", "MIGFLEX_AGENT_DISABLE_HEALTH_CHECKS": "all", "MIGFLEX_AGENT_HEALTH_QUIET_PERIOD": "1m",
				"MIGFLEX_AGENT_HEALTH_IGNORED_XIDS": "79,48", "MIGFLEX_AGENT_CONFIG_FILE": "/cfg/config.yaml", "MIGFLEX_AGENT_BUSY_POLICY": "evict",
				"MIGFLEX_AGENT_METRICS_ADDR": ":9999", "MIGFLEX_AGENT_METRICS_CERT_DIR": "/certs", "MIGFLEX_AGENT_RETRY_INTERVAL": "3s", "MIGFLEX_AGENT_RESYNC_INTERVAL": "1h",
				"MIGFLEX_AGENT_ALLOCATABLE_TIMEOUT": "0s", "MIGFLEX_AGENT_IN_USE_INTERVAL": "5s", "MIGFLEX_AGENT_KUBE_API_QPS": "2.5", "MIGFLEX_AGENT_KUBE_API_BURST": "5",
				"MIGFLEX_AGENT_SERVING": "dra", "MIGFLEX_AGENT_CDI_DIR": "/run/cdi", "MIGFLEX_AGENT_PUBLISH_ALLOCATABLE": "false",
			},
			want:     everything,
			wantCode: -1,
		},
		{
			name: "the older names manifests and users set",
			env: map[string]string{
				"NODE_NAME": "n2", "NVML_BACKEND": "simulated", "SIM_CONFIG": "/etc/sim.yaml",
				"DEVICE_PLUGIN_DIR": "/dp", "POD_RESOURCES_SOCKET": "/pr.sock", "MIG_STRATEGY": "single",
				"DEVICE_LIST_STRATEGY": "cdi-cri", "ALLOCATION_POLICY": "distributed", "HOST_ROOT": "/host",
				"NVIDIA_DRIVER_ROOT": "/run/nvidia/driver", "DP_DISABLE_HEALTHCHECKS": "all", "HEALTH_QUIET_PERIOD": "1m", "HEALTH_IGNORED_XIDS": "79,48",
				"MIG_CONFIG_FILE": "/cfg/config.yaml", "BUSY_POLICY": "evict", "METRICS_ADDR": ":9999",
				"RETRY_INTERVAL": "3s", "RESYNC_INTERVAL": "1h", "ALLOCATABLE_TIMEOUT": "0s", "KUBE_API_QPS": "2.5", "KUBE_API_BURST": "5",
			},
			want:     legacy,
			wantCode: -1,
		},
		{
			name: "a flag wins over its environment twin",
			args: []string{"--node-name", "flag", "--busy-policy", "wait", "--metrics-addr", ""},
			env:  map[string]string{"NODE_NAME": "env", "MIGFLEX_AGENT_BUSY_POLICY": "evict", "METRICS_ADDR": ":1"},
			want: func() nodeagent.Config {
				c := defaults(nodeagent.Config{NodeName: "flag"})
				c.MetricsAddr = ""
				return c
			}(),
			wantCode: -1,
		},
		{
			name: "an empty HEALTH_IGNORED_XIDS ignores no Xid", env: map[string]string{"NODE_NAME": "n", "HEALTH_IGNORED_XIDS": ""},
			want: func() nodeagent.Config {
				c := defaults(nodeagent.Config{NodeName: "n"})
				c.HealthIgnoredXids = ""
				return c
			}(), wantCode: -1,
		},
		{
			name: "--health-ignored-xids wins over its twin", args: []string{"--node-name", "n", "--health-ignored-xids", "13"}, env: map[string]string{"HEALTH_IGNORED_XIDS": ""},
			want: func() nodeagent.Config {
				c := defaults(nodeagent.Config{NodeName: "n"})
				c.HealthIgnoredXids = "13"
				return c
			}(), wantCode: -1,
		},
		{
			name: "KUBECONFIG is not --kubeconfig: the loader reads it as a list", env: map[string]string{"NODE_NAME": "n", "KUBECONFIG": "/a:/b"},
			want: defaults(nodeagent.Config{NodeName: "n"}), wantCode: -1,
		},
		{
			name: "publishing the allocatable turned off", args: []string{"--node-name", "n", "--publish-allocatable=false"},
			want: func() nodeagent.Config {
				c := defaults(nodeagent.Config{NodeName: "n"})
				c.PublishAllocatable = false
				return c
			}(), wantCode: -1,
		},
		{name: "no node name", wantCode: 2, wantErr: "--node-name (env MIGFLEX_AGENT_NODE_NAME) is required"},
		{
			name: "relative pod-resources socket", args: []string{"--node-name", "n", "--pod-resources-socket", "kubelet.sock"}, wantCode: 2,
			wantErr: `--pod-resources-socket (env MIGFLEX_AGENT_POD_RESOURCES_SOCKET) must be an absolute path, got "kubelet.sock"`,
		},
		{
			name: "relative pod-resources socket in the environment", env: map[string]string{"NODE_NAME": "n", "POD_RESOURCES_SOCKET": "pod-resources/kubelet.sock"}, wantCode: 2,
			wantErr: `--pod-resources-socket (env MIGFLEX_AGENT_POD_RESOURCES_SOCKET) must be an absolute path, got "pod-resources/kubelet.sock"`,
		},
		{
			name: "empty pod-resources socket", args: []string{"--node-name", "n", "--pod-resources-socket", ""}, wantCode: 2,
			wantErr: `--pod-resources-socket (env MIGFLEX_AGENT_POD_RESOURCES_SOCKET) must be an absolute path, got ""`,
		},
		{
			name: "relative device-plugin dir", args: []string{"--node-name", "n", "--device-plugin-dir", "./device-plugins"}, wantCode: 2,
			wantErr: `--device-plugin-dir (env MIGFLEX_AGENT_DEVICE_PLUGIN_DIR) must be an absolute path, got "./device-plugins"`,
		},
		{
			name: "relative device-plugin dir in the environment", env: map[string]string{"NODE_NAME": "n", "DEVICE_PLUGIN_DIR": "dp"}, wantCode: 2,
			wantErr: `--device-plugin-dir (env MIGFLEX_AGENT_DEVICE_PLUGIN_DIR) must be an absolute path, got "dp"`,
		},
		{
			name: "API client limits as flags", args: []string{"--node-name", "n", "--kube-api-qps", "200", "--kube-api-burst", "400"},
			env: map[string]string{"KUBE_API_QPS": "1", "KUBE_API_BURST": "1"},
			want: func() nodeagent.Config {
				c := defaults(nodeagent.Config{NodeName: "n"})
				c.KubeAPIQPS, c.KubeAPIBurst = 200, 400
				return c
			}(), wantCode: -1,
		},
		{
			name: "no API requests at all", args: []string{"--node-name", "n", "--kube-api-qps", "0"}, wantCode: 2,
			wantErr: "--kube-api-qps (env MIGFLEX_AGENT_KUBE_API_QPS) must be above 0 and --kube-api-burst (env MIGFLEX_AGENT_KUBE_API_BURST) at least 1, got 0 and 40",
		},
		{name: "bad QPS in the environment", env: map[string]string{"NODE_NAME": "n", "KUBE_API_QPS": "fast"}, wantCode: 2, wantErr: `KUBE_API_QPS="fast"`},
		{
			name: "negative allocatable timeout", args: []string{"--node-name", "n", "--allocatable-timeout", "-1s"}, wantCode: 2,
			wantErr: "--allocatable-timeout (env MIGFLEX_AGENT_ALLOCATABLE_TIMEOUT) must be 0 (no wait) or more, got -1s",
		},
		{name: "bad duration in the environment", env: map[string]string{"NODE_NAME": "n", "RETRY_INTERVAL": "soon"}, wantCode: 2, wantErr: `RETRY_INTERVAL="soon"`},
		{name: "bad MIG strategy", args: []string{"--node-name", "n", "--mig-strategy", "both"}, wantCode: 2, wantErr: `unknown MIG strategy "both" (want one of mixed, single, none)`},
		{name: "bad busy policy in the environment", env: map[string]string{"NODE_NAME": "n", "BUSY_POLICY": "delete"}, wantCode: 2, wantErr: `BUSY_POLICY="delete": unknown busy policy "delete"`},
		{name: "stray argument", args: []string{"--node-name", "n", "extra"}, wantCode: 2, wantErr: `unexpected arguments ["extra"]`},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: 2, wantErr: "flag provided but not defined: -nope"},
		{name: "help", args: []string{"--help"}, wantCode: 0, wantErr: "usage: device-plugin [flags]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			got, code := parseAgentFlags(tc.args, lookup, &stderr)
			if code != tc.wantCode {
				t.Fatalf("code %d, want %d; stderr:\n%s", code, tc.wantCode, stderr.String())
			}
			if tc.wantErr != "" && !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantErr, stderr.String())
			}
			if code != -1 {
				return
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreUnexported(nvmlbackend.Options{})); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryFlagHasItsTwin: each flag's twin follows the convention, and the
// help names it; only --kubeconfig, whose variable is the loader's list,
// has none.
func TestEveryFlagHasItsTwin(t *testing.T) {
	var c nodeagent.Config
	f := agentFlags(&c)
	var help bytes.Buffer
	f.SetOutput(&help)
	f.PrintDefaults()
	for _, tw := range f.Twins() {
		want := "MIGFLEX_AGENT_" + strings.ToUpper(strings.ReplaceAll(tw.Flag, "-", "_"))
		if tw.Flag == "kubeconfig" {
			want = ""
		}
		if tw.Env != want {
			t.Errorf("--%s: twin %q, want %q", tw.Flag, tw.Env, want)
		}
		if want != "" && !strings.Contains(help.String(), want) {
			t.Errorf("--%s: the help does not name %s", tw.Flag, want)
		}
	}
	if len(f.Twins()) < 20 {
		t.Errorf("%d flags with twins, want every flag of the agent", len(f.Twins()))
	}
}

func TestRunAgentStartupErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad health switch", []string{"--kubeconfig", writeKubeconfig(t, &rest.Config{Host: "https://127.0.0.1:1"}), "--nvml-backend", "simulated", "--disable-health-checks", "79,x"}, "--disable-health-checks"},
		// Refused before the client and NVML are even set up.
		{"bad ignored Xids", []string{"--health-ignored-xids", "13,31,-1"}, `--health-ignored-xids: "13,31,-1": "-1" is not an Xid (a non-negative integer)`},
		{"no kubeconfig outside a cluster", nil, "in-cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			t.Setenv("KUBECONFIG", "")
			var stderr bytes.Buffer
			args := append([]string{"--node-name", "n", "--metrics-addr", ""}, tc.args...)
			if code := dispatch(args, io.Discard, &stderr); code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

func TestDispatchRunsTheAgentWithoutSubcommand(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("MIGFLEX_AGENT_NODE_NAME", "")
	var stderr bytes.Buffer
	if code := dispatch(nil, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--node-name") {
		t.Errorf("dispatch() = %d, stderr:\n%s", code, stderr.String())
	}
}

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

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
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
	kubeconfig := writeKubeconfig(t, restCfg)

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

	pluginDir, err := os.MkdirTemp("", "dp") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pluginDir) })
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
	// probes, /metrics only with a token (internal/metricsserver).
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
