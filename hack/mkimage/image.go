package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// file is one host file placed into the image.
type file struct {
	Src string // host path
	Dst string // absolute path in the image
}

// Spec describes the image Build writes.
type Spec struct {
	Ref        string
	Out        string
	Files      []file
	Entrypoint []string // default: the first file's Dst
	Env        []string
	LibDirs    []string // where DT_NEEDED libraries are looked up
}

// parseAdd parses "src:dst".
func parseAdd(v string) (file, error) {
	src, dst, ok := strings.Cut(v, ":")
	switch {
	case !ok || src == "" || dst == "":
		return file{}, fmt.Errorf("-add %q: want host-path:image-path", v)
	case !path.IsAbs(dst):
		return file{}, fmt.Errorf("-add %q: image path %q must be absolute", v, dst)
	case path.Clean(dst) == "/":
		return file{}, fmt.Errorf("-add %q: image path must name a file", v)
	}
	return file{Src: src, Dst: path.Clean(dst)}, nil
}

// Build writes spec's image to spec.Out and returns the image paths it
// contains, the shared libraries it pulled in included.
func Build(spec Spec) ([]string, error) {
	if spec.Ref == "" || spec.Out == "" || len(spec.Files) == 0 {
		return nil, errors.New("need a reference, an output path and at least one file to add")
	}
	tag, err := name.NewTag(spec.Ref)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", spec.Ref, err)
	}
	files, err := withDependencies(spec.Files, spec.LibDirs)
	if err != nil {
		return nil, err
	}
	layer, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	img, err := image(layer, spec)
	if err != nil {
		return nil, err
	}
	// Write next to the target and rename, so a failed run never leaves a
	// truncated tarball behind for the cluster to import.
	tmp := spec.Out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("writing %s: %w", spec.Out, err)
	}
	if err := os.Rename(tmp, spec.Out); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Dst
	}
	return paths, nil
}

// withDependencies adds the ELF interpreter and shared libraries each file
// needs, once each, and rejects two files claiming one image path.
func withDependencies(files []file, libDirs []string) ([]file, error) {
	out := make([]file, 0, len(files))
	seen := map[string]string{} // image path -> host path
	add := func(f file) error {
		if prev, ok := seen[f.Dst]; ok {
			if prev == f.Src {
				return nil
			}
			return fmt.Errorf("image path %s wanted for both %s and %s", f.Dst, prev, f.Src)
		}
		seen[f.Dst] = f.Src
		out = append(out, f)
		return nil
	}
	for _, f := range files {
		if err := add(f); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		deps, err := elfDeps(f.Src, libDirs)
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			if err := add(d); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// layerTar returns an uncompressed layer holding files (contents read from
// the host, symlinks followed), their parent directories and the directories
// a container expects. Times and owners are fixed so the same inputs give
// the same image digest, which keeps re-imports cheap.
func layerTar(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, d := range []string{"/dev", "/etc", "/proc", "/sys", "/tmp"} {
		dirs[d] = true
	}
	for _, f := range files {
		for d := path.Dir(f.Dst); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted) // parents before children
	for _, d := range sorted {
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Typeflag: tar.TypeDir, Mode: mode, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := addFile(tw, f); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func addFile(tw *tar.Writer, f file) error {
	r, err := os.Open(f.Src)
	if err != nil {
		return err
	}
	defer r.Close()
	fi, err := r.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", f.Src)
	}
	mode := int64(0o644)
	if fi.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	hdr := &tar.Header{Name: strings.TrimPrefix(f.Dst, "/"), Typeflag: tar.TypeReg, Mode: mode, Size: fi.Size(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, r); err != nil {
		return fmt.Errorf("adding %s: %w", f.Src, err)
	}
	return nil
}

func image(layerData []byte, spec Spec) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerData)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint = spec.Entrypoint
	if len(cf.Config.Entrypoint) == 0 {
		cf.Config.Entrypoint = []string{spec.Files[0].Dst}
	}
	cf.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/"}, spec.Env...)
	cf.Config.WorkingDir = "/"
	return mutate.ConfigFile(img, cf)
}
