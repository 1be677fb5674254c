package webhook

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"strings"
	"sync"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// The reshape-first Node cache keeps each Node's layout annotation
// compressed. The layout is the agent's JSON of every instance with its
// UUID and pods, most of a Node as the webhook keeps it (about 6 KB a node
// of eight H100s in 1g.10gb) and most of the webhook's live heap at
// thousands of Nodes; its field names and profiles repeat, so it shrinks
// about tenfold (docs/BENCHMARKS.md). Only the reshape view reads it,
// through plansnap's decode cache, which decodes a Node's layout again
// only when the text changes: the compressed text changes with the text,
// so the cache's comparison still tells.

// packedPrefix marks a packed layout. No JSON text starts with a NUL, so a
// layout the agent wrote is never read as packed.
const packedPrefix = "\x00flate\x00"

// maxLayoutBytes bounds an unpacked layout: no annotation text the API
// server accepts is longer, so a packed one that is is not ours.
const maxLayoutBytes = int64(apivalidation.TotalAnnotationSizeLimitB)

var (
	packers   = sync.Pool{New: func() any { w, _ := flate.NewWriter(nil, flate.BestSpeed); return w }}
	unpackers = sync.Pool{New: func() any { return flate.NewReader(strings.NewReader("")) }}
)

// packLayout is text as the reshape-first Node cache keeps it. Packing a
// packed text returns it as it is: a transform may be handed a Node it
// transformed.
func packLayout(text string) string {
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
		// Short text: packing would only add to it.
		return text
	}
	return buf.String()
}

// unpackLayout is the text packLayout packed; any other text as it is.
func unpackLayout(raw string) (string, error) {
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
// the reshape view.
var unpackBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// withUnpacked calls read with the text packLayout packed into raw, or
// raw itself when it is not packed; read must not keep the bytes.
func withUnpacked(raw string, read func([]byte) error) error {
	packed, ok := strings.CutPrefix(raw, packedPrefix)
	if !ok {
		return read([]byte(raw))
	}
	r := unpackers.Get().(io.ReadCloser)
	defer unpackers.Put(r)
	if err := r.(flate.Resetter).Reset(strings.NewReader(packed), nil); err != nil {
		return fmt.Errorf("unpacking the cached %s: %w", nodeinfo.AnnotationLayout, err)
	}
	buf := unpackBuffers.Get().(*bytes.Buffer)
	defer unpackBuffers.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(r, maxLayoutBytes+1)); err != nil {
		return fmt.Errorf("unpacking the cached %s: %w", nodeinfo.AnnotationLayout, err)
	}
	if int64(buf.Len()) > maxLayoutBytes {
		return fmt.Errorf("unpacking the cached %s: more than %d bytes", nodeinfo.AnnotationLayout, maxLayoutBytes)
	}
	return read(buf.Bytes())
}

// parsePackedLayout reads a layout annotation as the reshape-first Node
// cache keeps it (plansnap.Options.ParseLayout).
func parsePackedLayout(raw string) ([]nodeinfo.GPU, error) {
	var gpus []nodeinfo.GPU
	err := withUnpacked(raw, func(b []byte) error {
		var err error
		gpus, err = nodeinfo.ParseLayoutBytes(b)
		return err
	})
	return gpus, err
}
