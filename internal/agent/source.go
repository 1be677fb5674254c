package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// sourceKind says where the desired layout comes from.
type sourceKind int

const (
	// sourceNone: nothing asks for a layout; the GPUs stay as they are.
	sourceNone sourceKind = iota
	sourceAnnotation
	sourceRunAIAnnotation
	sourceLabel
)

// source is the desired layout as the Node asks for it.
type source struct {
	kind sourceKind
	// document is the mig.config text of an annotation; empty for a
	// label, whose document is the config file.
	document string
	// configName is the configuration to select: the label's value, or
	// empty for an annotation (its "selected" or only configuration).
	configName string
}

// selectSource picks the desired layout's source from the Node's labels and
// annotations: the first of setSources, or sourceNone.
func selectSource(labels, annotations map[string]string) source {
	if all := setSources(labels, annotations); len(all) > 0 {
		return all[0]
	}
	return source{kind: sourceNone}
}

// setSources lists the sources set on the Node, in precedence order: the
// nvidia.com/mig.config annotation, the run.ai/mig.config annotation, then
// the nvidia.com/mig.config label naming a configuration in the config
// file. The first decides the layout. A key whose value is empty or blank
// counts as absent: `kubectl annotate node N nvidia.com/mig.config=` leaves
// such a value behind.
func setSources(labels, annotations map[string]string) []source {
	var out []source
	if doc := annotations[AnnotationMigConfig]; strings.TrimSpace(doc) != "" {
		out = append(out, source{kind: sourceAnnotation, document: doc})
	}
	if doc := annotations[AnnotationRunAIConfig]; strings.TrimSpace(doc) != "" {
		out = append(out, source{kind: sourceRunAIAnnotation, document: doc})
	}
	if name := strings.TrimSpace(labels[LabelMigConfig]); name != "" {
		out = append(out, source{kind: sourceLabel, configName: name})
	}
	return out
}

// ignoredSources returns the sources after the first of all (see
// setSources) that ask for something else than it: an annotation with
// another document, or the label, which names a configuration of the
// config file rather than holding a document. An annotation with the same
// document as the winner (tools that write both keys) is not worth a word.
func ignoredSources(all []source) []source {
	if len(all) < 2 {
		return nil
	}
	var out []source
	for _, s := range all[1:] {
		if s.kind != sourceLabel && all[0].kind != sourceLabel && strings.TrimSpace(s.document) == strings.TrimSpace(all[0].document) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// key names the source's key on the Node ("annotation run.ai/mig.config"),
// without a label's value: two sources with the same key are the same
// source, whatever they ask for.
func (s source) key() string {
	if s.kind == sourceLabel {
		return "label " + LabelMigConfig
	}
	return s.String()
}

// String names the source for people: "annotation nvidia.com/mig.config".
func (s source) String() string {
	switch s.kind {
	case sourceAnnotation:
		return "annotation " + AnnotationMigConfig
	case sourceRunAIAnnotation:
		return "annotation " + AnnotationRunAIConfig
	case sourceLabel:
		return fmt.Sprintf("label %s=%s", LabelMigConfig, s.configName)
	}
	return "no mig.config on the node"
}

// identity is equal for two sources exactly when they ask for the same
// thing: same kind, configuration name and document (for a label, the
// config file's content, passed as document).
func (s source) identity(document string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00", s.kind, s.configName)
	h.Write([]byte(document))
	return hex.EncodeToString(h.Sum(nil))
}
