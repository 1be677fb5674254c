package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientfeatures "k8s.io/client-go/features"

	"github.com/migflex/migflex/internal/fallback"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParseFlags(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		want    options
		wantErr string
	}{
		"defaults": {
			want: options{listen: ":8443", certDir: "/etc/webhook/certs", mode: "existence", onUnsatisfiable: "deny", onInsufficient: "allow", maxRequestBytes: 8 << 20, maxInflight: 8 << 20},
		},
		"flags": {
			args: []string{"--listen=:9443", "--tls-cert-dir=/certs", "--kubeconfig=/kc", "--config=/p.yaml", "--mode=capacity", "--on-unsatisfiable=allow", "--on-insufficient-count=deny", "--max-request-bytes=1024", "--max-inflight-bytes=4096", "--resync=1m", "--reuse-port"},
			want: options{listen: ":9443", certDir: "/certs", kubeconfig: "/kc", config: "/p.yaml", mode: "capacity", onUnsatisfiable: "allow", onInsufficient: "deny", maxRequestBytes: 1024, maxInflight: 4096, resync: time.Minute, reusePort: true},
		},
		"environment twins": {
			env: map[string]string{
				"MIGFLEX_WEBHOOK_LISTEN": ":7443", "MIGFLEX_WEBHOOK_TLS_CERT_DIR": "/s", "MIGFLEX_WEBHOOK_CONFIG": "/c",
				"MIGFLEX_WEBHOOK_MODE": "capacity", "MIGFLEX_WEBHOOK_ON_UNSATISFIABLE": "allow", "MIGFLEX_WEBHOOK_MAX_REQUEST_BYTES": "99",
				"MIGFLEX_WEBHOOK_ON_INSUFFICIENT_COUNT": "deny", "MIGFLEX_WEBHOOK_MAX_INFLIGHT_BYTES": "77", "MIGFLEX_WEBHOOK_REUSE_PORT": "true",
			},
			want: options{listen: ":7443", certDir: "/s", config: "/c", mode: "capacity", onUnsatisfiable: "allow", onInsufficient: "deny", maxRequestBytes: 99, maxInflight: 77, reusePort: true},
		},
		"a flag beats its environment twin": {
			args: []string{"--mode=existence"},
			env:  map[string]string{"MIGFLEX_WEBHOOK_MODE": "capacity"},
			want: options{listen: ":8443", certDir: "/etc/webhook/certs", mode: "existence", onUnsatisfiable: "deny", onInsufficient: "allow", maxRequestBytes: 8 << 20, maxInflight: 8 << 20},
		},
		"bad environment value": {
			env:     map[string]string{"MIGFLEX_WEBHOOK_MAX_REQUEST_BYTES": "lots"},
			wantErr: `MIGFLEX_WEBHOOK_MAX_REQUEST_BYTES="lots"`,
		},
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
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(options{})); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewDecider(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\nallowUp: false\n")
	bad := write("bad.yaml", "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\nallowUp: maybe\n")
	base := options{mode: "existence", onUnsatisfiable: "deny", onInsufficient: "allow"}
	with := func(f func(*options)) options { o := base; f(&o); return o }

	tests := map[string]struct {
		o       options
		wantErr string
	}{
		"default policy":    {o: base},
		"policy file":       {o: with(func(o *options) { o.config = good })},
		"missing file":      {o: with(func(o *options) { o.config = filepath.Join(dir, "none.yaml") }), wantErr: "reading --config"},
		"invalid file":      {o: with(func(o *options) { o.config = bad }), wantErr: "--config " + bad},
		"bad mode":          {o: with(func(o *options) { o.mode = "free" }), wantErr: "--mode"},
		"bad unsatisfiable": {o: with(func(o *options) { o.onUnsatisfiable = "ignore" }), wantErr: "--on-unsatisfiable"},
		"deny insufficient": {o: with(func(o *options) { o.onInsufficient = "deny" })},
		"bad insufficient":  {o: with(func(o *options) { o.onInsufficient = "warn" }), wantErr: "--on-insufficient-count"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := newDecider(tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || d == nil {
				t.Fatalf("newDecider = %v, %v", d, err)
			}
			if d.Mode() != fallback.Mode(tc.o.mode) {
				t.Errorf("mode = %s", d.Mode())
			}
		})
	}
}

func TestRunFailsClearly(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		"bad mode":                {args: []string{"--mode=x"}, wantErr: "--mode"},
		"missing kubeconfig":      {args: []string{"--kubeconfig=" + filepath.Join(dir, "kc")}, wantErr: "kubernetes client configuration"},
		"missing KUBECONFIG":      {env: map[string]string{"KUBECONFIG": filepath.Join(dir, "kc")}, wantErr: "kubernetes client configuration"},
		"certgen: stray argument": {args: []string{"certgen", "extra"}, wantErr: `certgen: unexpected arguments ["extra"]`},
		"certgen: missing kubeconfig": {
			args:    []string{"certgen", "--kubeconfig=" + filepath.Join(dir, "kc")},
			wantErr: "kubernetes client configuration",
		},
		"missing certificate": {
			args:    []string{"--tls-cert-dir=" + dir, "--listen=127.0.0.1:0"},
			env:     map[string]string{"KUBECONFIG": writeKubeconfig(t, dir)},
			wantErr: "reading certificate",
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
		if got := wantWatchList(env(map[string]string{"KUBE_FEATURE_WatchListClient": v})); got != want {
			t.Errorf("KUBE_FEATURE_WatchListClient=%q: wantWatchList = %v, want %v", v, got, want)
		}
	}
	enableWatchList(env(nil))
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Fatal("WatchListClient still off without an environment setting")
	}
}
