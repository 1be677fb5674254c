package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/migflex/migflex/test/bench/fleet"
)

// SetupClient is a client for filling the cluster: protobuf, and no
// client-side rate limit (the API server's own limits still apply).
func SetupClient(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = "migflex-bench-setup"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("setup client: %w", err)
	}
	return c, nil
}

// CreateNodes registers fleet nodes [from, to) the way a kubelet and the
// node lifecycle controller do, workers at a time: the Node; its status
// (Ready, Allocatable with the GPU devices) through UpdateStatus; then, as
// the controller does for a Ready node, the node.kubernetes.io/not-ready
// taint that the TaintNodesByCondition admission plugin put on the new Node
// is removed, leaving the fleet's own taints.
func CreateNodes(ctx context.Context, c kubernetes.Interface, from, to, workers int) error {
	return Parallel(ctx, to-from, workers, func(ctx context.Context, j int) error {
		i := from + j
		want := fleet.Node(i)
		n, err := c.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating node %s: %w", want.Name, err)
		}
		n.Status = fleet.Status(i)
		if n, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating the status of node %s: %w", want.Name, err)
		}
		if len(n.Spec.Taints) == len(want.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = want.Spec.Taints
		if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("removing the not-ready taint of node %s: %w", want.Name, err)
		}
		return nil
	})
}

// CreateNamespaces creates the namespaces the bound pods live in.
func CreateNamespaces(ctx context.Context, c kubernetes.Interface) error {
	for j := range fleet.Namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleet.NamespaceName(j)}}
		if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
		}
	}
	return nil
}

// CreatePods creates pods, workers at a time. With spec.nodeName set and no
// kubelet, they stay Pending on their node, which is what the webhook's pod
// informer and the baseline's list see.
func CreatePods(ctx context.Context, c kubernetes.Interface, pods []*corev1.Pod, workers int) error {
	return Parallel(ctx, len(pods), workers, func(ctx context.Context, i int) error {
		p := pods[i]
		if _, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		return nil
	})
}

// Parallel calls f for 0..n-1 on workers goroutines and returns the first
// error; after one, the remaining calls are not made.
func Parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// The cause is f's error, or the parent's when it ended first.
	return context.Cause(ctx)
}
