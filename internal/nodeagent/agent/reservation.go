package agent

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// Withholder is a Server that can keep devices from the kubelet for a
// reservation (nodeinfo.AnnotationReservation): the device plugin sends
// them as unhealthy and refuses them in Allocate, as it does draining
// devices, but under a set of its own, so that the end of a repartition's
// drain does not offer them again.
type Withholder interface {
	// Withhold replaces the IDs withheld (MIG device or GPU UUIDs); none
	// offers every device again.
	Withhold(ids []string)
}

// Reserver is a Server that decides by itself which devices a
// reservation keeps from other pods: the DRA server, whose driver knows
// the claims as they are allocated and prepared, and taints the reserved
// GPUs' free devices in its ResourceSlices until they are all free and
// whole (draplugin.Driver.Reserve). The agent hands it the Node's
// reservation while it is active, and nil from its deadline on, by its
// own timer.
type Reserver interface {
	// Reserve makes r the node's reservation; nil ends it.
	Reserve(r *nodeinfo.Reservation)
}

// withholding is what a reservation keeps from the kubelet now.
type withholding struct {
	// ids are the device IDs withheld, sorted.
	ids []string
	// until is when the answer changes by itself (the deadline); zero:
	// never.
	until time.Time
	// why says it in words, for the log.
	why string
}

// withheld decides which devices a reservation keeps from the kubelet: of
// the GPUs it holds, every device no pod holds (the GPU's own UUID, and
// its MIG instances'), until all its GPUs are whole (MIG off) and free at
// once, when nothing is withheld any more, so that the reserved pod, which
// waits for all of them, finds them together. The kubelet cannot give a
// device to one pod alone: once offered they go to whichever pod the
// scheduler takes first, the oldest pending pod of the highest priority,
// which the reserved pod usually is (the planner reserves in that order).
// A device a pod holds is never withheld. From the deadline on, nothing
// is: a planner that stopped strands no node. inUse maps the device IDs
// pods hold to them.
func withheld(r *nodeinfo.Reservation, gpus []mig.GPU, inUse map[string][]string, now time.Time) withholding {
	if r == nil {
		return withholding{why: "no reservation"}
	}
	if !r.Active(now) {
		return withholding{why: "its deadline passed"}
	}
	busy := func(id string) bool { return id != "" && len(inUse[id]) > 0 }
	var ids []string
	ready := true
	for _, idx := range r.GPUs {
		i := slices.IndexFunc(gpus, func(g mig.GPU) bool { return g.Index == idx })
		if i < 0 {
			// A GPU the node does not have cannot free: hold the others
			// until the deadline (the planner ends the reservation).
			ready = false
			continue
		}
		g := gpus[i]
		free := !busy(g.UUID)
		for _, in := range g.Instances {
			if busy(in.UUID) {
				free = false
			} else if in.UUID != "" {
				ids = append(ids, in.UUID)
			}
		}
		if free {
			// Whole or not: a whole GPU comes back as this UUID once its
			// MIG mode changes, and must not be offered in between.
			ids = append(ids, g.UUID)
		}
		if !free || g.MigEnabled || g.MigPending || len(g.Instances) > 0 {
			ready = false
		}
	}
	if ready {
		return withholding{until: r.Deadline, why: "all its GPUs are free and whole: offered at once"}
	}
	slices.Sort(ids)
	return withholding{ids: slices.Compact(ids), until: r.Deadline, why: "waiting for all its GPUs to be free and whole"}
}

// reservation reads the node's reservation; nil when there is none or it
// does not parse (logged once per value).
func (a *Agent) reservation(node *corev1.Node) *nodeinfo.Reservation {
	v, ok := node.Annotations[nodeinfo.AnnotationReservation]
	if !ok {
		return nil
	}
	r, err := nodeinfo.ParseReservation(v)
	if err != nil {
		if a.resvBad != v {
			a.resvBad = v
			a.log.Error(err, "Ignoring the Node's reservation: nothing is withheld")
		}
		return nil
	}
	a.resvBad = ""
	return &r
}

// honourReservation withholds, through the Server, what the node's
// reservation keeps from the kubelet now (see withheld), and sets when to
// look again (the deadline). It calls the Server only when that changed.
func (a *Agent) honourReservation(node *corev1.Node) {
	if node == nil {
		return
	}
	r := a.reservation(node)
	if rs, ok := a.opts.Server.(Reserver); ok {
		a.reserveThrough(rs, r)
		return
	}
	w := withheld(r, a.gpus, a.inUse, a.opts.now())
	a.resvUntil = w.until
	if slices.Equal(w.ids, a.resvIDs) {
		return
	}
	wh, ok := a.opts.Server.(Withholder)
	if !ok {
		if !a.resvUnsupported && len(w.ids) > 0 {
			a.resvUnsupported = true
			a.log.Info("The Node carries a reservation this agent cannot honour: its devices are not served through the device plugin", "reservation", r.String())
		}
		return
	}
	wh.Withhold(w.ids)
	a.resvIDs = w.ids
	log := a.log.WithValues("why", w.why)
	if r != nil {
		log = log.WithValues("reservation", r.String())
	}
	if len(w.ids) > 0 {
		log.Info("Withholding devices for a reservation", "devices", w.ids)
	} else {
		log.Info("Offering the reserved devices again")
	}
}

// reserveThrough hands a Reserver the node's reservation while it is
// active, nil once it is not (none, unreadable, or its deadline passed),
// and sets when to look again (the deadline). It calls the Reserver only
// when that changed.
func (a *Agent) reserveThrough(rs Reserver, r *nodeinfo.Reservation) {
	var active *nodeinfo.Reservation
	key, why := "", "no reservation"
	a.resvUntil = time.Time{}
	if r != nil {
		why = "its deadline passed"
		if r.Active(a.opts.now()) {
			active, a.resvUntil = r, r.Deadline
			// The annotation's value names it: pod, UID, GPUs, times.
			key, _ = r.Encode()
		}
	}
	if key == a.resvPassed {
		return
	}
	a.resvPassed = key
	rs.Reserve(active)
	if active != nil {
		a.log.Info("Handing the reservation to the device server: it keeps the reserved GPUs' free devices from other pods until they are all free and whole", "reservation", active.String())
	} else {
		a.log.Info("No reservation for the device server to honour", "why", why)
	}
}
