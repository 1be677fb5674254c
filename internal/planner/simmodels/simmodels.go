// Package simmodels gives the planner the built-in GPU models
// (internal/domain/gpumodel): the same MIG profile tables the simulated NVML
// serves, so that tests and the trace replay plan against exactly what the
// agent would find. It is pure, like the planner.
package simmodels

import (
	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/planner/solver"
)

// Models returns the built-in models as planner models.
func Models() []solver.Model {
	var out []solver.Model
	for _, m := range gpumodel.Builtin() {
		out = append(out, Convert(m))
	}
	return out
}

// Convert turns one GPU model into a planner model.
func Convert(m gpumodel.Model) solver.Model {
	return solver.Model{Name: m.Name, Profiles: m.MIGProfiles()}
}

// Get returns the built-in model named name.
func Get(name string) (solver.Model, bool) {
	m, ok := gpumodel.Lookup(name)
	if !ok {
		return solver.Model{}, false
	}
	return Convert(m), true
}
