package webhook

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/platform/kubeclient"
	"github.com/migflex/migflex/internal/platform/metricsserver"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// DefaultMetricsAddr is the command's metrics listener unless told
// otherwise: a port of its own, next to the agent's 9123 and the planner's
// 9124.
const DefaultMetricsAddr = ":9125"

// Config is everything the webhook process is told on its command line.
type Config struct {
	Listen  string
	CertDir string
	// MetricsAddr is the HTTPS address of /metrics, for clients the API
	// server authorizes; empty serves no metrics. MetricsCertDir holds
	// its key pair; empty: self-signed.
	MetricsAddr    string
	MetricsCertDir string
	// Kubeconfig is the --kubeconfig file (see kubeclient.Options).
	Kubeconfig string
	// PolicyFile is a FallbackPolicy file; empty means the default policy.
	PolicyFile          string
	Mode                fallback.Mode
	OnUnsatisfiable     fallback.Unsatisfiable
	OnInsufficientCount fallback.Unsatisfiable
	MaxRequestBytes     int64
	MaxInflightBytes    int64
	Resync              time.Duration
	ReusePort           bool
	// ReshapeFirst, PlannerManualHold and PlannerCooldown: see Options.
	ReshapeFirst      bool
	PlannerManualHold time.Duration
	PlannerCooldown   time.Duration
}

// Decider builds the fallback decision c asks for.
func (c *Config) Decider() (*fallback.Decider, error) {
	policy := fallback.DefaultPolicy()
	if c.PolicyFile != "" {
		data, err := os.ReadFile(c.PolicyFile)
		if err != nil {
			return nil, fmt.Errorf("reading --config: %w", err)
		}
		if policy, err = fallback.ParsePolicy(data); err != nil {
			return nil, fmt.Errorf("--config %s: %w", c.PolicyFile, err)
		}
	}
	return fallback.NewDecider(fallback.Options{Policy: policy, Mode: c.Mode, OnUnsatisfiable: c.OnUnsatisfiable, OnInsufficientCount: c.OnInsufficientCount})
}

// Run runs the webhook process until ctx ends: the decision, the API
// client (getenv, os.Getenv outside tests, gives $KUBECONFIG) and the
// server.
func Run(ctx context.Context, c Config, getenv func(string) string) error {
	d, err := c.Decider()
	if err != nil {
		return err
	}
	client, err := kubeclient.New(kubeclient.Options{Kubeconfig: c.Kubeconfig, UserAgent: "migflex-webhook"}, getenv)
	if err != nil {
		return err
	}
	srv, err := NewServer(Options{
		Listen:           c.Listen,
		CertDir:          c.CertDir,
		Decider:          d,
		Client:           client,
		Resync:           c.Resync,
		MaxRequestBytes:  c.MaxRequestBytes,
		MaxInflightBytes: c.MaxInflightBytes,
		ReusePort:        c.ReusePort,

		ReshapeFirst:        c.ReshapeFirst,
		PlannerFieldManager: plansnap.DefaultFieldManager,
		PlannerManualHold:   c.PlannerManualHold,
		PlannerCooldown:     c.PlannerCooldown,
	})
	if err != nil {
		return err
	}
	if c.MetricsAddr == "" {
		return srv.Run(ctx)
	}
	// Replicas sharing the admission port on one host's network share
	// the metrics port too; a scrape then reaches one of them.
	var lc net.ListenConfig
	if c.ReusePort {
		lc.Control = reusePort
	}
	metrics, err := metricsserver.New(metricsserver.Options{
		Addr: c.MetricsAddr, Name: "gpu-webhook", CertDir: c.MetricsCertDir,
		Handler: srv.MetricsHandler(), Reviewer: metricsserver.NewReviewer(client), ListenConfig: &lc,
	})
	if err != nil {
		return err
	}
	return metrics.RunAlongside(ctx, srv.Run)
}
