package webhook

import (
	"bytes"
	"compress/flate"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/test/bench/scale"
)

// deflated is text compressed with packedPrefix in front, as a hostile
// or corrupt annotation could carry it.
func deflated(t *testing.T, text string) string {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString(packedPrefix)
	w, err := flate.NewWriter(&buf, flate.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestPackLayout: what packLayout keeps unpacks to the text it was
// given, packing twice changes nothing, and a packed text that is not
// ours is an error, not a layout.
func TestPackLayout(t *testing.T) {
	ann, _, err := scale.Annotations(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	layout := ann[nodeinfo.AnnotationLayout]
	for _, tc := range []struct {
		name       string
		text       string
		wantPacked bool
	}{
		{"an agent's layout", layout, true},
		{"an empty layout", "", false},
		{"a short text", "[]", false},
		{"not JSON", strings.Repeat("{", 200), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			packed := packLayout(tc.text)
			if got := strings.HasPrefix(packed, packedPrefix); got != tc.wantPacked {
				t.Fatalf("packed: %v, want %v (%d bytes from %d)", got, tc.wantPacked, len(packed), len(tc.text))
			}
			if tc.wantPacked && len(packed) >= len(tc.text) {
				t.Errorf("packed to %d bytes from %d", len(packed), len(tc.text))
			}
			if again := packLayout(packed); again != packed {
				t.Error("packing a packed text changed it")
			}
			got, err := unpackLayout(packed)
			if err != nil || got != tc.text {
				t.Errorf("unpacked %d bytes (%v), want the %d packed", len(got), err, len(tc.text))
			}
		})
	}
	for _, tc := range []struct {
		name, raw, wantErr string
	}{
		{"not flate", packedPrefix + "not flate at all", "unpacking the cached"},
		{"past the API server's limit", deflated(t, strings.Repeat(" ", int(maxLayoutBytes)+1)), "more than 262144 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parsePackedLayout(tc.raw); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestPackedLayoutReadsAsTheText: the reshape view reads a Node as the
// webhook caches it (layout packed) as the planner reads the Node as
// served, for every kind of node of the scale fleet, with a new layout
// the agent reports (the decode cache sees the packed text change) and
// with a layout that is no JSON.
func TestPackedLayoutReadsAsTheText(t *testing.T) {
	now := time.Now()
	served := plansnap.Options{FieldManager: plansnap.DefaultFieldManager, ManualHold: time.Minute, Now: now}
	cached := served
	cached.ParseLayout, cached.Cache = parsePackedLayout, plansnap.NewCache()
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
