package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Node returns the cluster's node.
func (c *Cluster) Node(ctx context.Context) (*corev1.Node, error) {
	return c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
}

// SetNodeAnnotations sets annotations on the node by a JSON merge patch,
// as kubectl annotate --overwrite does; a nil value removes the key.
func (c *Cluster) SetNodeAnnotations(ctx context.Context, annotations map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = c.Client.CoreV1().Nodes().Patch(ctx, c.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("annotating node %s: %w", c.NodeName, err)
	}
	return nil
}

// WaitForNode polls the node until check returns nil and returns the node
// it accepted. check says what is still missing; on timeout the error
// carries its last answer, so a failure shows what was observed.
func (c *Cluster) WaitForNode(ctx context.Context, what string, timeout time.Duration, check func(*corev1.Node) error) (*corev1.Node, error) {
	var node *corev1.Node
	var last error
	err := WaitFor(ctx, what, timeout, func(ctx context.Context) (bool, error) {
		n, err := c.Node(ctx)
		if err != nil {
			return false, err
		}
		if err := check(n); err != nil {
			last = err
			return false, err
		}
		node = n
		return true, nil
	})
	if err != nil && last != nil {
		// The wait's own last error may be the deadline cutting a Get
		// short; what the node last failed to meet says more.
		return nil, fmt.Errorf("%w; the node last had %v", err, last)
	}
	return node, err
}

// WaitForNodeEvent waits for an Event about the node with reason and type
// whose last occurrence is not before since and whose message contains
// every string in contains, and returns it. On timeout the error lists the
// node's Events of that reason.
func (c *Cluster) WaitForNodeEvent(ctx context.Context, eventType, reason string, since time.Time, contains ...string) (*corev1.Event, error) {
	var found *corev1.Event
	var seen []string
	err := WaitFor(ctx, fmt.Sprintf("a %s Event %s on node %s containing %q", eventType, reason, c.NodeName, contains), Timeout, func(ctx context.Context) (bool, error) {
		var err error
		found, seen, err = c.nodeEvent(ctx, eventType, reason, since, contains)
		return found != nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("%w; %s Events on the node since %s: %v", err, reason, since.Truncate(time.Second).UTC().Format(time.RFC3339), seen)
	}
	return found, nil
}

// NodeEvent is WaitForNodeEvent without the wait: the matching Event, or
// nil when there is none now.
func (c *Cluster) NodeEvent(ctx context.Context, eventType, reason string, since time.Time, contains ...string) (*corev1.Event, error) {
	found, _, err := c.nodeEvent(ctx, eventType, reason, since, contains)
	return found, err
}

// nodeEvent looks for the Event WaitForNodeEvent describes once, and
// returns every Event of that reason it saw, for error messages.
func (c *Cluster) nodeEvent(ctx context.Context, eventType, reason string, since time.Time, contains []string) (*corev1.Event, []string, error) {
	// Event timestamps have whole seconds.
	since = since.Truncate(time.Second)
	list, err := c.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + c.NodeName + ",reason=" + reason,
	})
	if err != nil {
		return nil, nil, err
	}
	var seen []string
events:
	for i := range list.Items {
		e := &list.Items[i]
		seen = append(seen, fmt.Sprintf("[%s %s %s: %s]", e.LastTimestamp.UTC().Format(time.RFC3339), e.Type, e.Reason, e.Message))
		if e.Type != eventType || e.LastTimestamp.Time.Before(since) {
			continue
		}
		for _, s := range contains {
			if !strings.Contains(e.Message, s) {
				continue events
			}
		}
		return e, seen, nil
	}
	return nil, seen, nil
}
