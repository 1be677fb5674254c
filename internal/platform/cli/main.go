package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/platform/memlimit"
)

// Exit statuses every binary shares.
const (
	ExitOK      = 0
	ExitFailed  = 1
	ExitUsage   = 2
	exitUnknown = -1
)

// Env is what a program reads from its process besides its arguments, so
// that tests hand it their own environment and streams.
type Env struct {
	LookupEnv      func(string) (string, bool)
	Stdout, Stderr io.Writer
}

// Getenv reads a variable as os.Getenv does.
func (e Env) Getenv(k string) string {
	v, _ := e.LookupEnv(k)
	return v
}

// Program is the body of a binary: every component package exports one
// (nodeagent.Main, webhook.Main, planner.Main, migflexctl.Main), and its
// cmd/ is only cli.Main(thatProgram).
type Program func(ctx context.Context, args []string, env Env) int

// Main runs p as the process: its context ends at SIGINT or SIGTERM (a
// second signal kills the process as Go's default does), and the process
// exits with p's status once klog is flushed.
func Main(p Program) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := p(ctx, os.Args[1:], Env{LookupEnv: os.LookupEnv, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	klog.Flush()
	os.Exit(code)
}

// ServerMain is Main for a long-running component in a container: it first
// gives the Go runtime a memory limit under the container's (memlimit),
// so the collector works harder near the limit instead of the kernel
// killing the process. The component logs what was set with
// LogMemoryLimit once its flags are parsed; the subcommands of its binary
// (device-plugin sim, validate) print nothing of it.
func ServerMain(p Program) {
	memLimit, memLimitErr = memlimit.Process()
	Main(p)
}

var (
	memLimit    memlimit.Limit
	memLimitErr error
)

// LogMemoryLimit logs the memory limit ServerMain gave the runtime.
func LogMemoryLimit(log klog.Logger) {
	switch l := memLimit; {
	case memLimitErr != nil:
		log.Error(memLimitErr, "No Go memory limit: reading the container's failed")
	case l.Set > 0:
		log.Info("Go memory limit set under the container's", "limit", l.Set, "container", l.Cgroup, "from", l.Reason)
	default:
		log.V(2).Info("No Go memory limit set", "reason", l.Reason)
	}
}

// Exit is the status of a long-running component whose Run returned err:
// 0 when it stopped cleanly (or only printed its help), 2 for a command
// line Parse refused (Parse printed why), else 1, with err logged as
// "<what> failed".
func Exit(err error, what string) int {
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &usage):
		return ExitUsage
	}
	klog.ErrorS(err, what+" failed")
	return ExitFailed
}

// usageError marks an error Parse or Fail already printed with the usage.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// Usage marks err as a command-line error already shown to the user, for
// Exit.
func Usage(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err}
}

// KlogFlags adds klog's verbosity flags (--v, --vmodule) to f: the only
// ones migflex's manifests set; klog's other flags (log files, headers)
// are for binaries that do not log to stderr under a container runtime.
func KlogFlags(f *Flags) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for _, name := range []string{"v", "vmodule"} {
		fl := fs.Lookup(name)
		f.FlagSet.Var(fl.Value, fl.Name, fl.Usage)
	}
}
