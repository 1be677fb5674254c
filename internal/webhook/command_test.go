package webhook

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientfeatures "k8s.io/client-go/features"

	"github.com/migflex/migflex/internal/platform/certwatch/certtest"
)

func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func parseFlags(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	var c Config
	f := flags(&c)
	f.SetOutput(io.Discard)
	return c, f.Parse(args, lookupEnv)
}

func TestParseFlags(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		want    Config
		wantErr string
	}{
		"defaults": {
			want: Config{Listen: ":8443", CertDir: "/etc/webhook/certs", MetricsAddr: ":9125", Mode: "existence", OnUnsatisfiable: "deny", OnInsufficientCount: "allow", MaxRequestBytes: 8 << 20, MaxInflightBytes: 8 << 20, PlannerManualHold: 10 * time.Minute, PlannerCooldown: 2 * time.Minute},
		},
		"flags": {
			args: []string{"--listen=:9443", "--tls-cert-dir=/certs", "--metrics-addr=", "--metrics-cert-dir=/m", "--kubeconfig=/kc", "--config=/p.yaml", "--mode=capacity", "--on-unsatisfiable=allow", "--on-insufficient-count=deny", "--max-request-bytes=1024", "--max-inflight-bytes=4096", "--resync=1m", "--reuse-port", "--reshape-first", "--planner-manual-hold=1m", "--planner-cooldown=30s"},
			want: Config{Listen: ":9443", CertDir: "/certs", MetricsCertDir: "/m", Kubeconfig: "/kc", PolicyFile: "/p.yaml", Mode: "capacity", OnUnsatisfiable: "allow", OnInsufficientCount: "deny", MaxRequestBytes: 1024, MaxInflightBytes: 4096, Resync: time.Minute, ReusePort: true, ReshapeFirst: true, PlannerManualHold: time.Minute, PlannerCooldown: 30 * time.Second},
		},
		"environment twins": {
			env: map[string]string{
				"MIGFLEX_WEBHOOK_LISTEN": ":7443", "MIGFLEX_WEBHOOK_TLS_CERT_DIR": "/s", "MIGFLEX_WEBHOOK_METRICS_ADDR": ":7125", "MIGFLEX_WEBHOOK_CONFIG": "/c",
				"MIGFLEX_WEBHOOK_MODE": "capacity", "MIGFLEX_WEBHOOK_ON_UNSATISFIABLE": "allow", "MIGFLEX_WEBHOOK_MAX_REQUEST_BYTES": "99",
				"MIGFLEX_WEBHOOK_ON_INSUFFICIENT_COUNT": "deny", "MIGFLEX_WEBHOOK_MAX_INFLIGHT_BYTES": "77", "MIGFLEX_WEBHOOK_REUSE_PORT": "true",
				"MIGFLEX_WEBHOOK_RESHAPE_FIRST": "true", "MIGFLEX_WEBHOOK_PLANNER_MANUAL_HOLD": "30s",
			},
			want: Config{Listen: ":7443", CertDir: "/s", MetricsAddr: ":7125", PolicyFile: "/c", Mode: "capacity", OnUnsatisfiable: "allow", OnInsufficientCount: "deny", MaxRequestBytes: 99, MaxInflightBytes: 77, ReusePort: true, ReshapeFirst: true, PlannerManualHold: 30 * time.Second, PlannerCooldown: 2 * time.Minute},
		},
		"a flag beats its environment twin": {
			args: []string{"--mode=existence"},
			env:  map[string]string{"MIGFLEX_WEBHOOK_MODE": "capacity"},
			want: Config{Listen: ":8443", CertDir: "/etc/webhook/certs", MetricsAddr: ":9125", Mode: "existence", OnUnsatisfiable: "deny", OnInsufficientCount: "allow", MaxRequestBytes: 8 << 20, MaxInflightBytes: 8 << 20, PlannerManualHold: 10 * time.Minute, PlannerCooldown: 2 * time.Minute},
		},
		"bad environment value": {
			env:     map[string]string{"MIGFLEX_WEBHOOK_MAX_REQUEST_BYTES": "lots"},
			wantErr: `MIGFLEX_WEBHOOK_MAX_REQUEST_BYTES="lots"`,
		},
		"bad mode":       {args: []string{"--mode=free"}, wantErr: `unknown mode "free" (want one of existence, capacity)`},
		"bad action":     {env: map[string]string{"MIGFLEX_WEBHOOK_ON_UNSATISFIABLE": "ignore"}, wantErr: `MIGFLEX_WEBHOOK_ON_UNSATISFIABLE="ignore": unknown action "ignore"`},
		"unknown flag":   {args: []string{"--nope"}, wantErr: "flag provided but not defined: -nope"},
		"stray argument": {args: []string{"serve"}, wantErr: `unexpected arguments ["serve"]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseFlags(tc.args, env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunFailsClearly(t *testing.T) {
	dir := t.TempDir()
	serving := t.TempDir()
	if _, err := certtest.WriteServing(serving); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		"bad mode":                {args: []string{"--mode=x"}, wantErr: `unknown mode "x"`},
		"missing kubeconfig":      {args: []string{"--kubeconfig=" + filepath.Join(dir, "kc")}, wantErr: "client configuration for the API server"},
		"missing KUBECONFIG":      {env: map[string]string{"KUBECONFIG": filepath.Join(dir, "kc")}, wantErr: "client configuration for the API server"},
		"certgen: stray argument": {args: []string{"certgen", "extra"}, wantErr: `unexpected arguments ["extra"]`},
		"certgen: missing kubeconfig": {
			args:    []string{"certgen", "--kubeconfig=" + filepath.Join(dir, "kc")},
			wantErr: "client configuration for the API server",
		},
		"missing certificate": {
			args:    []string{"--tls-cert-dir=" + dir, "--listen=127.0.0.1:0"},
			env:     map[string]string{"KUBECONFIG": writeKubeconfig(t, dir)},
			wantErr: "reading certificate",
		},
		"missing metrics certificate": {
			args:    []string{"--tls-cert-dir=" + serving, "--listen=127.0.0.1:0", "--metrics-addr=127.0.0.1:0", "--metrics-cert-dir=" + dir},
			env:     map[string]string{"KUBECONFIG": writeKubeconfig(t, dir)},
			wantErr: "metrics server certificate",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := run(context.Background(), tc.args, env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("run error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// writeKubeconfig writes a kubeconfig for a server nothing listens on; the
// client is built lazily, so nothing connects before the certificate check.
func writeKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEnableWatchList checks the streaming-list switch: an explicit
// environment setting is left to client-go, otherwise it is turned on.
func TestEnableWatchList(t *testing.T) {
	for v, want := range map[string]bool{"": true, "false": false, "true": false} {
		if got := wantWatchList(func(string) string { return v }); got != want {
			t.Errorf("KUBE_FEATURE_WatchListClient=%q: wantWatchList = %v, want %v", v, got, want)
		}
	}
	enableWatchList(func(string) string { return "" })
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Fatal("WatchListClient still off without an environment setting")
	}
}
