package nodeinfo

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

const doc1 = "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: false\n"

func TestDeciding(t *testing.T) {
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        Source
	}{
		{"nothing", nil, nil, Source{Kind: SourceNone}},
		{"unrelated keys", map[string]string{"nvidia.com/mig.config.state": "success"}, map[string]string{"other": "x"}, Source{Kind: SourceNone}},
		{"annotation", nil, map[string]string{AnnotationMigConfig: doc1}, Source{Kind: SourceAnnotation, Document: doc1}},
		{"run.ai annotation", nil, map[string]string{AnnotationRunAIConfig: doc1}, Source{Kind: SourceRunAIAnnotation, Document: doc1}},
		{"label", map[string]string{LabelMigConfig: "all-1g.10gb"}, nil, Source{Kind: SourceLabel, ConfigName: "all-1g.10gb"}},
		{
			"annotation wins over run.ai and label",
			map[string]string{LabelMigConfig: "all-1g.10gb"},
			map[string]string{AnnotationMigConfig: doc1, AnnotationRunAIConfig: "other"},
			Source{Kind: SourceAnnotation, Document: doc1},
		},
		{
			"run.ai wins over the label",
			map[string]string{LabelMigConfig: "all-1g.10gb"},
			map[string]string{AnnotationRunAIConfig: doc1},
			Source{Kind: SourceRunAIAnnotation, Document: doc1},
		},
		{
			"a blank annotation counts as absent",
			map[string]string{LabelMigConfig: "all-1g.10gb"},
			map[string]string{AnnotationMigConfig: "  \n", AnnotationRunAIConfig: ""},
			Source{Kind: SourceLabel, ConfigName: "all-1g.10gb"},
		},
		{"a blank label counts as absent", map[string]string{LabelMigConfig: " "}, nil, Source{Kind: SourceNone}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Deciding(tc.labels, tc.annotations)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Deciding() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSourceString(t *testing.T) {
	tests := map[string]Source{
		"annotation nvidia.com/mig.config":   {Kind: SourceAnnotation},
		"annotation run.ai/mig.config":       {Kind: SourceRunAIAnnotation},
		"label nvidia.com/mig.config=all-3g": {Kind: SourceLabel, ConfigName: "all-3g"},
		"no mig.config on the node":          {Kind: SourceNone},
	}
	for want, s := range tests {
		if got := s.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestSources(t *testing.T) {
	labels := map[string]string{LabelMigConfig: "all-1g.10gb"}
	annotations := map[string]string{AnnotationMigConfig: doc1, AnnotationRunAIConfig: "other"}
	want := []Source{
		{Kind: SourceAnnotation, Document: doc1},
		{Kind: SourceRunAIAnnotation, Document: "other"},
		{Kind: SourceLabel, ConfigName: "all-1g.10gb"},
	}
	if diff := cmp.Diff(want, Sources(labels, annotations)); diff != "" {
		t.Errorf("Sources() in precedence order (-want +got):\n%s", diff)
	}
	if got := Sources(map[string]string{LabelMigConfigState: StateSuccess}, map[string]string{AnnotationLayout: "[]"}); got != nil {
		t.Errorf("Sources() of a Node with only the agent's keys = %v, want none", got)
	}
}

func TestSourceKey(t *testing.T) {
	// Two labels asking for different configurations are the same key.
	a, b := Source{Kind: SourceLabel, ConfigName: "a"}, Source{Kind: SourceLabel, ConfigName: "b"}
	if a.Key() != b.Key() || a.Key() != "label nvidia.com/mig.config" {
		t.Errorf("label keys %q and %q, want both %q", a.Key(), b.Key(), "label nvidia.com/mig.config")
	}
	if k := (Source{Kind: SourceRunAIAnnotation, Document: "x"}).Key(); k != "annotation run.ai/mig.config" {
		t.Errorf("run.ai key %q", k)
	}
}
