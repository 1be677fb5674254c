package migconfig

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/migflex/migflex/internal/platform/textcut"
)

// Limits on a mig.config document. A node agent parses whatever a user
// writes into its Node's annotation, so every stage from the bytes to the
// plan does work bounded by these, whatever the input (see
// docs/BENCHMARKS.md for what a document at the limits costs). Real
// documents are far inside them: mig-parted's config-default.yaml, every
// GPU model NVIDIA ships in one file, is about 12 KB with 81 configurations
// of one or two entries.
const (
	// MaxDocumentBytes is the largest document read: the API server's limit
	// on all of an object's annotations together.
	MaxDocumentBytes = 256 << 10
	// MaxValues bounds the YAML values (scalars, lists, maps) of a document
	// once its aliases are expanded: what the decoder builds. It is set so
	// that MaxConfigs configurations of a realistic size fit, about 16
	// values each, and the decoder's work on a hostile document stays
	// within corpus_test.go's allocation budget.
	MaxValues = 16 << 10
	// MaxValueStarts bounds the characters that can start a YAML value
	// (':', ',', '-', '[', '{', '?', '*') before anything is decoded, and so
	// the node tree composed to measure the document. Keys such as
	// "mig-devices:" count twice and comments count too, so it is twice
	// MaxValues: one such character per 8 bytes at MaxDocumentBytes, a
	// density no block-style mig.config reaches.
	MaxValueStarts = 2 * MaxValues
	// MaxDepth bounds how deeply values nest. A mig.config needs seven levels
	// (document, mig-configs, configuration, entry, mig-devices, placement,
	// field).
	MaxDepth = 32
	// MaxConfigs bounds the configurations in a document.
	MaxConfigs = 1024
	// MaxEntries bounds the entries of one configuration.
	MaxEntries = 128
	// MaxDevices bounds the GPU indices one entry lists, and the items of
	// one device-filter.
	MaxDevices = 64
	// MaxErrors bounds the problems reported for a document or a
	// configuration: the first MaxErrors, then how many more there are.
	MaxErrors = 10
	// maxQuoted bounds how much of a string from the document an error
	// message repeats.
	maxQuoted = 64
)

// limitsHint ends a message about a document-wide limit: the limits are
// compiled into the agent, and the operator's way past one is the list in
// docs/INSTALL.md, so the message says where both are.
const limitsHint = "; the limits are in internal/domain/migconfig/limits.go, see docs/INSTALL.md#the-migconfig-document"

// errorList collects problems, keeping the first MaxErrors and counting
// the rest, so that a document with a million mistakes costs no more to
// report than one with ten.
type errorList struct {
	errs  []error
	extra int
}

func (l *errorList) add(err error) {
	if len(l.errs) < MaxErrors {
		l.errs = append(l.errs, err)
		return
	}
	l.extra++
}

func (l *errorList) addf(format string, args ...any) {
	if len(l.errs) < MaxErrors {
		l.errs = append(l.errs, fmt.Errorf(format, args...))
		return
	}
	l.extra++
}

func (l *errorList) len() int { return len(l.errs) + l.extra }

// full reports whether a further problem would only be counted.
func (l *errorList) full() bool { return len(l.errs) >= MaxErrors }

// err joins the problems kept, one per line, and says how many were left
// out; nil when there are none.
func (l *errorList) err() error {
	if l.len() == 0 {
		return nil
	}
	if l.extra == 0 {
		return errors.Join(l.errs...)
	}
	return errors.Join(append(l.errs[:len(l.errs):len(l.errs)], fmt.Errorf("... and %d more", l.extra))...)
}

// quote quotes s for an error message, cut to maxQuoted bytes on a rune
// boundary.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(textcut.Prefix(s, maxQuoted)) + fmt.Sprintf("... (%d bytes)", len(s))
}

// clipName shortens a configuration name for an error's path.
func clipName(s string) string {
	if len(s) <= maxQuoted && !strings.ContainsAny(s, "\n\r") {
		return s
	}
	return quote(s)
}

// ErrTooLarge is ReadDocument's error for a document past MaxDocumentBytes.
var ErrTooLarge = fmt.Errorf("the document is more than %d bytes, the limit (migconfig.MaxDocumentBytes)%s", MaxDocumentBytes, limitsHint)

// ReadDocument reads a document from r, at most MaxDocumentBytes of it: a
// config file or standard input is held to the annotation's limit without
// reading more than one byte past it.
func ReadDocument(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxDocumentBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxDocumentBytes {
		return nil, ErrTooLarge
	}
	return data, nil
}

// ReadDocumentFile is ReadDocument of the file at path, or of stdin when
// path is "-", with the source named in its errors: what the CLIs that
// validate or apply a file read.
func ReadDocumentFile(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		data, err := ReadDocument(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return data, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := ReadDocument(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}
