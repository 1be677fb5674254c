// Package listsource is the benchmarks' baseline: the approach of the design
// notes migflex grew from, where every admission lists the Nodes (and, to
// know what is free, the Pods) from the API server and decides on what came
// back. It is a webhook.SnapshotSource, so the product's handler and server
// serve it unchanged and only the cluster view differs. It is a mode of the
// benchmark, not of the product.
package listsource

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/webhook"
)

// DefaultTimeout bounds the lists of one admission; the API server's own
// webhook timeout is at most 30 seconds.
const DefaultTimeout = 30 * time.Second

// activePods selects the pods that can hold a device, as the product's pod
// informer does, so that both views hold the same pods. The design notes
// list every pod and skip terminal ones afterwards; the selector gives the
// baseline its best case.
var activePods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("spec.nodeName", ""),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
).String()

// Source lists the cluster on every Snapshot call.
type Source struct {
	client   kubernetes.Interface
	withPods bool
	timeout  time.Duration
	log      klog.Logger
	errors   atomic.Int64
}

var _ webhook.SnapshotSource = (*Source)(nil)

// New returns a Source that lists Nodes, and Pods too when withPods
// (capacity mode), through client on every call.
func New(client kubernetes.Interface, withPods bool, log klog.Logger) *Source {
	return &Source{client: client, withPods: withPods, timeout: DefaultTimeout, log: log}
}

// Snapshot implements webhook.SnapshotSource: one Nodes().List() and, in
// capacity mode, one Pods("").List() per call. On an error it answers
// "not ready", which the handler turns into an allowed, unchecked pod with
// a warning; Errors counts them.
func (s *Source) Snapshot() (*schedview.Snapshot, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	snap, err := s.list(ctx)
	if err != nil {
		s.errors.Add(1)
		s.log.Error(err, "Listing the cluster for an admission")
		return nil, false
	}
	return snap, true
}

// Errors is the number of Snapshot calls that failed.
func (s *Source) Errors() int64 { return s.errors.Load() }

func (s *Source) list(ctx context.Context) (*schedview.Snapshot, error) {
	nodes, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	b := schedview.NewBuilder(nil)
	for i := range nodes.Items {
		b.SetNode(schedview.NodeFromAPI(&nodes.Items[i]))
	}
	if s.withPods {
		pods, err := s.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: activePods})
		if err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			b.SetPod(p.Namespace+"/"+p.Name, p.Spec.NodeName, schedview.Devices(p))
		}
	}
	return b.Snapshot(), nil
}
