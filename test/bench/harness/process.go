package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/migflex/migflex/test/bench/proc"
)

// Hang protection only.
const (
	readyTimeout = 10 * time.Minute
	stopTimeout  = 30 * time.Second
	pollInterval = 50 * time.Millisecond
)

// webhookProcess is a webhook under test running as its own process.
type webhookProcess struct {
	*proc.Process
	addr  string
	start time.Time
}

// freeAddr finds a free port on 127.0.0.1. Another process could take it
// before the webhook binds it; nothing else on a benchmark machine is
// binding ports in that instant.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}

// startWebhook runs bin with the flags cmd/webhook and listwebhook share,
// its output going to logPath.
func startWebhook(bin, certDir, kubeconfig, mode, logPath string) (*webhookProcess, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	// KUBECONFIG from the caller's environment must not point it elsewhere.
	// cmd/webhook's metrics take a free loopback port (listwebhook has no
	// metrics server and ignores the variable), so that two webhooks never
	// race for its default :9125.
	p, err := proc.Start(logPath, bin, []string{"KUBECONFIG=", "MIGFLEX_WEBHOOK_METRICS_ADDR=127.0.0.1:0"},
		"--listen="+addr, "--tls-cert-dir="+certDir, "--kubeconfig="+kubeconfig, "--mode="+mode)
	if err != nil {
		return nil, err
	}
	return &webhookProcess{Process: p, addr: addr, start: start}, nil
}

// waitReady polls /readyz until the webhook's view of the cluster is
// complete (its caches synced) and returns how long that took from the
// start of the process.
func (p *webhookProcess) waitReady(ctx context.Context, client *http.Client) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	url := "https://" + p.addr + "/readyz"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(p.start), nil
			}
		}
		select {
		case <-p.Done():
			return 0, fmt.Errorf("%w before it was ready", p.Exited())
		case <-ctx.Done():
			return 0, fmt.Errorf("webhook on %s not ready: %w", p.addr, ctx.Err())
		case <-time.After(pollInterval): // /readyz cannot be watched
		}
	}
}

// logPath is where the run called name logs.
func logPath(dir, name string) string { return filepath.Join(dir, name+".log") }
