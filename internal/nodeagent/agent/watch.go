package agent

import (
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// concerns tells whether an update of the agent's Node is news for the
// reconcile loop. The loop's inputs on the Node are its UID, its labels
// and annotations (the mig.config sources, and anything a user or another
// controller sets) and its allocatable (what the kubelet publishes, which
// a wait for publication waits on). The agent's own labels and annotations
// are its output: a change of those alone was the agent's own report, and
// reconciling on it would turn every report into the cause of the next
// (a waiting node wrote itself ~22 times a second that way). Status
// heartbeats change none of these.
func concerns(o, n *corev1.Node, manager string) bool {
	if o.UID != n.UID || allocatableChanged(o, n) {
		return true
	}
	oldOwn, newOwn := ownedKeys(o, manager), ownedKeys(n, manager)
	return othersChanged(o.Labels, n.Labels, oldOwn.labels, newOwn.labels) ||
		othersChanged(o.Annotations, n.Annotations, oldOwn.annotations, newOwn.annotations)
}

// keys are the label and annotation keys a field manager owns.
type keys struct {
	labels, annotations map[string]string
}

// ownedKeys are the keys manager owns on node by its managedFields; none
// when they cannot be read, so that every change counts as someone
// else's.
func ownedKeys(node *corev1.Node, manager string) keys {
	ac, err := corev1ac.ExtractNode(node, manager)
	if err != nil || ac.ObjectMetaApplyConfiguration == nil {
		return keys{}
	}
	return keys{labels: ac.Labels, annotations: ac.Annotations}
}

// othersChanged tells whether a key changed between before and after that
// is not the agent's: a key the agent owns after the update is its own
// write, and so is the removal of a key it owned before (its apply drops
// the keys it stops setting, a profile's count label say). A user's
// overwrite of one of the agent's keys moves its ownership, so it counts.
func othersChanged(before, after, ownBefore, ownAfter map[string]string) bool {
	for k, v := range after {
		if old, ok := before[k]; ok && old == v {
			continue
		}
		if _, own := ownAfter[k]; !own {
			return true
		}
	}
	for k := range before {
		if _, ok := after[k]; ok {
			continue
		}
		if _, own := ownBefore[k]; !own {
			return true
		}
	}
	return false
}
