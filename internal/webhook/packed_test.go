package webhook

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/test/bench/scale"
)

// TestPackedLayoutReadsAsTheText: the reshape view reads a Node as the
// webhook caches it (layout packed) as the planner reads the Node as
// served, for every kind of node of the scale fleet, with a new layout
// the agent reports (the decode cache sees the packed text change) and
// with a layout that is no JSON.
func TestPackedLayoutReadsAsTheText(t *testing.T) {
	now := time.Now()
	served := plansnap.Options{FieldManager: plansnap.DefaultFieldManager, ManualHold: time.Minute, Now: now}
	cached := served
	cached.Cache = plansnap.NewCache()
	read := func(n *corev1.Node) {
		t.Helper()
		slim, err := transformReshapeNode(n.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		s := slim.(*corev1.Node)
		if raw := s.Annotations[nodeinfo.AnnotationLayout]; len(raw) >= len(n.Annotations[nodeinfo.AnnotationLayout]) {
			t.Errorf("%s: the cache keeps %d bytes of layout from %d", n.Name, len(raw), len(n.Annotations[nodeinfo.AnnotationLayout]))
		}
		want, got := plansnap.FromAPI(n, served), plansnap.FromAPI(s, cached)
		// Each names the Node it was read from; the rest is the same.
		if got.API != s || want.API != n {
			t.Errorf("%s: read from %p and %p, want %p and %p", n.Name, got.API, want.API, s, n)
		}
		got.API, want.API = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read from the cache as\n%+v\nwant\n%+v", n.Name, got, want)
		}
	}
	for i := range 10 { // every kind of node (kindOf)
		n, err := scale.Node(i)
		if err != nil {
			t.Fatal(err)
		}
		read(n)
		ann, _, err := scale.Annotations(i, 1) // new pods on its instances
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations[nodeinfo.AnnotationLayout] = ann[nodeinfo.AnnotationLayout]
		read(n)
		n.Annotations[nodeinfo.AnnotationLayout] = strings.Repeat("[", 100)
		read(n)
	}
}
