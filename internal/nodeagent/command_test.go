package nodeagent

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/testsupport/testutil"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/internal/nodeagent/agent"
	"github.com/migflex/migflex/internal/nodeagent/cdi"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/health"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend"
	"github.com/migflex/migflex/internal/platform/cli"
)

func TestParseAgentFlags(t *testing.T) {
	defaults := func(c Config) Config {
		c.NVML.Backend = nvmlbackend.BackendAuto
		c.PluginDir = deviceplugin.DefaultPluginDir
		c.PodResourcesSocket = podresources.DefaultSocket
		c.Serving, c.CDIDir, c.DRAMode = ServingDevicePlugin, cdi.DefaultDir, "static"
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
		c.NVMLCallTimeout = agent.DefaultNVMLCallTimeout
		c.PublishAllocatable = true
		c.KubeAPIQPS, c.KubeAPIBurst = 20, 40
		c.MPSRoot = deviceplugin.DefaultMPSRoot
		return c
	}
	everything := Config{
		NodeName: "n2", NVML: nvmlbackend.Options{Backend: "simulated", SimConfig: "/etc/sim.yaml"}, PluginDir: "/dp", PodResourcesSocket: "/pr.sock", MigStrategy: "single",
		DeviceListStrategy: "cdi-cri", AllocationPolicy: "distributed", HostRoot: "/host", DriverRoot: "/run/nvidia/driver",
		DisableHealthChecks: "all", HealthIgnoredXids: "79,48", HealthQuietPeriod: time.Minute, ConfigFile: "/cfg/config.yaml", BusyPolicy: "evict",
		MetricsAddr: ":9999", MetricsCertDir: "/certs", RetryInterval: 3 * time.Second, ResyncInterval: time.Hour, InUseInterval: 5 * time.Second,
		NVMLCallTimeout: 30 * time.Second, KubeAPIQPS: 2.5, KubeAPIBurst: 5, Serving: ServingDRA, CDIDir: "/run/cdi", DRAMode: "dynamic",
		SharingConfigDefault: "small", MPSRoot: "/mps",
	}
	// --in-use-interval and --nvml-call-timeout came after
	// MIGFLEX_AGENT_*: they have no older name.
	legacy := everything
	legacy.InUseInterval = agent.DefaultInUseInterval
	legacy.NVMLCallTimeout = agent.DefaultNVMLCallTimeout
	legacy.PublishAllocatable = true
	legacy.MetricsCertDir = ""
	legacy.Serving, legacy.CDIDir, legacy.DRAMode = ServingDevicePlugin, cdi.DefaultDir, "static"
	legacy.SharingConfigDefault, legacy.MPSRoot = "", deviceplugin.DefaultMPSRoot
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		want     Config
		wantCode int
		wantErr  string
	}{
		{
			name: "defaults", args: []string{"--node-name", "n1"},
			want: defaults(Config{NodeName: "n1"}), wantCode: -1,
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
				"MIGFLEX_AGENT_ALLOCATABLE_TIMEOUT": "0s", "MIGFLEX_AGENT_IN_USE_INTERVAL": "5s", "MIGFLEX_AGENT_NVML_CALL_TIMEOUT": "30s", "MIGFLEX_AGENT_KUBE_API_QPS": "2.5", "MIGFLEX_AGENT_KUBE_API_BURST": "5",
				"MIGFLEX_AGENT_SERVING": "dra", "MIGFLEX_AGENT_CDI_DIR": "/run/cdi", "MIGFLEX_AGENT_PUBLISH_ALLOCATABLE": "false",
				"MIGFLEX_AGENT_DRA_MODE": "dynamic", "MIGFLEX_AGENT_SHARING_CONFIG_DEFAULT": "small", "MIGFLEX_AGENT_MPS_ROOT": "/mps",
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
			want: func() Config {
				c := defaults(Config{NodeName: "flag"})
				c.MetricsAddr = ""
				return c
			}(),
			wantCode: -1,
		},
		{
			name: "an empty HEALTH_IGNORED_XIDS ignores no Xid", env: map[string]string{"NODE_NAME": "n", "HEALTH_IGNORED_XIDS": ""},
			want: func() Config {
				c := defaults(Config{NodeName: "n"})
				c.HealthIgnoredXids = ""
				return c
			}(), wantCode: -1,
		},
		{
			name: "--health-ignored-xids wins over its twin", args: []string{"--node-name", "n", "--health-ignored-xids", "13"}, env: map[string]string{"HEALTH_IGNORED_XIDS": ""},
			want: func() Config {
				c := defaults(Config{NodeName: "n"})
				c.HealthIgnoredXids = "13"
				return c
			}(), wantCode: -1,
		},
		{
			name: "KUBECONFIG is not --kubeconfig: the loader reads it as a list", env: map[string]string{"NODE_NAME": "n", "KUBECONFIG": "/a:/b"},
			want: defaults(Config{NodeName: "n"}), wantCode: -1,
		},
		{
			name: "publishing the allocatable turned off", args: []string{"--node-name", "n", "--publish-allocatable=false"},
			want: func() Config {
				c := defaults(Config{NodeName: "n"})
				c.PublishAllocatable = false
				return c
			}(), wantCode: -1,
		},
		{
			name: "a zero NVML call timeout", args: []string{"--node-name", "n", "--nvml-call-timeout", "0s"}, wantCode: 2,
			wantErr: `--nvml-call-timeout (env MIGFLEX_AGENT_NVML_CALL_TIMEOUT) must be above 0, got 0s`,
		},
		{
			name: "sharing through the device plugin", args: []string{"--node-name", "n", "--sharing-config", "/etc/sharing"},
			want: func() Config {
				c := defaults(Config{NodeName: "n"})
				c.SharingConfig = "/etc/sharing"
				return c
			}(), wantCode: -1,
		},
		{
			name: "sharing is not served through DRA", args: []string{"--node-name", "n", "--sharing-config", "/etc/sharing", "--serving", "dra"}, wantCode: 2,
			wantErr: "--sharing-config (env MIGFLEX_AGENT_SHARING_CONFIG) is served through the device plugin only",
		},
		{
			name: "relative MPS root", args: []string{"--node-name", "n", "--mps-root", "mps"}, wantCode: 2,
			wantErr: `--mps-root (env MIGFLEX_AGENT_MPS_ROOT) must be an absolute path, got "mps"`,
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
			want: func() Config {
				c := defaults(Config{NodeName: "n"})
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
			got, code := parseFlags(tc.args, lookup, &stderr)
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
	var c Config
	f := flags(&c)
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
		{"bad health switch", []string{"--kubeconfig", testutil.WriteKubeconfig(t, &rest.Config{Host: "https://127.0.0.1:1"}), "--nvml-backend", "simulated", "--disable-health-checks", "79,x"}, "--disable-health-checks"},
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
			if code := Main(context.Background(), args, cli.Env{LookupEnv: os.LookupEnv, Stdout: io.Discard, Stderr: &stderr}); code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

func TestMainRunsTheAgentWithoutSubcommand(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("MIGFLEX_AGENT_NODE_NAME", "")
	var stderr bytes.Buffer
	if code := Main(context.Background(), nil, cli.Env{LookupEnv: os.LookupEnv, Stdout: io.Discard, Stderr: &stderr}); code != 2 || !strings.Contains(stderr.String(), "--node-name") {
		t.Errorf("Main() = %d, stderr:\n%s", code, stderr.String())
	}
}
