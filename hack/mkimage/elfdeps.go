package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// DefaultLibDirs are where Debian's dynamic loader finds libraries on amd64,
// in its order. Libraries are placed at the same paths in the image, where
// the loader, run without an ld.so.cache, finds them again.
var DefaultLibDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// elfDeps returns the ELF interpreter and the transitive DT_NEEDED libraries
// of the binary at bin, each mapped to the image path the loader will look
// at. A static binary, or a file that is not ELF (a script, a config file),
// has none.
func elfDeps(bin string, libDirs []string) ([]file, error) {
	f, err := elf.Open(bin)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return nil, nil // not an ELF file
		}
		return nil, err
	}
	defer f.Close()

	var out []file
	interp, err := interpreter(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	if interp != "" {
		out = append(out, file{Src: interp, Dst: interp})
	}

	done := map[string]bool{}
	var walk func(f *elf.File, from string) error
	walk = func(f *elf.File, from string) error {
		needed, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("%s: reading DT_NEEDED: %w", from, err)
		}
		dirs := append(runPaths(f), libDirs...)
		for _, lib := range needed {
			if done[lib] {
				continue
			}
			done[lib] = true
			p, lf, err := findLibrary(lib, dirs, f.Class, f.Machine)
			if err != nil {
				return fmt.Errorf("%s needs %s: %w", from, lib, err)
			}
			// The interpreter can appear as a DT_NEEDED too (libc names
			// ld-linux); it is already in the image at its PT_INTERP path,
			// and another copy at the search path does no harm.
			out = append(out, file{Src: p, Dst: p})
			err = walk(lf, p)
			lf.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(f, bin); err != nil {
		return nil, err
	}
	return out, nil
}

func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("reading PT_INTERP: %w", err)
		}
		s := strings.TrimRight(string(b), "\x00")
		if !path.IsAbs(s) {
			return "", fmt.Errorf("PT_INTERP %q is not absolute", s)
		}
		return s, nil
	}
	return "", nil
}

// runPaths returns the absolute DT_RUNPATH/DT_RPATH entries; $ORIGIN-relative
// ones would need the binary's image path and no binary here uses them.
func runPaths(f *elf.File) []string {
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				if path.IsAbs(d) {
					dirs = append(dirs, d)
				}
			}
		}
	}
	return dirs
}

// findLibrary looks lib up in dirs as the loader would, skipping files of
// another ELF class or machine (say an i386 copy), and returns the path and
// the opened library.
func findLibrary(lib string, dirs []string, class elf.Class, machine elf.Machine) (string, *elf.File, error) {
	if strings.Contains(lib, "/") {
		dirs, lib = []string{filepath.Dir(lib)}, filepath.Base(lib)
	}
	for _, d := range dirs {
		p := filepath.Join(d, lib)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		lf, err := elf.Open(p)
		if err != nil {
			continue
		}
		if lf.Class != class || lf.Machine != machine {
			lf.Close()
			continue
		}
		return p, lf, nil
	}
	return "", nil, fmt.Errorf("not found in %s", strings.Join(dirs, ":"))
}
