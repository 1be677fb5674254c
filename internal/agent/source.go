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
// annotations, in precedence order: the nvidia.com/mig.config annotation,
// the run.ai/mig.config annotation, then the nvidia.com/mig.config label
// naming a configuration in the config file. A key whose value is empty or
// blank counts as absent: `kubectl annotate node N nvidia.com/mig.config=`
// leaves such a value behind.
func selectSource(labels, annotations map[string]string) source {
	if doc := annotations[AnnotationMigConfig]; strings.TrimSpace(doc) != "" {
		return source{kind: sourceAnnotation, document: doc}
	}
	if doc := annotations[AnnotationRunAIConfig]; strings.TrimSpace(doc) != "" {
		return source{kind: sourceRunAIAnnotation, document: doc}
	}
	if name := strings.TrimSpace(labels[LabelMigConfig]); name != "" {
		return source{kind: sourceLabel, configName: name}
	}
	return source{kind: sourceNone}
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
