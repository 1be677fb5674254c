package migconfig

import (
	"fmt"

	"github.com/migflex/migflex/internal/domain/mig"
)

// Resolved is a configuration checked against a node's GPUs and planned.
type Resolved struct {
	// Name is the configuration's.
	Name string
	// Desired is the state of every GPU the configuration covers.
	Desired []Desired
	// Plan takes the GPUs from what they are to Desired.
	Plan Plan
	// Notes say what of the configuration does not apply to the node (see
	// Validation.Notes).
	Notes []string
}

// PlanConfig checks cfg against gpus in scope (ValidateFor) and plans it
// from their layout now (MakePlan). The node agent and `device-plugin
// validate` both decide through it.
func PlanConfig(cfg Config, gpus []mig.GPU, scope Scope) (Resolved, error) {
	v, err := ValidateFor(cfg, gpus, scope)
	if err != nil {
		return Resolved{}, err
	}
	plan, err := MakePlan(gpus, v.Desired)
	if err != nil {
		return Resolved{}, err
	}
	return Resolved{Name: cfg.Name, Desired: v.Desired, Plan: plan, Notes: v.Notes}, nil
}

// Resolve parses doc, selects the configuration name names (Spec.Select:
// "" is "selected", or the only one) and plans it on gpus (PlanConfig).
// Every error is the document or the choice not fitting the node; those of
// the configuration itself name it.
func Resolve(doc []byte, name string, gpus []mig.GPU, scope Scope) (Resolved, error) {
	spec, err := Parse(doc)
	if err != nil {
		return Resolved{}, err
	}
	cfg, err := spec.Select(name)
	if err != nil {
		return Resolved{}, err
	}
	r, err := PlanConfig(cfg, gpus, scope)
	if err != nil {
		return Resolved{}, fmt.Errorf("config %q: %w", cfg.Name, err)
	}
	return r, nil
}
