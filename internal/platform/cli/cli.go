// Package cli declares the command-line flags of migflex's binaries so that
// one declaration per flag gives its default, its help text and its
// environment-variable twin.
//
// The twin of flag --foo-bar of a component is MIGFLEX_<COMPONENT>_FOO_BAR
// (MIGFLEX_AGENT_NODE_NAME, MIGFLEX_WEBHOOK_LISTEN). A flag may also be
// read from older names (the agent's NODE_NAME, NVIDIA device plugin's
// MIG_STRATEGY) that manifests and users set. A flag on the command line
// wins over its twin, the twin over an older name, and any of them over
// the default. An empty variable counts as unset unless the flag says
// otherwise (EmptyCounts).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Flags is a flag.FlagSet whose flags have environment twins.
type Flags struct {
	*flag.FlagSet
	prefix string
	twins  []Twin
}

// Twin is the environment side of one flag.
type Twin struct {
	Flag string
	// Env is the canonical name, MIGFLEX_<COMPONENT>_<FLAG>; empty for a
	// flag without a twin.
	Env string
	// Aliases are older names still read, in order of precedence.
	Aliases []string
	// EmptyCounts makes a variable set to "" set the flag to "".
	EmptyCounts bool
}

// Names are the variables the twin reads, canonical first.
func (t Twin) Names() []string {
	if t.Env == "" {
		return nil
	}
	return append([]string{t.Env}, t.Aliases...)
}

// New returns the flags of a command (name, as in its usage) whose
// environment twins start with MIGFLEX_<component>_.
func New(name, component string) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return &Flags{FlagSet: fs, prefix: "MIGFLEX_" + strings.ToUpper(component) + "_"}
}

// Option changes how a flag is read from the environment.
type Option func(*Twin)

// Alias adds older environment names the flag is still read from.
func Alias(names ...string) Option {
	return func(t *Twin) { t.Aliases = append(t.Aliases, names...) }
}

// EmptyCounts makes an empty variable set the flag to "" rather than
// leave the default (a list whose empty value means "none").
func EmptyCounts() Option { return func(t *Twin) { t.EmptyCounts = true } }

// NoEnv gives the flag no environment twin (its variable, like
// KUBECONFIG, means something else).
func NoEnv() Option { return func(t *Twin) { t.Env = "" } }

// Var declares a flag with its twin; the help text names the variables.
func (f *Flags) Var(v flag.Value, name, usage string, opts ...Option) {
	t := Twin{Flag: name, Env: f.prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
	for _, o := range opts {
		o(&t)
	}
	if names := t.Names(); len(names) > 0 {
		usage = fmt.Sprintf("%s (env %s)", usage, strings.Join(names, ", "))
	}
	f.FlagSet.Var(v, name, usage)
	f.twins = append(f.twins, t)
}

// String declares a string flag.
func (f *Flags) String(p *string, name, def, usage string, opts ...Option) {
	f.declare(name, usage, opts, func(fs *flag.FlagSet) { fs.StringVar(p, name, def, "") })
}

// Duration declares a time.Duration flag.
func (f *Flags) Duration(p *time.Duration, name string, def time.Duration, usage string, opts ...Option) {
	f.declare(name, usage, opts, func(fs *flag.FlagSet) { fs.DurationVar(p, name, def, "") })
}

// Float64 declares a float64 flag.
func (f *Flags) Float64(p *float64, name string, def float64, usage string, opts ...Option) {
	f.declare(name, usage, opts, func(fs *flag.FlagSet) { fs.Float64Var(p, name, def, "") })
}

// Int declares an int flag.
func (f *Flags) Int(p *int, name string, def int, usage string, opts ...Option) {
	f.declare(name, usage, opts, func(fs *flag.FlagSet) { fs.IntVar(p, name, def, "") })
}

// Int64 declares an int64 flag.
func (f *Flags) Int64(p *int64, name string, def int64, usage string, opts ...Option) {
	f.declare(name, usage, opts, func(fs *flag.FlagSet) { fs.Int64Var(p, name, def, "") })
}

// Bool declares a bool flag.
func (f *Flags) Bool(p *bool, name string, def bool, usage string, opts ...Option) {
	f.declare(name, usage, opts, func(fs *flag.FlagSet) { fs.BoolVar(p, name, def, "") })
}

// declare borrows the standard library's value for a type: define makes
// the flag on a scratch set, which then moves here with its twin.
func (f *Flags) declare(name, usage string, opts []Option, define func(*flag.FlagSet)) {
	scratch := flag.NewFlagSet("", flag.ContinueOnError)
	define(scratch)
	fl := scratch.Lookup(name)
	f.Var(fl.Value, name, usage, opts...)
	f.Lookup(name).DefValue = fl.DefValue
}

// Twins returns the environment side of every flag, in declaration order.
func (f *Flags) Twins() []Twin { return append([]Twin(nil), f.twins...) }

// Parse sets each flag from its environment twin (read with lookupEnv,
// os.LookupEnv outside tests), then from args. Every error, a twin that
// does not parse (naming the variable) or a stray argument as much as a
// bad flag, is printed with the usage, as the flag package prints its own,
// and returned marked for Exit as a usage error; -h returns flag.ErrHelp.
func (f *Flags) Parse(args []string, lookupEnv func(string) (string, bool)) error {
	var errs []error
	for _, t := range f.twins {
		for _, env := range t.Names() {
			v, ok := lookupEnv(env)
			if !ok || (v == "" && !t.EmptyCounts) {
				continue
			}
			if err := f.Set(t.Flag, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
			break
		}
	}
	if err := f.FlagSet.Parse(args); err != nil {
		return Usage(err)
	}
	if f.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", f.Args()))
	}
	if err := errors.Join(errs...); err != nil {
		f.Fail(err)
		return Usage(err)
	}
	return nil
}

// Fail prints err and the usage, for a problem found after Parse (a
// required flag missing).
func (f *Flags) Fail(err error) {
	fmt.Fprintf(f.Output(), "%s: %v\n\n", f.FlagSet.Name(), err)
	f.FlagSet.Usage()
}

// Name names a flag for an error message: "--node-name (env
// MIGFLEX_AGENT_NODE_NAME)".
func (f *Flags) Name(flagName string) string {
	for _, t := range f.twins {
		if t.Flag == flagName && t.Env != "" {
			return fmt.Sprintf("--%s (env %s)", flagName, t.Env)
		}
	}
	return "--" + flagName
}

// Usage sets the usage message: head, then the flags.
func (f *Flags) Usage(w io.Writer, head string) {
	f.SetOutput(w)
	f.FlagSet.Usage = func() {
		fmt.Fprint(w, head)
		f.PrintDefaults()
	}
}
