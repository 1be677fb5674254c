package nodeinfo

import (
	"fmt"
	"strings"
)

// SourceKind says where the desired layout comes from.
type SourceKind int

const (
	// SourceNone: nothing asks for a layout; the GPUs stay as they are.
	SourceNone SourceKind = iota
	// SourceAnnotation is AnnotationMigConfig.
	SourceAnnotation
	// SourceRunAIAnnotation is AnnotationRunAIConfig.
	SourceRunAIAnnotation
	// SourceLabel is LabelMigConfig, naming a configuration of the
	// agent's config file.
	SourceLabel
)

// Source is the desired layout as the Node asks for it.
type Source struct {
	Kind SourceKind
	// Document is the mig.config text of an annotation; empty for a
	// label, whose document is the agent's config file.
	Document string
	// ConfigName is the configuration to select: the label's value, or
	// empty for an annotation (its "selected" or only configuration).
	ConfigName string
}

// Sources lists the sources set on a Node, in precedence order: the
// nvidia.com/mig.config annotation, the run.ai/mig.config annotation, then
// the nvidia.com/mig.config label naming a configuration in the agent's
// config file. The first decides the layout. A key whose value is empty or
// blank counts as absent: `kubectl annotate node N nvidia.com/mig.config=`
// leaves such a value behind.
func Sources(labels, annotations map[string]string) []Source {
	var out []Source
	if doc := annotations[AnnotationMigConfig]; strings.TrimSpace(doc) != "" {
		out = append(out, Source{Kind: SourceAnnotation, Document: doc})
	}
	if doc := annotations[AnnotationRunAIConfig]; strings.TrimSpace(doc) != "" {
		out = append(out, Source{Kind: SourceRunAIAnnotation, Document: doc})
	}
	if name := strings.TrimSpace(labels[LabelMigConfig]); name != "" {
		out = append(out, Source{Kind: SourceLabel, ConfigName: name})
	}
	return out
}

// Deciding is the source that decides the layout: the first of Sources,
// or one of kind SourceNone.
func Deciding(labels, annotations map[string]string) Source {
	if all := Sources(labels, annotations); len(all) > 0 {
		return all[0]
	}
	return Source{Kind: SourceNone}
}

// Key names the source's key on the Node ("annotation run.ai/mig.config"),
// without a label's value: two sources with the same key are the same
// source, whatever they ask for.
func (s Source) Key() string {
	if s.Kind == SourceLabel {
		return "label " + LabelMigConfig
	}
	return s.String()
}

// String names the source for people: "annotation nvidia.com/mig.config",
// "label nvidia.com/mig.config=all-1g.10gb".
func (s Source) String() string {
	switch s.Kind {
	case SourceAnnotation:
		return "annotation " + AnnotationMigConfig
	case SourceRunAIAnnotation:
		return "annotation " + AnnotationRunAIConfig
	case SourceLabel:
		return fmt.Sprintf("label %s=%s", LabelMigConfig, s.ConfigName)
	}
	return "no mig.config on the node"
}
