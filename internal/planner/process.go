package planner

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/migflex/migflex/internal/platform/kubeclient"
	"github.com/migflex/migflex/internal/platform/metricsserver"
)

// The planner's client-side rate limit, kube-scheduler's: a round writes
// up to Options.MaxNodesPerRound Nodes and records an Event per pod it
// acts on, and at 20 requests/s the limiter, not the API server, set how
// long a round of many writes took (docs/BENCHMARKS.md). One leader
// sends them; the API server's priority and fairness queues them with
// the other service accounts' requests.
const (
	DefaultKubeAPIQPS   = 50
	DefaultKubeAPIBurst = 100
)

// Config is everything the planner process is told on its command line:
// the controller's Options (but their Client, Registry and Now) and how
// to reach the API server.
type Config struct {
	Options
	// Kubeconfig is the --kubeconfig file (see kubeclient.Options).
	Kubeconfig   string
	KubeAPIQPS   float64
	KubeAPIBurst int
	// MetricsAddr is the HTTPS address of /metrics (for clients the API
	// server authorizes) and /healthz (for anyone); empty serves neither.
	// MetricsCertDir holds its key pair; empty: self-signed.
	MetricsAddr    string
	MetricsCertDir string
}

// Validate checks what the controller's own checks do not; flag names a
// flag in an error ("--kube-api-qps (env ...)").
func (c *Config) Validate(flag func(name string) string) error {
	if c.KubeAPIQPS <= 0 || c.KubeAPIBurst < 1 {
		return fmt.Errorf("%s must be above 0 and %s at least 1, got %g and %d",
			flag("kube-api-qps"), flag("kube-api-burst"), c.KubeAPIQPS, c.KubeAPIBurst)
	}
	return nil
}

// Run runs the planner process until ctx ends: the API client (getenv,
// os.Getenv outside tests, gives $KUBECONFIG) and the controller. It
// returns ErrLostLease when another replica took the lead.
func Run(ctx context.Context, c Config, getenv func(string) string) error {
	if c.LeaderElection {
		if c.Identity == "" {
			host, err := os.Hostname()
			if err != nil {
				return fmt.Errorf("naming this replica in the Lease: %w", err)
			}
			c.Identity = host
		}
		// A restarted process must not pass for the one that held the
		// Lease (it would take the Lease back at once, as if nothing had
		// happened): each process is its own candidate.
		c.Identity += "_" + rand.String(8)
	}
	client, err := kubeclient.New(kubeclient.Options{
		Kubeconfig: c.Kubeconfig, UserAgent: "migflex-planner", QPS: float32(c.KubeAPIQPS), Burst: c.KubeAPIBurst,
	}, getenv)
	if err != nil {
		return err
	}
	c.Client = client
	ctl, err := New(c.Options)
	if err != nil {
		return err
	}
	if c.MetricsAddr == "" {
		return ctl.Run(ctx)
	}
	srv, err := metricsserver.New(metricsserver.Options{
		Addr: c.MetricsAddr, Name: "migflex-planner", CertDir: c.MetricsCertDir,
		Handler: ctl.Handler(), Reviewer: metricsserver.NewReviewer(client),
	})
	if err != nil {
		return err
	}
	return srv.RunAlongside(ctx, ctl.Run)
}
