package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMigConfigLayout(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		gpus      int
		want      map[int][]string
		wantErr   bool
	}{
		{name: "list form, per GPU", gpus: 2,
			doc:  "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: [2g.20gb, 1g.10gb]\n  - devices: [1]\n    mig-enabled: true\n    mig-devices: [7g.80gb]\n",
			want: map[int][]string{0: {"1g.10gb", "2g.20gb"}, 1: {"7g.80gb"}}},
		{name: "counts, all devices (the planner's form)", gpus: 2,
			doc:  "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 2, \"3g.40gb\": 1}\n",
			want: map[int][]string{0: {"1g.10gb", "1g.10gb", "3g.40gb"}, 1: {"1g.10gb", "1g.10gb", "3g.40gb"}}},
		{name: "Run:ai placements, string indices", gpus: 1,
			doc:  "version: v1\nmig-configs:\n  selected:\n  - devices: [\"0\"]\n    mig-enabled: true\n    mig-devices: [{name: 3g.40gb, position: 4, size: 4}]\n",
			want: map[int][]string{0: {"3g.40gb"}}},
		{name: "MIG off", gpus: 1,
			doc:  "version: v1\nmig-configs:\n  only:\n  - devices: all\n    mig-enabled: false\n",
			want: map[int][]string{0: {}}},
		{name: "a GPU no entry names", gpus: 2, wantErr: true,
			doc: "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: [7g.80gb]\n"},
		{name: "no selected among several", gpus: 1, wantErr: true,
			doc: "version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: false\n  b:\n  - devices: all\n    mig-enabled: false\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := migConfigLayout([]byte(tc.doc), tc.gpus)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
