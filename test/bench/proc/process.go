package proc

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a program under test, run as its own process so that its
// memory and CPU are its own.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// Start runs bin with args, its output going to logPath. env is added to
// this process's environment (later entries win), so the caller can blank
// variables that would otherwise override the flags.
func Start(logPath, bin string, env []string, args ...string) (*Process, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", bin, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited returns an error saying how the process ended once it has, and
// nil while it runs.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.cmd.Path, p.err)
	default:
		return nil
	}
}

// Stop sends SIGTERM and waits up to timeout for a clean exit. A process
// that had already exited, exits with an error, or has to be killed after
// the timeout is reported as an error.
func (p *Process) Stop(timeout time.Duration) error {
	if err := p.Exited(); err != nil {
		return fmt.Errorf("%w before it was stopped", err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping %s: %w", p.cmd.Path, err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s exited with %v after SIGTERM", p.cmd.Path, p.err)
		}
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", p.cmd.Path, timeout)
	}
}
