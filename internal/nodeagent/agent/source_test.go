package agent

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

const doc1 = "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: false\n"

func TestSourceIdentity(t *testing.T) {
	a := nodeinfo.Source{Kind: nodeinfo.SourceAnnotation}
	r := nodeinfo.Source{Kind: nodeinfo.SourceRunAIAnnotation}
	l1 := nodeinfo.Source{Kind: nodeinfo.SourceLabel, ConfigName: "one"}
	l2 := nodeinfo.Source{Kind: nodeinfo.SourceLabel, ConfigName: "two"}
	if same := (nodeinfo.Source{Kind: nodeinfo.SourceAnnotation, Document: "ignored"}); sourceIdentity(a, doc1) != sourceIdentity(same, doc1) {
		t.Error("the same kind and document have different identities")
	}
	distinct := []string{sourceIdentity(a, doc1), sourceIdentity(a, doc1+" "), sourceIdentity(r, doc1), sourceIdentity(l1, doc1), sourceIdentity(l2, doc1)}
	seen := map[string]bool{}
	for _, id := range distinct {
		if seen[id] {
			t.Errorf("identities collide: %q", distinct)
		}
		seen[id] = true
	}
}

func TestIgnoredSources(t *testing.T) {
	ann := func(doc string) nodeinfo.Source {
		return nodeinfo.Source{Kind: nodeinfo.SourceAnnotation, Document: doc}
	}
	runai := func(doc string) nodeinfo.Source {
		return nodeinfo.Source{Kind: nodeinfo.SourceRunAIAnnotation, Document: doc}
	}
	label := func(name string) nodeinfo.Source {
		return nodeinfo.Source{Kind: nodeinfo.SourceLabel, ConfigName: name}
	}
	tests := []struct {
		name string
		all  []nodeinfo.Source
		want []nodeinfo.Source
	}{
		{"none", nil, nil},
		{"one", []nodeinfo.Source{ann(doc1)}, nil},
		{"two annotations, same document", []nodeinfo.Source{ann(doc1), runai(" " + doc1 + "\n")}, nil},
		{"two annotations, other documents", []nodeinfo.Source{ann(doc1), runai("x")}, []nodeinfo.Source{runai("x")}},
		{"an annotation and the label", []nodeinfo.Source{runai(doc1), label("all-disabled")}, []nodeinfo.Source{label("all-disabled")}},
		{"all three", []nodeinfo.Source{ann(doc1), runai(doc1), label("a")}, []nodeinfo.Source{label("a")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ignoredSources(tc.all)); diff != "" {
				t.Errorf("ignoredSources() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIgnoredNote(t *testing.T) {
	winner := nodeinfo.Source{Kind: nodeinfo.SourceAnnotation}
	one := ignoredNote(winner, []nodeinfo.Source{{Kind: nodeinfo.SourceRunAIAnnotation}})
	if want := "annotation nvidia.com/mig.config decides the layout; annotation run.ai/mig.config is set too and ignored"; one != want {
		t.Errorf("one ignored: %q, want %q", one, want)
	}
	two := ignoredNote(winner, []nodeinfo.Source{{Kind: nodeinfo.SourceRunAIAnnotation}, {Kind: nodeinfo.SourceLabel, ConfigName: "x"}})
	if want := "annotation nvidia.com/mig.config decides the layout; annotation run.ai/mig.config and label nvidia.com/mig.config=x are set too and ignored"; two != want {
		t.Errorf("two ignored: %q, want %q", two, want)
	}
}
