package planner

import "time"

// Bounds of writeBackoff's delay.
const (
	minWriteBackoff = time.Second
	maxWriteBackoff = 5 * time.Minute
)

// writeBackoff spaces the writes to a Node whose last write was refused
// for a reason other than a conflict: RBAC, a ValidatingAdmissionPolicy,
// a webhook, the API server's own errors. Rounds come a second apart
// while pods wait, and each would send the same refused write again for
// as long as the cause lasts. A conflict is not backed off: it says the
// Node moved on, and the next round plans from the new one.
type writeBackoff map[string]writeFailure

// writeFailure is a Node's run of refused writes.
type writeFailure struct {
	count int
	until time.Time
}

// blocked tells whether node's writes wait at now, and until when.
func (b writeBackoff) blocked(node string, now time.Time) (time.Time, bool) {
	f, ok := b[node]
	if !ok || !now.Before(f.until) {
		return time.Time{}, false
	}
	return f.until, true
}

// failed records a refused write to node at now and returns when the next
// may be sent: a second later, doubling with each failure in a row, at
// most five minutes.
func (b writeBackoff) failed(node string, now time.Time) time.Time {
	f := b[node]
	f.count++
	d := maxWriteBackoff
	if f.count <= 16 {
		d = min(minWriteBackoff<<(f.count-1), maxWriteBackoff)
	}
	f.until = now.Add(d)
	b[node] = f
	return f.until
}

// succeeded forgets node's failures.
func (b writeBackoff) succeeded(node string) { delete(b, node) }
