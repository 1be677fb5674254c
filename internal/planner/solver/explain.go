package solver

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// why classifies one GPU for one resource, for explanations.
type why int

const (
	whyCan       why = iota // could serve one device now
	whyNoProfile            // its model has no such profile (or no MIG)
	whyNoRoom               // no room next to instances in use
	whyCap                  // the round's cap on GPUs changed
	whyCooldown
	whyHeld     // kept whole for a pod waiting for several GPUs
	whyReserved // reserved for a pod waiting for several GPUs
	whyFrozen
	whyOptOut
	whyUnknown
	whyCount
)

// whyText says what GPUs of a kind do: for one GPU, then for several.
var whyText = [whyCount][2]string{
	whyCan:       {"could take one", "could take one"},
	whyNoProfile: {"is of a model without it", "are of a model without it"},
	whyNoRoom:    {"has no room for it next to instances in use", "have no room for it next to instances in use"},
	whyCap:       {"waits for the round's limit of GPUs repartitioned", "wait for the round's limit of GPUs repartitioned"},
	whyCooldown:  {"is cooling down after a change", "are cooling down after a change"},
	whyHeld:      {"is on a node kept whole for a pod waiting for several GPUs on one node", "are on nodes kept whole for a pod waiting for several GPUs on one node"},
	whyReserved:  {"is reserved for a pod waiting for several GPUs on one node", "are reserved for pods waiting for several GPUs on one node"},
	whyFrozen:    {"is on a node whose layout must not change now", "are on nodes whose layout must not change now"},
	whyOptOut:    {"is on a node not opted in to the planner, with no free instance of it", "are on nodes not opted in to the planner, with no free instance of it"},
	whyUnknown:   {"has a layout or model the planner does not understand", "have a layout or model the planner does not understand"},
}

// count is "1 GPU" or "3 GPUs".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func (r *round) classify(k classKey, c int32, res int32) why {
	if r.option(c, res).state == optOK {
		return whyCan
	}
	if k.reserved {
		return whyReserved
	}
	if res == 0 {
		if k.whole || k.occ != 0 {
			return whyNoRoom
		}
		return r.blocked(k)
	}
	if k.tab < 0 || r.res.prof[k.tab][res] < 0 {
		if k.block == blockUnknown && k.tab >= 0 {
			return whyUnknown
		}
		return whyNoProfile
	}
	if k.whole {
		if k.block == blockUnknown {
			return whyUnknown
		}
		return whyNoRoom
	}
	if r.tabs[k.tab].room(k.occ, int(r.res.prof[k.tab][res])) == 0 {
		return whyNoRoom
	}
	if w := r.blocked(k); w != whyNoRoom && w != whyCap || !k.held {
		return w
	}
	return whyHeld
}

func (r *round) blocked(k classKey) why {
	switch {
	case k.block == blockCooldown:
		return whyCooldown
	case k.block == blockFrozen:
		return whyFrozen
	case k.block == blockOptOut:
		return whyOptOut
	case k.block == blockUnknown:
		return whyUnknown
	case r.capped && !k.touched:
		return whyCap
	}
	return whyNoRoom
}

// explain says why no node can serve the pod. Pods with the same
// constraints and needs get the same words in one round.
func (r *round) explain(el eligibility, ps *podState) string {
	key := el.key + "|" + needsString(ps.needs) + "|" + strconv.FormatBool(r.capped)
	if s, ok := r.diag[key]; ok {
		return s
	}
	s := r.diagnose(el, ps)
	r.diag[key] = s
	return s
}

