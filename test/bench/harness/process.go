package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Hang protection only.
const (
	readyTimeout = 10 * time.Minute
	stopTimeout  = 30 * time.Second
	pollInterval = 50 * time.Millisecond
)

// webhookProcess is a webhook under test running as its own process.
type webhookProcess struct {
	cmd   *exec.Cmd
	addr  string
	done  chan struct{}
	err   error // set before done is closed
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
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("webhook log: %w", err)
	}
	cmd := exec.Command(bin,
		"--listen="+addr,
		"--tls-cert-dir="+certDir,
		"--kubeconfig="+kubeconfig,
		"--mode="+mode,
	)
	cmd.Stdout, cmd.Stderr = log, log
	// KUBECONFIG from the caller's environment must not point it elsewhere.
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	p := &webhookProcess{cmd: cmd, addr: addr, done: make(chan struct{}), start: time.Now()}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *webhookProcess) pid() int { return p.cmd.Process.Pid }

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
		case <-p.done:
			return 0, fmt.Errorf("webhook %s exited before it was ready: %v", p.cmd.Path, p.err)
		case <-ctx.Done():
			return 0, fmt.Errorf("webhook %s not ready: %w", p.cmd.Path, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// stop sends SIGTERM and waits; a webhook that does not drain in time is
// killed and that is an error.
func (p *webhookProcess) stop() error {
	select {
	case <-p.done:
		return fmt.Errorf("webhook %s exited during the run: %v", p.cmd.Path, p.err)
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping webhook: %w", err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("webhook %s exited with %v after SIGTERM", p.cmd.Path, p.err)
		}
		return nil
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("webhook %s did not stop within %v of SIGTERM; killed", p.cmd.Path, stopTimeout)
	}
}
