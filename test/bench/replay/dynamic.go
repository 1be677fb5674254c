package replay

import (
	"fmt"
	"strings"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner/solver"
)

// migflexDynamic is migflex's DRA dynamic mode: every GPU starts with MIG
// on and empty, every placement is offered, an instance is made when a pod
// is scheduled and destroyed when it ends, as for first fit; but the node
// agent publishes its devices in dra.Steer's order, recomputed as its
// GPUs' use changes, and the scheduler's first fit walks that order
// (dra.FirstFit, the structured allocator's search). No planner round
// reshapes such a node: there is nothing to reshape, every placement is
// offered already. The node is the scheduler's bin-packing choice, as for
// every policy.
type migflexDynamic struct {
	// nodes caches the offers of a node's GPUs by their models: the
	// offers depend on nothing else, and every node of a shape shares
	// them (read only).
	nodes map[string]*nodeOffers
}

// nodeOffers is dynamic mode's offers for one shape of node, and the
// device names of its placements, by GPU.
type nodeOffers struct {
	offers []dra.Offer
	// names[gpu][profile@start] is the placement's device name;
	// whole[gpu] the whole GPU's.
	names []map[string]string
	whole []string
}

func (*migflexDynamic) name() string                     { return PolicyMigflexDynamic }
func (*migflexDynamic) carves() bool                     { return true }
func (*migflexDynamic) arrive(*sim, *simPod)             {}
func (*migflexDynamic) batching() (solver.Cadence, bool) { return solver.Cadence{}, false }
func (*migflexDynamic) round(*sim)                       {}
func (*migflexDynamic) started(*sim, *simPod)            {}
func (*migflexDynamic) released(*sim, *simPod)           {}
func (*migflexDynamic) setup(s *sim) error {
	for _, g := range s.f.gpus {
		g.mig = true
	}
	return nil
}

// offersOf returns the offers of n's shape, made once.
func (p *migflexDynamic) offersOf(n *node) (*nodeOffers, error) {
	models := make([]string, len(n.gpus))
	for i, g := range n.gpus {
		models[i] = g.model.m.Name
	}
	key := strings.Join(models, ",")
	if no, ok := p.nodes[key]; ok {
		return no, nil
	}
	gpus := make([]mig.GPU, len(n.gpus))
	for i, g := range n.gpus {
		gpus[i] = mig.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%d", i), Model: g.model.m.Name,
			MigCapable: true, MigEnabled: true, MigPending: true, Profiles: g.model.m.Profiles}
	}
	offers, err := dra.Offers(gpus)
	if err != nil {
		return nil, fmt.Errorf("offers of a node of %s: %w", key, err)
	}
	no := &nodeOffers{offers: offers, names: make([]map[string]string, len(offers)), whole: make([]string, len(offers))}
	for i, o := range offers {
		no.names[i] = map[string]string{}
		for _, d := range o.Devices {
			if d.MIG {
				no.names[i][placementKey(d.Profile, d.Start)] = d.Name
			} else {
				no.whole[i] = d.Name
			}
		}
	}
	p.nodes[key] = no
	return no, nil
}

func placementKey(profile string, start int) string { return fmt.Sprintf("%s@%d", profile, start) }

// carvePlan is what the scheduler's first fit takes from the node's
// devices in the order the agent steered them to.
func (p *migflexDynamic) carvePlan(s *sim, pod *simPod, n *node) ([]carved, bool) {
	// First fit at the lowest start finds devices exactly when some set of
	// them fits (one profile, placements of one size): a cheap refusal
	// before steering, which most nodes tried get.
	if _, ok := (firstFit{}).carvePlan(s, pod, n); !ok {
		return nil, false
	}
	no, err := p.offersOf(n)
	if err != nil {
		panic(fmt.Sprintf("replay: %v", err))
	}
	inUse := map[string]bool{}
	for i, g := range n.gpus {
		if g.whole >= 0 {
			inUse[no.whole[i]] = true
		}
		for _, in := range g.insts {
			inUse[no.names[i][placementKey(in.profile, in.start)]] = true
		}
	}
	profiles := make([]string, len(n.gpus))
	for i, g := range n.gpus {
		profiles[i] = profileOfResource(g.model, pod.req.res)
	}
	match := func(d dra.OfferedDevice) bool {
		if pod.req.res == resourcename.GPU {
			return !d.MIG
		}
		return d.MIG && profiles[d.GPUIndex] != "" && d.Profile == profiles[d.GPUIndex]
	}
	got, ok := dra.FirstFit(dra.Steer(no.offers, inUse), inUse, match, pod.req.count)
	if !ok {
		return nil, false
	}
	out := make([]carved, len(got))
	for i, d := range got {
		g := n.gpus[d.GPUIndex]
		if !d.MIG {
			out[i] = carved{g: g, start: -1}
			continue
		}
		out[i] = carved{g: g, profile: d.Profile, start: d.Start}
	}
	return out, true
}
