package nodeinfo

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"strings"
	"sync"
)

// A Node cache at thousands of Nodes (the planner's, the webhook's
// reshape-first one) keeps each Node's layout annotation packed: the
// layout is the agent's JSON of every instance with its UUID and pods,
// most of a Node as those caches keep it (about 6 KB a node of eight
// H100s in 1g.10gb); its field names and profiles repeat, so it shrinks
// about tenfold (docs/BENCHMARKS.md). ParseLayout reads either form, and
// a packed text changes with the text, so a decode cache keyed by the
// text still tells a new layout.

// packedPrefix marks a packed layout. No JSON text starts with a NUL, so a
// layout the agent wrote is never read as packed.
const packedPrefix = "\x00flate\x00"

// maxLayoutBytes bounds an unpacked layout: the API server accepts no
// more annotation text on an object (TotalAnnotationSizeLimitB), so a
// packed text that unpacks to more is not ours.
const maxLayoutBytes = 256 * 1024

var (
	packers   = sync.Pool{New: func() any { w, _ := flate.NewWriter(nil, flate.BestSpeed); return w }}
	unpackers = sync.Pool{New: func() any { return flate.NewReader(strings.NewReader("")) }}
)

// PackLayout is a layout annotation's text as a Node cache keeps it;
// ParseLayout reads it. Only a cache's copy may be packed: it is never
// written to a Node. Packing a packed text returns it as it is (an
// informer's transform may be handed a Node it transformed), and a text
// packing would not shorten is returned as it is.
func PackLayout(text string) string {
	if strings.HasPrefix(text, packedPrefix) {
		return text
	}
	var buf bytes.Buffer
	buf.WriteString(packedPrefix)
	w := packers.Get().(*flate.Writer)
	defer packers.Put(w)
	w.Reset(&buf)
	if _, err := io.WriteString(w, text); err != nil {
		return text
	}
	if err := w.Close(); err != nil {
		return text
	}
	if buf.Len() >= len(text) {
		return text
	}
	return buf.String()
}

// IsPacked tells whether s is a text PackLayout packed.
func IsPacked(s string) bool { return strings.HasPrefix(s, packedPrefix) }

// UnpackLayout is the text PackLayout packed; any other text as it is.
func UnpackLayout(raw string) (string, error) {
	var text string
	err := withUnpacked(raw, func(b []byte) error {
		text = string(b)
		return nil
	})
	return text, err
}

// unpackBuffers hold unpacked layouts while they are decoded: a node's
// layout is a few KB, and reading each into a buffer of its own grew it
// several times over (io.ReadAll), the largest garbage of a rebuild of
// the webhook's reshape view.
var unpackBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// withUnpacked calls read with the text PackLayout packed into raw, or
// raw itself when it is not packed; read must not keep the bytes.
func withUnpacked(raw string, read func([]byte) error) error {
	packed, ok := strings.CutPrefix(raw, packedPrefix)
	if !ok {
		return read([]byte(raw))
	}
	r := unpackers.Get().(io.ReadCloser)
	defer unpackers.Put(r)
	if err := r.(flate.Resetter).Reset(strings.NewReader(packed), nil); err != nil {
		return fmt.Errorf("unpacking the cached %s: %w", AnnotationLayout, err)
	}
	buf := unpackBuffers.Get().(*bytes.Buffer)
	defer unpackBuffers.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(r, maxLayoutBytes+1)); err != nil {
		return fmt.Errorf("unpacking the cached %s: %w", AnnotationLayout, err)
	}
	if buf.Len() > maxLayoutBytes {
		return fmt.Errorf("unpacking the cached %s: more than %d bytes", AnnotationLayout, maxLayoutBytes)
	}
	return read(buf.Bytes())
}
