package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const cgoHello = `package main

// #include <stdio.h>
// static void hello(void) { puts("hello from cgo"); fflush(stdout); }
import "C"

func main() { C.hello() }
`

const staticHello = `package main

import "fmt"

func main() { fmt.Println("hello from a static binary") }
`

// goBuild compiles a one-file program; cgo decides whether it links glibc
// dynamically, as the node agent does.
func goBuild(t *testing.T, src string, cgo bool) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"main.go": src, "go.mod": "module hello\n\ngo 1.24\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build (cgo=%v): %v\n%s", cgo, err, b)
	}
	return out
}

func TestParseAdd(t *testing.T) {
	for in, tc := range map[string]struct {
		want    file
		wantErr string
	}{
		"bin/webhook:/webhook":     {want: file{Src: "bin/webhook", Dst: "/webhook"}},
		"a:/usr/local/bin/../b//c": {want: file{Src: "a", Dst: "/usr/local/b/c"}},
		"bin/webhook":              {wantErr: "want host-path:image-path"},
		":/webhook":                {wantErr: "want host-path:image-path"},
		"bin/webhook:":             {wantErr: "want host-path:image-path"},
		"bin/webhook:webhook":      {wantErr: "must be absolute"},
		"bin/webhook:/":            {wantErr: "must name a file"},
	} {
		t.Run(in, func(t *testing.T) {
			got, err := parseAdd(in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseAdd(%q) error = %v, want %q", in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseAdd(%q): %v", in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestElfDeps(t *testing.T) {
	dynamic := goBuild(t, cgoHello, true)
	static := goBuild(t, staticHello, false)
	script := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("dynamic binary gets its loader and libc", func(t *testing.T) {
		deps, err := elfDeps(dynamic, DefaultLibDirs)
		if err != nil {
			t.Fatal(err)
		}
		if len(deps) < 2 {
			t.Fatalf("deps = %v, want the interpreter and at least libc", deps)
		}
		if !strings.Contains(deps[0].Dst, "ld-linux") {
			t.Errorf("first dep %v is not the ELF interpreter", deps[0])
		}
		var libc bool
		for _, d := range deps {
			if d.Src != d.Dst {
				t.Errorf("%v: libraries must keep their host path in the image", d)
			}
			libc = libc || filepath.Base(d.Dst) == "libc.so.6"
		}
		if !libc {
			t.Errorf("deps %v lack libc.so.6", deps)
		}
	})
	for name, bin := range map[string]string{"static binary": static, "not an ELF file": script} {
		t.Run(name+" needs nothing", func(t *testing.T) {
			deps, err := elfDeps(bin, DefaultLibDirs)
			if err != nil {
				t.Fatal(err)
			}
			if len(deps) != 0 {
				t.Errorf("deps = %v, want none", deps)
			}
		})
	}
	t.Run("a library missing from the search path is an error", func(t *testing.T) {
		_, err := elfDeps(dynamic, []string{t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "needs libc.so.6: not found") {
			t.Fatalf("err = %v, want libc.so.6 not found", err)
		}
	})
	t.Run("a missing binary is an error", func(t *testing.T) {
		if _, err := elfDeps(filepath.Join(t.TempDir(), "nope"), DefaultLibDirs); err == nil {
			t.Fatal("no error for a missing file")
		}
	})
}

// readImage loads the tarball Build wrote and returns its config entrypoint
// and env and its single layer's files (path -> content).
func readImage(t *testing.T, out, ref string) ([]string, []string, map[string][]byte) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("reading %s back as %s: %v", out, ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files["/"+h.Name] = b
		}
	}
	return cf.Config.Entrypoint, cf.Config.Env, files
}

func TestBuild(t *testing.T) {
	dynamic := goBuild(t, cgoHello, true)
	static := goBuild(t, staticHello, false)
	out := filepath.Join(t.TempDir(), "img.tar")
	const ref = "lc.local/hello:test"

	added, err := Build(Spec{
		Ref: ref, Out: out,
		Files:      []file{{Src: dynamic, Dst: "/hello"}, {Src: static, Dst: "/usr/bin/static"}},
		Entrypoint: []string{"/hello", "arg"},
		Env:        []string{"A=b"},
		LibDirs:    DefaultLibDirs,
	})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	ep, env, files := readImage(t, out, ref)
	if diff := cmp.Diff([]string{"/hello", "arg"}, ep); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/", "A=b"}, env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	sort.Strings(added)
	if diff := cmp.Diff(added, paths); diff != "" {
		t.Errorf("Build's report vs the layer's files (-report +layer):\n%s", diff)
	}
	want, _ := os.ReadFile(dynamic)
	if !bytes.Equal(files["/hello"], want) {
		t.Errorf("/hello in the layer differs from the binary")
	}

	// Run both binaries inside the unpacked layer: that the dynamic one finds
	// its loader and libc there is the point of this tool.
	if os.Geteuid() != 0 {
		t.Skip("running the image's binaries needs chroot (root)")
	}
	root := t.TempDir()
	for p, b := range files {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for bin, want := range map[string]string{"/hello": "hello from cgo\n", "/usr/bin/static": "hello from a static binary\n"} {
		cmd := exec.Command(bin)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
		cmd.Env = []string{}
		got, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("running %s in the image root: %v\n%s", bin, err, got)
			continue
		}
		if diff := cmp.Diff(want, string(got)); diff != "" {
			t.Errorf("%s output (-want +got):\n%s", bin, diff)
		}
	}
}

func TestBuildDefaultsEntrypointToFirstFile(t *testing.T) {
	static := goBuild(t, staticHello, false)
	out := filepath.Join(t.TempDir(), "img.tar")
	if _, err := Build(Spec{Ref: "lc.local/img:1", Out: out, Files: []file{{Src: static, Dst: "/x"}}}); err != nil {
		t.Fatal(err)
	}
	ep, _, _ := readImage(t, out, "lc.local/img:1")
	if diff := cmp.Diff([]string{"/x"}, ep); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
}

func TestBuildRejects(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, tc := range map[string]struct {
		spec    Spec
		wantErr string
	}{
		"no files":           {spec: Spec{Ref: "lc.local/img:1"}, wantErr: "at least one file"},
		"no ref":             {spec: Spec{Files: []file{{a, "/a"}}}, wantErr: "need a reference"},
		"bad ref":            {spec: Spec{Ref: "UPPER/case:1", Files: []file{{a, "/a"}}}, wantErr: "image reference"},
		"one path two files": {spec: Spec{Ref: "lc.local/img:1", Files: []file{{a, "/x"}, {b, "/x"}}}, wantErr: "wanted for both"},
		"missing file":       {spec: Spec{Ref: "lc.local/img:1", Files: []file{{filepath.Join(dir, "nope"), "/x"}}}, wantErr: "no such file"},
		"a directory":        {spec: Spec{Ref: "lc.local/img:1", Files: []file{{dir, "/x"}}}, wantErr: "is a directory"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.spec.Out = filepath.Join(t.TempDir(), "img.tar")
			_, err := Build(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Build error = %v, want %q", err, tc.wantErr)
			}
			if _, statErr := os.Stat(tc.spec.Out); !os.IsNotExist(statErr) {
				t.Errorf("a failed Build left %s behind", tc.spec.Out)
			}
		})
	}
}
