package subcmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

const modelsUsage = `usage: device-plugin models [--models-file FILE]

Prints the GPU models the simulator knows and their MIG profiles: the
built-in ones and, with --models-file, custom ones from a models file
(version: v1, models: [...]). A custom model named like a built-in one
replaces it, as in the simulator.

`

// Models is `device-plugin models`.
func Models(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("models", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelsFile := fs.String("models-file", "", "custom models file to list after the built-in models")
	fs.Usage = func() {
		fmt.Fprint(stderr, modelsUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "models: unexpected arguments %q\n", fs.Args())
		return 2
	}
	var custom []gpumodel.Model
	if *modelsFile != "" {
		var err error
		if custom, err = gpumodel.LoadFile(*modelsFile); err != nil {
			fmt.Fprintf(stderr, "models: %v\n", err)
			return 2
		}
		// The simulator rejects two custom models of one name; say so here
		// too rather than list two of a name.
		cfg := sim.Config{Models: custom}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "models: %s: %v\n", *modelsFile, err)
			return 2
		}
	}
	replaced := map[string]bool{}
	for _, m := range custom {
		replaced[m.Name] = true
	}
	first := true
	for _, m := range gpumodel.Builtin() {
		if replaced[m.Name] {
			continue
		}
		if !first {
			fmt.Fprintln(stdout)
		}
		first = false
		printModel(stdout, m, "built-in")
	}
	for _, m := range custom {
		if !first {
			fmt.Fprintln(stdout)
		}
		first = false
		origin := "custom"
		if gpumodel.IsBuiltin(m.Name) {
			origin = "custom, replaces the built-in model"
		}
		printModel(stdout, m, origin)
	}
	return 0
}

func printModel(w io.Writer, m gpumodel.Model, origin string) {
	mode := "MIG mode changes at once"
	if m.Architecture == gpumodel.Ampere {
		mode = "MIG mode changes need a GPU reset"
	}
	fmt.Fprintf(w, "%s (%s)\n", m.Name, origin)
	if m.ProductName != "" {
		fmt.Fprintf(w, "  product %s\n", m.ProductName)
	}
	fmt.Fprintf(w, "  PCI device id 0x%08X, %d MiB, %d SMs, %s: %s\n", m.PCIDeviceID, m.MemoryMiB, m.SMs, m.Architecture, mode)
	memorySlices, computeSlices := m.Geometry()
	fmt.Fprintf(w, "  %d memory slices, %d compute slices\n", memorySlices, computeSlices)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PROFILE\tID\tQUERY\tSLICES\tMEMORY SLICES\tMEMORY MiB\tSMs\tMAX\tPLACEMENTS\tCE/DEC/ENC/JPG/OFA")
	for _, p := range m.Profiles {
		starts := make([]string, len(p.Placements))
		for i, s := range p.Placements {
			starts[i] = strconv.Itoa(s)
		}
		e := p.Engines
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t{%s}:%d\t%d/%d/%d/%d/%d\n", p.Name, p.ID, mig.QueryName(p.Query),
			p.Slices, p.MemorySlices, p.MemoryMiB, p.SMs, p.MaxCount, strings.Join(starts, ","), p.MemorySlices,
			e.CopyEngines, e.Decoders, e.Encoders, e.JPEGs, e.OFAs)
	}
	tw.Flush()
}
