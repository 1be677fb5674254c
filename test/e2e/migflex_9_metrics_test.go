//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/migflex/migflex/test/e2e/framework"
)

// ServiceAccounts of the metrics tests in migflex's namespace: one bound to
// migflex-metrics-reader, one bound to nothing.
const (
	metricsReader = "migflex-e2e-metrics-reader"
	metricsNobody = "migflex-e2e-no-metrics"
)

// metricsReaderToken is a fresh token that may read migflex's metrics.
func metricsReaderToken(ctx context.Context) (string, error) {
	return cluster.MetricsToken(ctx, metricsReader, true)
}

// checkMetricsGuarded checks that base serves /metrics (with want in it)
// to a token bound to migflex-metrics-reader only: 401 without a token,
// 403 with one that may not read, and nothing over plain HTTP.
func checkMetricsGuarded(t *testing.T, base string, want ...string) {
	t.Helper()
	ctx := t.Context()
	reader, err := metricsReaderToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := cluster.MetricsToken(ctx, metricsNobody, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		wantCode    int
		wantBody    string
	}{
		{"a token that may read", reader, http.StatusOK, want[0]},
		{"a token that may not", nobody, http.StatusForbidden, `"system:serviceaccount:` + framework.MigflexNamespace + `:` + metricsNobody + `" may not get /metrics`},
		{"no token", "", http.StatusUnauthorized, "Unauthorized"},
		{"a token no API server issued", "not-a-token", http.StatusUnauthorized, "Unauthorized"},
	} {
		code, body, err := framework.Get(ctx, base+"/metrics", tc.token)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s/metrics with %s: %d %.300q, want %d with %q", base, tc.name, code, body, tc.wantCode, tc.wantBody)
		}
		if tc.token == reader {
			for _, w := range want[1:] {
				if !strings.Contains(body, w) {
					t.Errorf("%s/metrics lacks %q", base, w)
				}
			}
		}
	}
	plain := "http://" + strings.TrimPrefix(base, "https://") + "/metrics"
	if code, body, err := framework.Get(ctx, plain, reader); err == nil && code == http.StatusOK {
		t.Errorf("%s answered plain HTTP: %.200q", plain, body)
	}
}

// The agent's and the webhook's metrics are served over HTTPS on ports of
// their own, to a token the API server lets read them and to no other; the
// agent's /healthz there answers the kubelet's probes without one.
func TestMetricsNeedAnAuthorizedToken(t *testing.T) {
	migflex(t)
	t.Run("agent", func(t *testing.T) {
		// The devices in use are what the dashboard's free devices per
		// profile subtract.
		checkMetricsGuarded(t, framework.AgentMetricsURL, "migflex_agent_config_state{", "migflex_agent_devices_in_use{")
		code, body, err := framework.Get(t.Context(), framework.AgentMetricsURL+"/healthz", "")
		if err != nil || code != http.StatusOK {
			t.Errorf("the agent's /healthz without a token: %d %q %v, want 200", code, body, err)
		}
	})
	t.Run("webhook", func(t *testing.T) {
		checkMetricsGuarded(t, framework.WebhookMetricsURL, "migflex_webhook_decision_duration_seconds_count")
	})
}
