package schedview

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/testsupport/kubefixture"
)

// Fixture builders, so that each table case states only what it is about.

const (
	mig1g10 corev1.ResourceName = "nvidia.com/mig-1g.10gb"
	mig2g20 corev1.ResourceName = "nvidia.com/mig-2g.20gb"
	gpu                         = resourcename.GPU
)

type alloc = map[corev1.ResourceName]int64

// The builders of internal/testsupport/kubefixture, by the short names
// the tables use.
type podOpt = kubefixture.PodOpt

var (
	node                 = kubefixture.Node
	labeled              = kubefixture.Labeled
	tainted              = kubefixture.Tainted
	cordoned             = kubefixture.Cordoned
	newPod               = kubefixture.Pod
	both                 = kubefixture.Both
	withContainer        = kubefixture.WithContainer
	withInit             = kubefixture.WithInit
	withNodeSelector     = kubefixture.WithNodeSelector
	withRequiredAffinity = kubefixture.WithRequiredAffinity
	withToleration       = kubefixture.WithToleration
	onNode               = kubefixture.OnNode
)

func snapshotOf(nodes ...*corev1.Node) *Snapshot {
	ns := make([]Node, len(nodes))
	for i, n := range nodes {
		ns[i] = NodeFromAPI(n)
	}
	return NewSnapshot(ns)
}

// eligibleNames is the names of the nodes of s that f lets a pod land on,
// sorted.
func eligibleNames(s *Snapshot, f *Filter) []string {
	var names []string
	s.Eligible(f, false, func(g *Group) {
		for _, m := range g.Members() {
			names = append(names, m.Name())
		}
	}, func(_ *Group, m *Member) { names = append(names, m.Name()) })
	slices.Sort(names)
	return names
}
