package draplugin

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Withdraw deletes node's ResourceSlices of driver and returns how many it
// deleted. It is for an agent that serves the node through the device
// plugin: a DRA agent that ran there before left its slices behind (a
// restarted DRA agent takes them over), and the kubelet deletes them only
// some time after the plugin is gone, while the scheduler may allocate
// their devices to claims no plugin will prepare. Each slice is deleted
// by name, as the kubelet plugin helper deletes, never as a collection
// (the agent's slice-scope policy refuses that).
func Withdraw(ctx context.Context, client kubernetes.Interface, driver, node string) (int, error) {
	slices := client.ResourceV1().ResourceSlices()
	list, err := slices.List(ctx, metav1.ListOptions{FieldSelector: sliceSelector(driver, node)})
	if err != nil {
		return 0, fmt.Errorf("listing the ResourceSlices of driver %s on node %s: %w", driver, node, err)
	}
	n := 0
	for _, s := range list.Items {
		// A fake client ignores field selectors.
		if s.Spec.Driver != driver || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		err := slices.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return n, fmt.Errorf("deleting ResourceSlice %s of driver %s on node %s: %w", s.Name, driver, node, err)
		default:
			n++
		}
	}
	return n, nil
}
