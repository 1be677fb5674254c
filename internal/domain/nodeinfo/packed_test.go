package nodeinfo_test

import (
	"bytes"
	"compress/flate"
	"reflect"
	"strings"
	"testing"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/test/bench/scale"
)

// packedPrefix is the mark of a packed layout, spelled out here so that a
// change of it, which a rolling upgrade would not read, fails a test.
const packedPrefix = "\x00flate\x00"

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

// TestPackLayout: what PackLayout keeps unpacks to the text it was
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
			packed := nodeinfo.PackLayout(tc.text)
			if got := nodeinfo.IsPacked(packed); got != tc.wantPacked {
				t.Fatalf("packed: %v, want %v (%d bytes from %d)", got, tc.wantPacked, len(packed), len(tc.text))
			}
			if tc.wantPacked && len(packed) >= len(tc.text) {
				t.Errorf("packed to %d bytes from %d", len(packed), len(tc.text))
			}
			if again := nodeinfo.PackLayout(packed); again != packed {
				t.Error("packing a packed text changed it")
			}
			got, err := nodeinfo.UnpackLayout(packed)
			if err != nil || got != tc.text {
				t.Errorf("unpacked %d bytes (%v), want the %d packed", len(got), err, len(tc.text))
			}
			want, wantErr := nodeinfo.ParseLayout(tc.text)
			gpus, err := nodeinfo.ParseLayout(packed)
			if !reflect.DeepEqual(gpus, want) || (err == nil) != (wantErr == nil) {
				t.Errorf("the packed text parses as %v (%v), the text as %v (%v)", gpus, err, want, wantErr)
			}
		})
	}
	for _, tc := range []struct {
		name, raw, wantErr string
	}{
		{"not flate", packedPrefix + "not flate at all", "unpacking the cached"},
		{"past the API server's limit", deflated(t, strings.Repeat(" ", 256*1024+1)), "more than 262144 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := nodeinfo.ParseLayout(tc.raw); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
