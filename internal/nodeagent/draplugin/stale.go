package draplugin

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// DefaultStaleClaimCheck is how often the prepared claims are checked
// against the API server (Options.StaleClaimCheck).
const DefaultStaleClaimCheck = 10 * time.Minute

// ReleaseStale unprepares the prepared claims whose ResourceClaim is gone
// from the API server: not found, or found with another UID (deleted and
// made again under the same name). The kubelet unprepares a claim when
// its pod is done, and retries until this driver answers; it cannot when
// it lost its own record of the claim (its state directory wiped, the
// node reinstalled under the same name with the agent's state kept), and
// a claim left in the checkpoint would keep its GPU busy for good, never
// repartitioned. A claim that still exists is kept whatever its state,
// being deleted included (its pod may still run: the API server keeps it
// until the pod is done): its lifecycle is the kubelet's. A failed read
// keeps the claim. It returns the UIDs it released.
func (d *Driver) ReleaseStale(ctx context.Context) ([]string, error) {
	gone := d.goneClaims(ctx)
	if len(gone) == 0 {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var released []string
	for _, uid := range gone {
		pc, ok := d.prepared[uid]
		if !ok {
			continue // the kubelet unprepared it meanwhile
		}
		if err := d.unprepareLocked(uid); err != nil {
			return released, fmt.Errorf("releasing claim %s/%s (%s), gone from the API server: %w", pc.Namespace, pc.Name, uid, err)
		}
		d.logger.Info("Unprepared a claim gone from the API server", "claim", pc.Namespace+"/"+pc.Name, "uid", uid, "pods", pc.Pods)
		released = append(released, uid)
	}
	return released, nil
}

// goneClaims are the UIDs of prepared claims the API server says are
// gone, read without the lock: a Prepare or Unprepare is never held up by
// the API server.
func (d *Driver) goneClaims(ctx context.Context) []string {
	d.mu.Lock()
	claims := make([]struct{ uid, ns, name string }, 0, len(d.prepared))
	for uid, pc := range d.prepared {
		claims = append(claims, struct{ uid, ns, name string }{uid, pc.Namespace, pc.Name})
	}
	d.mu.Unlock()
	var gone []string
	for _, c := range claims {
		cl, err := d.opts.KubeClient.ResourceV1().ResourceClaims(c.ns).Get(ctx, c.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone = append(gone, c.uid)
		case err != nil:
			d.logger.V(2).Info("Could not check a prepared claim; it stays prepared", "claim", c.ns+"/"+c.name, "err", err)
		case string(cl.UID) != c.uid:
			gone = append(gone, c.uid)
		}
	}
	slices.Sort(gone)
	return gone
}

// releaseStaleEvery runs ReleaseStale at start and then every interval
// until ctx ends.
func (d *Driver) releaseStaleEvery(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if _, err := d.ReleaseStale(ctx); err != nil {
			d.logger.Error(err, "Releasing stale claims")
		}
	}, interval)
}
