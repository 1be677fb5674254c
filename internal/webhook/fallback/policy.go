package fallback

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/platform/cli"
)

// The policy file's type, so that a future version can be told apart.
const (
	PolicyAPIVersion = "migflex.io/v1alpha1"
	PolicyKind       = "FallbackPolicy"
)

// PolicyFile is the on-disk form of the fallback policy (--config):
//
//	apiVersion: migflex.io/v1alpha1
//	kind: FallbackPolicy
//	allowDown: true          # smaller MIG profiles (default true)
//	allowUp: true            # larger MIG profiles (default true)
//	allowWholeGPU: true      # nvidia.com/gpu as the last resort (default true)
//	minMemoryGB: 10          # never fall back below this much memory (default 0)
//	chains:                  # explicit order for a requested type; replaces the derived one
//	  nvidia.com/mig-3g.40gb: [nvidia.com/mig-2g.20gb, nvidia.com/gpu]
//
// Booleans are pointers so that an absent field takes the default rather than false.
type PolicyFile struct {
	APIVersion    string              `json:"apiVersion"`
	Kind          string              `json:"kind"`
	AllowDown     *bool               `json:"allowDown,omitempty"`
	AllowUp       *bool               `json:"allowUp,omitempty"`
	AllowWholeGPU *bool               `json:"allowWholeGPU,omitempty"`
	MinMemoryGB   int                 `json:"minMemoryGB,omitempty"`
	Chains        map[string][]string `json:"chains,omitempty"`
}

// Policy is the defaulted and validated fallback policy.
type Policy struct {
	AllowDown     bool
	AllowUp       bool
	AllowWholeGPU bool
	// MinMemoryGB excludes MIG targets with less memory. A whole GPU is never
	// excluded by it.
	MinMemoryGB int
	// Chains maps a requested type to the ordered types to try instead of
	// the derived chain.
	Chains map[corev1.ResourceName][]corev1.ResourceName
}

// DefaultPolicy allows every direction and derives every chain.
func DefaultPolicy() Policy {
	return Policy{AllowDown: true, AllowUp: true, AllowWholeGPU: true}
}

// ParsePolicy decodes a policy file strictly (unknown fields are errors),
// fills in the defaults and validates the result.
func ParsePolicy(data []byte) (Policy, error) {
	var f PolicyFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return Policy{}, fmt.Errorf("decoding fallback policy: %w", err)
	}
	if f.APIVersion != PolicyAPIVersion || f.Kind != PolicyKind {
		return Policy{}, fmt.Errorf("fallback policy has apiVersion %q kind %q, want %s %s",
			f.APIVersion, f.Kind, PolicyAPIVersion, PolicyKind)
	}
	p := DefaultPolicy()
	if f.AllowDown != nil {
		p.AllowDown = *f.AllowDown
	}
	if f.AllowUp != nil {
		p.AllowUp = *f.AllowUp
	}
	if f.AllowWholeGPU != nil {
		p.AllowWholeGPU = *f.AllowWholeGPU
	}
	p.MinMemoryGB = f.MinMemoryGB
	if len(f.Chains) > 0 {
		p.Chains = make(map[corev1.ResourceName][]corev1.ResourceName, len(f.Chains))
		for from, chain := range f.Chains {
			to := make([]corev1.ResourceName, len(chain))
			for i, c := range chain {
				to[i] = corev1.ResourceName(c)
			}
			p.Chains[corev1.ResourceName(from)] = to
		}
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Validate rejects a policy with an entry that could never be used, so that a
// typo in a chain is found when the webhook starts rather than when a pod
// silently is not rewritten.
func (p Policy) Validate() error {
	var errs []error
	if p.MinMemoryGB < 0 {
		errs = append(errs, fmt.Errorf("minMemoryGB: %d is negative", p.MinMemoryGB))
	}
	keys := make([]corev1.ResourceName, 0, len(p.Chains))
	for k := range p.Chains {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, from := range keys {
		fp, ok := ParseResource(from)
		if !ok {
			errs = append(errs, fmt.Errorf("chains: %q is not nvidia.com/gpu or nvidia.com/mig-<N>g.<M>gb", from))
			continue
		}
		seen := map[corev1.ResourceName]bool{}
		for i, to := range p.Chains[from] {
			field := fmt.Sprintf("chains[%s][%d]", from, i)
			tp, ok := ParseResource(to)
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s: %q is not nvidia.com/gpu or nvidia.com/mig-<N>g.<M>gb", field, to))
				continue
			case to == from:
				errs = append(errs, fmt.Errorf("%s: %s falls back to itself", field, to))
				continue
			case seen[to]:
				errs = append(errs, fmt.Errorf("%s: %s is listed twice", field, to))
				continue
			}
			seen[to] = true
			if why := p.forbids(direction(fp, tp), tp); why != "" {
				errs = append(errs, fmt.Errorf("%s: %s can never be used: %s", field, to, why))
			}
		}
	}
	return errors.Join(errs...)
}

// forbids says why the policy rules out a target, or "" when it allows it.
func (p Policy) forbids(d Direction, to Profile) string {
	switch {
	case d == Down && !p.AllowDown:
		return "allowDown is false"
	case d == Up && !p.AllowUp:
		return "allowUp is false"
	case d == Whole && !p.AllowWholeGPU:
		return "allowWholeGPU is false"
	case !to.WholeGPU() && to.MemoryGB < p.MinMemoryGB:
		return fmt.Sprintf("%dGB is below minMemoryGB %d", to.MemoryGB, p.MinMemoryGB)
	}
	return ""
}

// PodPolicy is a pod's own restriction of the fallback, from the annotation
// migflex.io/fallback-policy. It only narrows the cluster policy.
type PodPolicy string

const (
	PodPolicyNone PodPolicy = "none"
	PodPolicyDown PodPolicy = "down"
	PodPolicyUp   PodPolicy = "up"
	PodPolicyAny  PodPolicy = "any"
)

// allows reports whether the pod's policy permits a move in direction d. A
// whole GPU counts as allowed by "down" and "up" alike: it is the last resort
// of either, and the cluster policy governs it (allowWholeGPU).
func (pp PodPolicy) allows(d Direction) bool {
	switch pp {
	case PodPolicyAny:
		return true
	case PodPolicyDown:
		return d != Up
	case PodPolicyUp:
		return d != Down
	}
	return false
}

func parsePodPolicy(s string) (PodPolicy, error) {
	switch pp := PodPolicy(s); pp {
	case PodPolicyNone, PodPolicyDown, PodPolicyUp, PodPolicyAny:
		return pp, nil
	}
	return "", fmt.Errorf("annotation %s: %s is not one of none, down, up, any", AnnotationPolicy, quote(s))
}

// Mode is what "a type fits" means.
type Mode string

const (
	// ModeExistence: some eligible node has the type (Allocatable > 0). The
	// scheduler, not the webhook, decides whether a device is free.
	ModeExistence Mode = "existence"
	// ModeCapacity: additionally prefer types with a free device
	// (Allocatable minus the requests of the pods bound to the node).
	ModeCapacity Mode = "capacity"
)

// Modes are the values of --mode.
var Modes = cli.NewEnum("mode", ModeExistence, ModeCapacity)

// Unsatisfiable is what to do with a pod for which no GPU type fits.
type Unsatisfiable string

const (
	UnsatisfiableDeny  Unsatisfiable = "deny"
	UnsatisfiableAllow Unsatisfiable = "allow"
)

// Unsatisfiables are the values of --on-unsatisfiable and
// --on-insufficient-count.
var Unsatisfiables = cli.NewEnum("action", UnsatisfiableDeny, UnsatisfiableAllow)
