package migconfig

import (
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	const two = `version: v1
mig-configs:
  selected:
  - devices: all
    mig-enabled: true
    mig-devices: {"3g.40gb": 2}
  other:
  - devices: [5]
    mig-enabled: true
    mig-devices: {"7g.80gb": 1}
`
	node := gpus(2, h100)
	tests := []struct {
		name      string
		doc       string
		config    string
		scope     Scope
		wantName  string
		wantGPUs  int
		wantNotes string
		wantErr   string
	}{
		{name: "selected by default", doc: two, wantName: "selected", wantGPUs: 2},
		{name: "named", doc: two, config: "selected", wantName: "selected", wantGPUs: 2},
		{name: "not parsed", doc: "version: v1\nmig-configs: [", wantErr: "yaml"},
		{name: "no such configuration", doc: two, config: "nope", wantErr: `mig-config "nope" not found`},
		{name: "annotation: a GPU the node lacks is an error naming the configuration", doc: two, config: "other", wantErr: `config "other": `},
		{name: "config file: a GPU the node lacks is left out and said", doc: two, config: "other", scope: ScopeFleet, wantName: "other", wantNotes: "5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Resolve([]byte(tc.doc), tc.config, node, tc.scope)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve() = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Name != tc.wantName || len(r.Plan.GPUs) != tc.wantGPUs || len(r.Desired) != tc.wantGPUs {
				t.Errorf("Resolve() = %q with %d GPUs planned, %d desired; want %q with %d", r.Name, len(r.Plan.GPUs), len(r.Desired), tc.wantName, tc.wantGPUs)
			}
			if got := strings.Join(r.Notes, "; "); !strings.Contains(got, tc.wantNotes) || (tc.wantNotes == "") != (got == "") {
				t.Errorf("notes %q, want %q", got, tc.wantNotes)
			}
		})
	}
}
