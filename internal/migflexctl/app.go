package migflexctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/migflex/migflex/internal/platform/cli"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// Exit codes, for scripts.
const (
	// ExitOK: the answer is good news (every node's config applied and
	// its devices healthy; the pod runs; the file is valid; written).
	ExitOK = 0
	// ExitAttention: the answer needs a look (a node's config failed or a
	// device is unhealthy; the pod waits; pods no change can serve; the
	// file is invalid for the node).
	ExitAttention = 1
	// ExitUsage: the command line is wrong.
	ExitUsage = 2
	// ExitOthersInvalid: validate linting a file of several
	// configurations: only ones other than "selected" are invalid.
	ExitOthersInvalid = 3
	// ExitError: the command could not do its job: no kubeconfig, the API
	// server unreachable or refusing, an object not found, a file
	// unreadable.
	ExitError = 4
)

const usage = `kubectl migflex: what migflex does with a cluster's GPUs

Usage:
  kubectl migflex status [NODE...]            nodes, GPUs, instances, pods, free totals
  kubectl migflex explain POD                 why a pod waits, or where it runs
  kubectl migflex plan                        the planner's next round, dry run
  kubectl migflex validate -f FILE --node NODE  check a mig.config against a node
  kubectl migflex apply -f FILE NODE          write a mig.config to a node (any size)

Flags of every command:
      --kubeconfig FILE   kubeconfig file (default $KUBECONFIG, ~/.kube/config)
      --context NAME      kubeconfig context
  -n, --namespace NS      namespace of POD (default the context's)
  -o, --output FORMAT     text (default), wide, json or yaml
      --color WHEN        auto (on a terminal, unless NO_COLOR is set), always, never

Exit status: 0 good news; 1 the answer needs a look (a failed config or
unhealthy device, a pod that waits, pods no change can serve, an invalid
file); 2 bad command line; 3 validate: only configurations other than
"selected" are invalid; 4 the command could not do its job (API server,
object not found, unreadable file).
`

// App is the plugin with its surroundings, which tests replace.
type App struct {
	In       io.Reader
	Out, Err io.Writer
	Getenv   func(string) string
	// Connect returns a client and the namespace the flags select; nil:
	// from the kubeconfig (KubeconfigClient).
	Connect func(g Globals) (kubernetes.Interface, string, error)
	// IsTerminal tells whether w is a terminal, for --color=auto.
	IsTerminal func(w io.Writer) bool
	Now        func() time.Time
}

// Globals are the flags every command takes.
type Globals struct {
	Kubeconfig, Context, Namespace string
	Output                         string
	Color                          string
}

// New is the App of a process.
func New() *App {
	return &App{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv, Connect: KubeconfigClient, IsTerminal: isTerminal, Now: time.Now}
}

// KubeconfigClient loads the kubeconfig as kubectl does: --kubeconfig,
// else $KUBECONFIG, else ~/.kube/config, with --context and --namespace
// over it.
func KubeconfigClient(g Globals) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: g.Context}
	overrides.Context.Namespace = g.Namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-migflex"
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("client for the API server: %w", err)
	}
	return client, ns, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// command is one subcommand: its own flags, and what it does once the
// flags are parsed.
type command struct {
	name, args string
	flags      func(fs *pflag.FlagSet)
	// outputs are the -o formats it takes besides text.
	outputs []string
	run     func(ctx context.Context, r *runner, args []string) int
}

// runner is one invocation: the App, the global flags and a client made
// on first use.
type runner struct {
	*App
	g       Globals
	style   style
	client  kubernetes.Interface
	ns      string
	connErr error
	dialed  bool
}

// kube returns the client and the namespace, connecting once.
func (r *runner) kube() (kubernetes.Interface, string, error) {
	if !r.dialed {
		r.dialed = true
		r.client, r.ns, r.connErr = r.Connect(r.g)
	}
	return r.client, r.ns, r.connErr
}

// fail prints err and returns ExitError.
func (r *runner) fail(err error) int {
	fmt.Fprintf(r.Err, "error: %v\n", err)
	return ExitError
}

// usageError prints what is wrong with the command line.
func (r *runner) usageError(c *command, format string, args ...any) int {
	fmt.Fprintf(r.Err, "error: %s\nUsage: kubectl migflex %s %s\n", fmt.Sprintf(format, args...), c.name, c.args)
	return ExitUsage
}

// Run runs the plugin with args (os.Args[1:]) and returns the exit code.
func (a *App) Run(ctx context.Context, args []string) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		out := a.Out
		if len(args) == 0 {
			out = a.Err
		}
		fmt.Fprint(out, usage)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	var c *command
	for i := range cmds {
		if cmds[i].name == args[0] || (cmds[i].name == "apply" && args[0] == "set-config") {
			c = &cmds[i]
		}
	}
	if c == nil {
		fmt.Fprintf(a.Err, "error: unknown command %q\n\n%s", args[0], usage)
		return ExitUsage
	}
	r := &runner{App: a}
	fs := pflag.NewFlagSet("kubectl migflex "+c.name, pflag.ContinueOnError)
	fs.SetOutput(a.Err)
	fs.StringVar(&r.g.Kubeconfig, "kubeconfig", "", "kubeconfig file")
	fs.StringVar(&r.g.Context, "context", "", "kubeconfig context")
	fs.StringVarP(&r.g.Namespace, "namespace", "n", "", "namespace")
	fs.StringVarP(&r.g.Output, "output", "o", "text", "output format: "+strings.Join(append([]string{"text"}, c.outputs...), ", "))
	fs.StringVar(&r.g.Color, "color", "auto", "colour: auto, always or never")
	if c.flags != nil {
		c.flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(a.Err, "Usage: kubectl migflex %s %s\n\nFlags:\n%s\n%s", c.name, c.args, fs.FlagUsages(), exitHelp)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if r.g.Output != "text" && !slices.Contains(c.outputs, r.g.Output) {
		return r.usageError(c, "-o %q: %s takes %s", r.g.Output, c.name, strings.Join(append([]string{"text"}, c.outputs...), ", "))
	}
	switch r.g.Color {
	case "always":
		r.style = colors
	case "never":
	case "auto":
		if a.IsTerminal(a.Out) && a.Getenv("NO_COLOR") == "" {
			r.style = colors
		}
	default:
		return r.usageError(c, "--color %q: want auto, always or never", r.g.Color)
	}
	return c.run(ctx, r, fs.Args())
}

const exitHelp = `Exit status: 0 good news; 1 needs a look; 2 bad command line; 3 validate:
only configurations other than "selected" are invalid; 4 could not do it.
`

func commands() []command {
	return []command{statusCommand(), explainCommand(), planCommand(), validateCommand(), applyCommand()}
}

// printData writes v as JSON or YAML (-o json, -o yaml).
func printData(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the output: %w", err)
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return fmt.Errorf("encoding the output: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// Main is the kubectl-migflex binary.
func Main(ctx context.Context, args []string, env cli.Env) int {
	a := New()
	a.Out, a.Err, a.Getenv = env.Stdout, env.Stderr, env.Getenv
	return a.Run(ctx, args)
}
