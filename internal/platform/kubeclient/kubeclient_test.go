package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfig: --kubeconfig, else $KUBECONFIG as a list merged the way
// kubectl merges it, else in-cluster; both binaries load it so.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	clusters := write(t, dir, "clusters", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://list.example:6443"}}]
users: [{name: u, user: {token: t}}]
`)
	context := write(t, dir, "context", `apiVersion: v1
kind: Config
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`)
	explicit := write(t, dir, "explicit", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://explicit.example:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`)
	list := clusters + string(filepath.ListSeparator) + context
	tests := []struct {
		name       string
		o          Options
		kubeconfig string
		wantHost   string
		wantErr    string
	}{
		{name: "a $KUBECONFIG list is merged", kubeconfig: list, wantHost: "https://list.example:6443"},
		{name: "--kubeconfig wins over $KUBECONFIG", o: Options{Kubeconfig: explicit}, kubeconfig: list, wantHost: "https://explicit.example:6443"},
		{name: "a missing --kubeconfig is an error", o: Options{Kubeconfig: filepath.Join(dir, "nope")}, wantErr: "--kubeconfig, $KUBECONFIG or in-cluster"},
		{name: "neither: in-cluster, which fails outside a pod", wantErr: "in-cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			cfg, err := Config(tc.o, func(k string) string {
				if k == "KUBECONFIG" {
					return tc.kubeconfig
				}
				return ""
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Config() = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.wantHost {
				t.Errorf("host %q, want %q", cfg.Host, tc.wantHost)
			}
		})
	}
	cfg, err := Config(Options{Kubeconfig: explicit, UserAgent: "migflex-test", QPS: 7, Burst: 9}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.UserAgent != "migflex-test" || cfg.QPS != 7 || cfg.Burst != 9 {
		t.Errorf("user agent %q, QPS %g, burst %d: want migflex-test, 7, 9", cfg.UserAgent, cfg.QPS, cfg.Burst)
	}
}
