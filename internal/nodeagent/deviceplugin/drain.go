package deviceplugin

import (
	"context"
	"maps"
	"time"
)

// drainSettle is how long after the latest Allocate that handed out one of
// the drained devices Drain still waits before it returns. See Drain.
const drainSettle = time.Second

// Drain marks the devices with these IDs (MIG device or GPU UUIDs) as
// draining because their GPU is about to be repartitioned: servers send
// them as unhealthy, whatever their health, and Allocate refuses them with
// FailedPrecondition. Undrain, or an Update without the ID, ends it. Drain
// returns once every Allocate that handed one of them out has answered,
// and drainSettle after the latest such answer, so that a pod-resources
// List made then sees those pods (docs/ARCHITECTURE.md, "A repartition, in
// order"). If ctx ends first, Drain undrains ids and returns ctx's error.
func (m *Manager) Drain(ctx context.Context, ids []string) error {
	m.mu.Lock()
	for _, id := range ids {
		m.draining[id] = true
	}
	m.setDrainingLocked()
	servers := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		servers = append(servers, s)
	}
	m.mu.Unlock()

	done := make(chan struct{})
	go func() {
		// Allocates that hold the gate shared may have accepted one of
		// ids before it was marked; new ones see the mark.
		m.gate.Lock()
		//lint:ignore SA2001 taking the gate is the point: it waits for the Allocates in flight.
		m.gate.Unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		m.Undrain(ids)
		return ctx.Err()
	}

	var last time.Time
	for _, s := range servers {
		if t := s.lastAnswered(ids); t.After(last) {
			last = t
		}
	}
	if wait := time.Until(last.Add(m.settle)); !last.IsZero() && wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			m.Undrain(ids)
			return ctx.Err()
		}
	}
	return nil
}

// Undrain ends the draining of ids (see Drain): the devices go back to
// their own health and Allocate accepts them again. IDs that do not drain
// are ignored.
func (m *Manager) Undrain(ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.draining, id)
	}
	m.setDrainingLocked()
}

// Withhold replaces the IDs a reservation keeps from the kubelet (MIG
// device or GPU UUIDs): servers send them as unhealthy and Allocate
// refuses them, as for draining devices, until a later Withhold leaves
// them out. The set is apart from Drain's, so that Undrain after a
// repartition does not offer a withheld device, and it stays across
// layouts: a reserved GPU made whole is withheld as soon as it is served.
func (m *Manager) Withhold(ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.withheld = map[string]bool{}
	for _, id := range ids {
		m.withheld[id] = true
	}
	m.setDrainingLocked()
}

// blockedLocked is what servers treat as draining: the devices drained and
// those withheld.
func (m *Manager) blockedLocked() map[string]bool {
	out := maps.Clone(m.draining)
	maps.Copy(out, m.withheld)
	return out
}

// setDrainingLocked hands the draining and withheld IDs to every server.
// It always signals a change: Resources shows Draining even where the
// kubelet's list stays the same (a device already unhealthy).
func (m *Manager) setDrainingLocked() {
	for _, s := range m.servers {
		s.setDraining(m.blockedLocked())
	}
	m.notify()
}
