// Package simmodels gives the planner the simulator's GPU models: the same
// MIG profile tables the simulated NVML serves, so that tests and the trace
// replay plan against exactly what the agent would find.
package simmodels

import (
	"github.com/migflex/migflex/internal/mig"
	"github.com/migflex/migflex/internal/nvml/sim"
	"github.com/migflex/migflex/internal/planner"
)

// Models returns the simulator's built-in models as planner models.
func Models() []planner.Model {
	var out []planner.Model
	for _, m := range sim.BuiltinModels() {
		out = append(out, Convert(m))
	}
	return out
}

// Convert turns one simulator model into a planner model.
func Convert(m sim.Model) planner.Model {
	pm := planner.Model{Name: m.Name}
	for _, p := range m.Profiles {
		pm.Profiles = append(pm.Profiles, mig.Profile{
			Name: p.Name, ID: p.ID, Query: p.Query, Slices: p.Slices, MemorySlices: p.MemorySlices,
			MemoryMB: p.MemoryMiB, SMs: p.SMs, MaxCount: p.MaxCount, Placements: append([]int(nil), p.Placements...),
		})
	}
	return pm
}

// Get returns the built-in model named name.
func Get(name string) (planner.Model, bool) {
	for _, m := range Models() {
		if m.Name == name {
			return m, true
		}
	}
	return planner.Model{}, false
}
