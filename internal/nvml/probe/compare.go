package probe

import (
	"fmt"
	"slices"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
)

// Difference is one way a probed model differs from another.
type Difference struct {
	// Model is the probed model's name; Field says what differs ("memoryMiB",
	// "profile 1g.10gb: placements", "profile 1g.24gb+me.all: missing").
	Model, Field string
	// Got is the probed value, Want the other model's ("" when absent).
	Got, Want string
}

func (d Difference) String() string {
	return fmt.Sprintf("%s: %s: probe %s, built-in %s", d.Model, d.Field, orNone(d.Got), orNone(d.Want))
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Compare lists how got differs from want: identity (PCI device id,
// memory, architecture, geometry) and every profile field, profiles matched
// by name. Not compared: names (the caller matched them), the product name
// (the simulator reports its model name), and the whole GPU's SM count, which
// NVML reports only for MIG devices (a probe writes the largest profile's).
func Compare(got, want gpumodel.Model) []Difference {
	var out []Difference
	diff := func(field string, g, w any) {
		gs, ws := fmt.Sprint(g), fmt.Sprint(w)
		if gs != ws {
			out = append(out, Difference{Model: got.Name, Field: field, Got: gs, Want: ws})
		}
	}
	diff("pciDeviceID", fmt.Sprintf("0x%08X", got.PCIDeviceID), fmt.Sprintf("0x%08X", want.PCIDeviceID))
	diff("memoryMiB", got.MemoryMiB, want.MemoryMiB)
	diff("architecture", got.Architecture, want.Architecture)
	gm, gc := got.Geometry()
	wm, wc := want.Geometry()
	diff("memorySlices", gm, wm)
	diff("computeSlices", gc, wc)

	wantProfiles := map[string]gpumodel.Profile{}
	for _, p := range want.Profiles {
		wantProfiles[p.Name] = p
	}
	seen := map[string]bool{}
	for _, g := range got.Profiles {
		seen[g.Name] = true
		w, ok := wantProfiles[g.Name]
		if !ok {
			out = append(out, Difference{Model: got.Name, Field: "profile " + g.Name, Got: fmt.Sprintf("id %d", g.ID)})
			continue
		}
		f := func(field string) string { return "profile " + g.Name + ": " + field }
		diff(f("id"), g.ID, w.ID)
		diff(f("query"), mig.QueryName(g.Query), mig.QueryName(w.Query))
		diff(f("slices"), g.Slices, w.Slices)
		diff(f("memorySlices"), g.MemorySlices, w.MemorySlices)
		diff(f("memoryMiB"), g.MemoryMiB, w.MemoryMiB)
		diff(f("sms"), g.SMs, w.SMs)
		diff(f("maxCount"), g.MaxCount, w.MaxCount)
		diff(f("placements"), sorted(g.Placements), sorted(w.Placements))
		diff(f("engines (CE/DEC/ENC/JPG/OFA)"), engines(g.Engines), engines(w.Engines))
		// A probe sees compute-instance profiles only where an instance
		// exists; elsewhere there is nothing to compare.
		if len(g.ComputeProfiles) > 0 {
			diff(f("computeProfiles"), computeProfiles(g.ComputeProfiles), computeProfiles(w.EffectiveComputeProfiles()))
		}
	}
	for _, w := range want.Profiles {
		if !seen[w.Name] {
			out = append(out, Difference{Model: got.Name, Field: "profile " + w.Name, Want: fmt.Sprintf("id %d", w.ID)})
		}
	}
	return out
}

// CompareWithBuiltin compares every model of a probe with the built-in model
// of its name. A model without one is a difference too.
func CompareWithBuiltin(r *Result, builtins []gpumodel.Model) []Difference {
	var out []Difference
	for _, m := range r.Config.Models {
		i := slices.IndexFunc(builtins, func(b gpumodel.Model) bool { return b.Name == m.Name })
		if i < 0 {
			out = append(out, Difference{Model: m.Name, Field: "model", Got: m.ProductName, Want: ""})
			continue
		}
		out = append(out, Compare(m, builtins[i])...)
	}
	return out
}

func sorted(s []int) []int { return slices.Sorted(slices.Values(s)) }

func engines(e mig.Engines) string {
	return fmt.Sprintf("%d/%d/%d/%d/%d", e.CopyEngines, e.Decoders, e.Encoders, e.JPEGs, e.OFAs)
}

func computeProfiles(cps []gpumodel.ComputeProfile) string {
	cps = slices.Clone(cps)
	slices.SortFunc(cps, func(a, b gpumodel.ComputeProfile) int { return a.Query - b.Query })
	s := ""
	for _, c := range cps {
		s += fmt.Sprintf("[%s %d slices %d SMs x%d %v]", mig.ComputeQueryName(c.Query), c.Slices, c.SMs, c.MaxCount, sorted(c.Placements))
	}
	return s
}