func (r *round) diagnose(el eligibility, ps *podState) string {
	// The first need is the largest device: the one that decides.
	res := ps.needs[0].res
	var counts [whyCount]int
	gpus, nodes := 0, 0
	frozen := ""
	var coolEnds time.Time // the first cooldown to end, of GPUs it leaves out
	cooled := func(end time.Time) {
		if !end.IsZero() && (coolEnds.IsZero() || end.Before(coolEnds)) {
			coolEnds = end
		}
	}
	countGPU := func(gi int32) {
		g := &r.gpus[gi]
		w := r.classify(g.key, g.class, res)
		counts[w]++
		if w == whyFrozen && frozen == "" {
			n := r.nodes[g.node]
			frozen = fmt.Sprintf("%s: %s", n.name, n.n.Frozen)
		}
		if w == whyCooldown {
			cooled(g.g.LastChanged.Add(r.pol.Cooldown))
		}
	}
	for _, g := range el.groups {
		gs := &r.groups[g]
		nodes += len(gs.nodes)
		for _, ni := range gs.nodes {
			if f := r.nodes[ni].n.Frozen; f != "" && frozen == "" {
				frozen = fmt.Sprintf("%s: %s", r.nodes[ni].name, f)
			}
		}
		for c, n := range gs.classCount {
			if n > 0 {
				w := r.classify(r.keys[c], c, res)
				counts[w] += int(n)
				gpus += int(n)
				if w == whyCooldown {
					cooled(r.groupCoolEnd(g, c))
				}
			}
		}
	}
	for _, ni := range el.nodes {
		nodes++
		for _, gi := range r.nodes[ni].gpus {
			gpus++
			countGPU(gi)
		}
	}
	var b strings.Builder
	name := r.res.names[res]
	if len(ps.needs) == 1 && ps.needs[0].count == 1 {
		fmt.Fprintf(&b, "no GPU can take %s: of the %s on the %s it may be scheduled to", name, count(gpus, "GPU", "GPUs"), count(nodes, "node", "nodes"))
	} else {
		fmt.Fprintf(&b, "no node it may be scheduled to can hold %s on one node: of the %s on the %s", describeNeeds(r, ps.needs), count(gpus, "GPU", "GPUs"), count(nodes, "node", "nodes"))
	}
	first := true
	for w := range whyCount {
		if counts[w] == 0 {
			continue
		}
		if first {
			b.WriteString(", ")
			first = false
		} else {
			b.WriteString("; ")
		}
		form := 1
		if counts[w] == 1 {
			form = 0
		}
		fmt.Fprintf(&b, "%d %s", counts[w], whyText[w][form])
		switch why(w) {
		case whyCooldown:
			fmt.Fprintf(&b, " (cooldown %s; the first ends at %s)", r.pol.Cooldown, coolEnds.UTC().Format(time.RFC3339))
		case whyFrozen:
			if frozen != "" {
				fmt.Fprintf(&b, " (%s)", frozen)
			}
		case whyCap:
			fmt.Fprintf(&b, " (%d)", r.pol.MaxGPUsPerRound)
		}
	}
	if gpus == 0 {
		b.WriteString(", none has a GPU")
	}
	return b.String()
}

// groupCoolEnd is when the first cooldown of the group's GPUs of class c
// ends, worked out once a round.
func (r *round) groupCoolEnd(g, c int32) time.Time {
	key := [2]int32{g, c}
	if end, ok := r.coolEnds[key]; ok {
		return end
	}
	var end time.Time
	for _, ni := range r.groups[g].nodes {
		for _, gi := range r.nodes[ni].gpus {
			if gs := &r.gpus[gi]; gs.class == c {
				if e := gs.g.LastChanged.Add(r.pol.Cooldown); end.IsZero() || e.Before(end) {
					end = e
				}
			}
		}
	}
	if r.coolEnds == nil {
		r.coolEnds = map[[2]int32]time.Time{}
	}
	r.coolEnds[key] = end
	return end
}

func describeNeeds(r *round, needs []need) string {
	parts := make([]string, len(needs))
	for i, n := range needs {
		parts[i] = fmt.Sprintf("%d x %s", n.count, r.res.names[n.res])
	}
	return strings.Join(parts, " + ")
}
