package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/nodeagent/podresources"
)

// evict asks the API server to evict each pod ("namespace/name") through
// the Eviction API, so PodDisruptionBudgets are respected; it never
// deletes a pod itself. It returns a note for the pending reason. A pod a
// budget protects (429) is left for the next retry; a pod already gone
// from the API server only waits for the kubelet to release its devices.
// The error lists the evictions that failed otherwise (for example 403:
// the agent lacks create on pods/eviction).
func (a *Agent) evict(ctx context.Context, pods []string) (string, error) {
	var evicted, blocked, gone, waiting []string
	var errs []error
	for _, key := range pods {
		if strings.HasPrefix(key, podresources.ClaimHolder) {
			// An allocated claim no pod has reserved yet: there is no pod
			// to evict, and the claim is its user's to delete.
			waiting = append(waiting, key)
			continue
		}
		ns, name, _ := strings.Cut(key, "/")
		// What EvictV1 sends, without client-go's retries: a 429 carries
		// Retry-After, which client-go would sleep through up to ten
		// times, blocking the agent's loop for minutes. The loop retries.
		err := a.opts.Client.CoreV1().RESTClient().Post().
			Namespace(ns).Resource("pods").Name(name).SubResource("eviction").
			MaxRetries(0).
			Body(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}).
			Do(ctx).Error()
		switch {
		case err == nil:
			evicted = append(evicted, key)
			a.log.Info("Evicted a pod that holds a GPU the new layout changes", "pod", key)
		case apierrors.IsNotFound(err):
			gone = append(gone, key)
		case apierrors.IsTooManyRequests(err):
			blocked = append(blocked, fmt.Sprintf("%s (%v)", key, err))
			a.log.Info("Eviction refused for now", "pod", key, "err", err)
		default:
			errs = append(errs, fmt.Errorf("evicting pod %s: %w", key, err))
		}
	}
	var notes []string
	if len(evicted) > 0 {
		notes = append(notes, "evicted "+strings.Join(evicted, ", "))
	}
	if len(gone) > 0 {
		notes = append(notes, "already deleted "+strings.Join(gone, ", "))
	}
	if len(waiting) > 0 {
		notes = append(notes, "waiting for "+strings.Join(waiting, ", ")+" (no pod to evict)")
	}
	if len(blocked) > 0 {
		notes = append(notes, "eviction refused, retrying: "+strings.Join(blocked, ", "))
	}
	return strings.Join(notes, "; "), errors.Join(errs...)
}
