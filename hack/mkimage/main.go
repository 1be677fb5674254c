// Command mkimage wraps binaries into a single-layer container image tarball
// that `ctr images import` (and `docker load`) accepts, so the local test
// cluster runs the project's binaries without a registry or a Docker engine.
//
//	mkimage -ref lc.local/migflex:e2e -out migflex.tar \
//	    -add bin/device-plugin:/device-plugin -add bin/webhook:/webhook
//
// A dynamically linked binary (the node agent links glibc through cgo) gets
// its ELF interpreter and every shared library it needs, transitively, copied
// from the host into the layer at the same paths, as a distroless base image
// would provide them. Static binaries get nothing extra.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// addFlags collects repeated -add src:dst arguments.
type addFlags []file

func (a *addFlags) String() string { return fmt.Sprint(*a) }

func (a *addFlags) Set(v string) error {
	f, err := parseAdd(v)
	if err != nil {
		return err
	}
	*a = append(*a, f)
	return nil
}

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		spec Spec
		adds addFlags
		envs listFlag
		ep   string
		libs string
	)
	flag.StringVar(&spec.Ref, "ref", "", "image reference to tag the image with, e.g. lc.local/migflex:e2e (required)")
	flag.StringVar(&spec.Out, "out", "", "output tarball (required)")
	flag.Var(&adds, "add", "host-path:image-path of a file to add (repeatable; at least one)")
	flag.StringVar(&ep, "entrypoint", "", "comma-separated entrypoint (default: the first -add's image path)")
	flag.Var(&envs, "env", "KEY=VALUE for the image config (repeatable)")
	flag.StringVar(&libs, "libdirs", strings.Join(DefaultLibDirs, ":"), "colon-separated host directories searched for shared libraries")
	flag.Parse()

	spec.Files = adds
	spec.Env = envs
	if ep != "" {
		spec.Entrypoint = strings.Split(ep, ",")
	}
	spec.LibDirs = strings.Split(libs, ":")
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mkimage: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	added, err := Build(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (%s): %s\n", spec.Out, spec.Ref, strings.Join(added, " "))
}
