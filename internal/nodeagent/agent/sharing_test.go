package agent

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/sharing"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

func TestReadSharing(t *testing.T) {
	const ts = "sharing: {timeSlicing: {resources: [{name: mig-1g.10gb, replicas: 2}]}}\n"
	root := t.TempDir()
	write := func(path, doc string) string {
		t.Helper()
		testutil.WriteTree(t, root, map[string]string{path: doc})
		return filepath.Join(root, path)
	}
	file := write("file/config.yaml", ts)
	bad := write("bad/config.yaml", "sharing: {timeslicing: {}}\n")
	write("dir/default", "version: v1\n")
	write("dir/ts", ts)
	write("dir/..data/ts", "not: a config\n") // a ConfigMap mount's own bookkeeping
	dir := filepath.Join(root, "dir")
	write("one/only", ts)

	for name, tc := range map[string]struct {
		path, def, label string
		wantName         string
		wantStrategy     sharing.Strategy
		wantErr          string
	}{
		"a file":                             {path: file, label: "ignored", wantName: "config.yaml", wantStrategy: sharing.StrategyTimeSlicing},
		"an invalid file":                    {path: bad, wantErr: `unknown field "timeslicing"`},
		"a missing file":                     {path: filepath.Join(root, "nope"), wantErr: "no such file"},
		"the label picks":                    {path: dir, label: "ts", wantName: "ts", wantStrategy: sharing.StrategyTimeSlicing},
		"no label: the config default":       {path: dir, wantName: "default", wantStrategy: sharing.StrategyNone},
		"no label: --sharing-config-default": {path: dir, def: "ts", wantName: "ts", wantStrategy: sharing.StrategyTimeSlicing},
		"no label: the only config":          {path: filepath.Join(root, "one"), wantName: "only", wantStrategy: sharing.StrategyTimeSlicing},
		"a label naming no config":           {path: dir, label: "big", wantErr: "label nvidia.com/device-plugin.config=big names no sharing config (known: default, ts)"},
	} {
		t.Run(name, func(t *testing.T) {
			a := &Agent{opts: Options{SharingConfig: tc.path, SharingDefault: tc.def}}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
			if tc.label != "" {
				node.Labels[sharing.LabelConfig] = tc.label
			}
			got := a.readSharing(node)
			if tc.wantErr != "" {
				if got.err == nil || !strings.Contains(got.err.Error(), tc.wantErr) || got.cfg != nil {
					t.Fatalf("readSharing = %+v, want an error containing %q and no config", got, tc.wantErr)
				}
				return
			}
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.name != tc.wantName || got.cfg.Strategy != tc.wantStrategy {
				t.Errorf("readSharing = %s (%s), want %s (%s)", got.name, got.cfg.Strategy, tc.wantName, tc.wantStrategy)
			}
			if again := a.readSharing(node); again.key != got.key {
				t.Errorf("key changed between two reads of the same config: %s, %s", got.key, again.key)
			}
		})
	}
}
