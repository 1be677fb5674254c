package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

const doc1 = "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: false\n"

func TestSelectSource(t *testing.T) {
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        source
	}{
		{"nothing", nil, nil, source{kind: sourceNone}},
		{"unrelated keys", map[string]string{"nvidia.com/mig.config.state": "success"}, map[string]string{"other": "x"}, source{kind: sourceNone}},
		{"annotation", nil, map[string]string{AnnotationMigConfig: doc1}, source{kind: sourceAnnotation, document: doc1}},
		{"run.ai annotation", nil, map[string]string{AnnotationRunAIConfig: doc1}, source{kind: sourceRunAIAnnotation, document: doc1}},
		{"label", map[string]string{LabelMigConfig: "all-1g.10gb"}, nil, source{kind: sourceLabel, configName: "all-1g.10gb"}},
		{
			"annotation wins over run.ai and label",
			map[string]string{LabelMigConfig: "all-1g.10gb"},
			map[string]string{AnnotationMigConfig: doc1, AnnotationRunAIConfig: "other"},
			source{kind: sourceAnnotation, document: doc1},
		},
		{
			"run.ai wins over the label",
			map[string]string{LabelMigConfig: "all-1g.10gb"},
			map[string]string{AnnotationRunAIConfig: doc1},
			source{kind: sourceRunAIAnnotation, document: doc1},
		},
		{
			"a blank annotation counts as absent",
			map[string]string{LabelMigConfig: "all-1g.10gb"},
			map[string]string{AnnotationMigConfig: "  \n", AnnotationRunAIConfig: ""},
			source{kind: sourceLabel, configName: "all-1g.10gb"},
		},
		{"a blank label counts as absent", map[string]string{LabelMigConfig: " "}, nil, source{kind: sourceNone}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := selectSource(tc.labels, tc.annotations)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(source{})); diff != "" {
				t.Errorf("selectSource() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSourceString(t *testing.T) {
	tests := map[string]source{
		"annotation nvidia.com/mig.config":   {kind: sourceAnnotation},
		"annotation run.ai/mig.config":       {kind: sourceRunAIAnnotation},
		"label nvidia.com/mig.config=all-3g": {kind: sourceLabel, configName: "all-3g"},
		"no mig.config on the node":          {kind: sourceNone},
	}
	for want, s := range tests {
		if got := s.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestSourceIdentity(t *testing.T) {
	a := source{kind: sourceAnnotation}
	r := source{kind: sourceRunAIAnnotation}
	l1 := source{kind: sourceLabel, configName: "one"}
	l2 := source{kind: sourceLabel, configName: "two"}
	if same := (source{kind: sourceAnnotation, document: "ignored"}); a.identity(doc1) != same.identity(doc1) {
		t.Error("the same kind and document have different identities")
	}
	distinct := []string{a.identity(doc1), a.identity(doc1 + " "), r.identity(doc1), l1.identity(doc1), l2.identity(doc1)}
	seen := map[string]bool{}
	for _, id := range distinct {
		if seen[id] {
			t.Errorf("identities collide: %q", distinct)
		}
		seen[id] = true
	}
}

func TestIgnoredSources(t *testing.T) {
	ann := func(doc string) source { return source{kind: sourceAnnotation, document: doc} }
	runai := func(doc string) source { return source{kind: sourceRunAIAnnotation, document: doc} }
	label := func(name string) source { return source{kind: sourceLabel, configName: name} }
	tests := []struct {
		name string
		all  []source
		want []source
	}{
		{"none", nil, nil},
		{"one", []source{ann(doc1)}, nil},
		{"two annotations, same document", []source{ann(doc1), runai(" " + doc1 + "\n")}, nil},
		{"two annotations, other documents", []source{ann(doc1), runai("x")}, []source{runai("x")}},
		{"an annotation and the label", []source{runai(doc1), label("all-disabled")}, []source{label("all-disabled")}},
		{"all three", []source{ann(doc1), runai(doc1), label("a")}, []source{label("a")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ignoredSources(tc.all), cmp.AllowUnexported(source{})); diff != "" {
				t.Errorf("ignoredSources() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIgnoredNote(t *testing.T) {
	winner := source{kind: sourceAnnotation}
	one := ignoredNote(winner, []source{{kind: sourceRunAIAnnotation}})
	if want := "annotation nvidia.com/mig.config decides the layout; annotation run.ai/mig.config is set too and ignored"; one != want {
		t.Errorf("one ignored: %q, want %q", one, want)
	}
	two := ignoredNote(winner, []source{{kind: sourceRunAIAnnotation}, {kind: sourceLabel, configName: "x"}})
	if want := "annotation nvidia.com/mig.config decides the layout; annotation run.ai/mig.config and label nvidia.com/mig.config=x are set too and ignored"; two != want {
		t.Errorf("two ignored: %q, want %q", two, want)
	}
}
