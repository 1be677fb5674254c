package deviceplugin

import (
	"context"
	"maps"
	"time"
)

// drainSettle is how long after the latest Allocate that handed out one of
// the drained devices Drain still waits before it returns. See Drain.
const drainSettle = time.Second

// Drain marks the devices with the given IDs (MIG device UUIDs, GPU UUIDs)
// as draining, because their GPU is about to be repartitioned: every
// server sends them as unhealthy in its next ListAndWatch message, so the
// kubelet stops offering them, and Allocate refuses them with
// FailedPrecondition. Draining is independent of health: a faulty device
// that drains stays unhealthy until both end. It ends for an ID with
// Undrain, or with the first Update whose layout no longer has the ID (the
// instance was destroyed). IDs not served now are marked all the same,
// and dropped by the next Update.
//
// Drain returns once no Allocate that accepted one of the IDs is still in
// flight: an Allocate checks the marks and builds its answer holding a
// gate shared with every other Allocate, which Drain takes exclusively
// after setting the marks. So when Drain returns, every Allocate that
// handed out one of the IDs has answered the kubelet, and the kubelet
// will record those assignments in its pod-resources view. While Drain
// waits, new Allocates of any device wait too (a waiting writer lets no
// reader in); those it waits for only build an answer, so it is short.
//
// Will, not has: the kubelet records an assignment only after it has read
// our answer, so a pod-resources List made at once could still miss an
// Allocate answered microseconds before. Drain therefore also waits until
// drainSettle has passed since the latest Allocate that handed out one of
// the IDs. That costs nothing in the usual case (none of the devices was
// handed out in the last second) and gives the kubelet a second, against
// the microseconds it needs, in the rare one; it narrows the window
// without closing it: no API tells when the kubelet has recorded an
// assignment.
//
// If ctx ends first, Drain undrains ids and returns ctx's error.
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

// setDrainingLocked hands the draining IDs to every server. It always
// signals a change: Resources shows Draining even where the kubelet's list
// stays the same (a device already unhealthy).
func (m *Manager) setDrainingLocked() {
	for _, s := range m.servers {
		s.setDraining(maps.Clone(m.draining))
	}
	m.notify()
}
