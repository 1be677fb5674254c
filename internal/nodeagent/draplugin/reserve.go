package draplugin

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// reservation is what the node's reservation asks of the driver: the GPUs
// held, by index, and the taint's value (the pod's UID). pod names it in
// the log.
type reservation struct {
	gpus []int
	uid  string
	pod  string
}

func (r *reservation) equal(o *reservation) bool {
	if r == nil || o == nil {
		return r == o
	}
	return r.uid == o.uid && r.pod == o.pod && slices.Equal(r.gpus, o.gpus)
}

// Reserve makes r the node's reservation (nodeinfo.AnnotationReservation),
// nil ending it: while the reserved GPUs are not all free and whole, every
// device of theirs no claim holds is published with a NoSchedule taint
// (dra.TaintReserved, valued the pod's UID), or left out of the slices
// where the API server drops taints; once they all are, the taints are
// lifted together (dra.Held decides). The agent calls it when the Node's
// reservation changes and at its deadline (the agent's own timer ends it);
// the driver re-decides by itself when claims take or leave devices (its
// Prepare, Unprepare and ClaimEvents) and when the GPUs are published
// again. A reservation that changes nothing published writes nothing.
func (d *Driver) Reserve(r *nodeinfo.Reservation) {
	var next *reservation
	if r != nil {
		next = &reservation{gpus: slices.Clone(r.GPUs), uid: string(r.UID), pod: r.Pod}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if next.equal(d.resv) {
		return
	}
	d.resv = next
	d.reholdLocked(d.logger, "reservation")
}

// heldLocked is what the reservation keeps from new claims now: dra.Held
// on the devices published for the GPUs (in dynamic mode every offered
// device, placements and whole GPUs) and the devices claims hold.
func (d *Driver) heldLocked() dra.Hold {
	if d.resv == nil {
		return dra.Hold{Why: "no reservation"}
	}
	devs := d.devices
	if d.mode == ModeDynamic {
		devs = nil
		for _, o := range d.offers {
			for _, dev := range o.Devices {
				devs = append(devs, dev.Device)
			}
		}
	}
	return dra.Held(d.resv.gpus, d.gpus, devs, d.inUseLocked())
}

// resvValue is the reserved taint's value: the pod's UID.
func (d *Driver) resvValue() string {
	if d.resv == nil {
		return ""
	}
	return d.resv.uid
}

// reholdLocked republishes when what the reservation keeps from new
// claims differs from what is published (the devices, or the pod they are
// kept for), and only then: every slice write has a cause.
func (d *Driver) reholdLocked(logger klog.Logger, cause string) {
	if !d.started {
		return
	}
	h := d.heldLocked()
	if slices.Equal(h.Devices, d.resvHeld) && (len(h.Devices) == 0 || d.resvValue() == d.resvHeldFor) {
		return
	}
	if err := d.publishLocked(); err != nil {
		logger.Error(err, "Republishing the reserved GPUs' devices; the previous slices stay", "cause", cause)
	}
}

// holdLocked applies the reservation to res, the pool about to be
// published: the devices dra.Held names get the reserved taint, or are
// left out where the API server drops taints. It returns what it held, for
// publishLocked to record once the publication is handed over.
func (d *Driver) holdLocked(res *resourceslice.DriverResources) dra.Hold {
	h := d.heldLocked()
	if len(h.Devices) == 0 {
		return h
	}
	if d.taintsDropped {
		for name, pool := range res.Pools {
			for i := range pool.Slices {
				pool.Slices[i].Devices = slices.DeleteFunc(pool.Slices[i].Devices, func(dev resourceapi.Device) bool {
					return slices.Contains(h.Devices, dev.Name)
				})
			}
			res.Pools[name] = pool
		}
		return h
	}
	dra.TaintDevices(res, h.Devices, dra.ReservedTaint(d.resvValue()))
	return h
}

// noteHeldLocked records what a publication held and logs when it
// changed.
func (d *Driver) noteHeldLocked(h dra.Hold) {
	value := d.resvValue()
	if slices.Equal(h.Devices, d.resvHeld) && (len(h.Devices) == 0 || value == d.resvHeldFor) {
		return
	}
	log := d.logger.WithValues("why", h.Why)
	if d.resv != nil {
		log = log.WithValues("pod", d.resv.pod, "uid", d.resv.uid, "gpus", d.resv.gpus)
	}
	switch {
	case len(h.Devices) == 0:
		log.Info("Offering the reserved GPUs' devices to every claim again")
	case d.taintsDropped:
		log.Info("Withholding the reserved GPUs' free devices: left out of the ResourceSlices (the API server drops device taints)", "devices", h.Devices)
	default:
		log.Info("Withholding the reserved GPUs' free devices: tainted "+dra.TaintReserved, "devices", h.Devices)
	}
	d.resvHeld, d.resvHeldFor = h.Devices, value
}
