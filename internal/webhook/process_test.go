package webhook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigDecider(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\nallowUp: false\n")
	bad := write("bad.yaml", "apiVersion: migflex.io/v1alpha1\nkind: FallbackPolicy\nallowUp: maybe\n")
	base := Config{Mode: "existence", OnUnsatisfiable: "deny", OnInsufficientCount: "allow"}
	with := func(f func(*Config)) Config { o := base; f(&o); return o }

	tests := map[string]struct {
		o       Config
		wantErr string
	}{
		"default policy":    {o: base},
		"policy file":       {o: with(func(o *Config) { o.PolicyFile = good })},
		"missing file":      {o: with(func(o *Config) { o.PolicyFile = filepath.Join(dir, "none.yaml") }), wantErr: "reading --config"},
		"invalid file":      {o: with(func(o *Config) { o.PolicyFile = bad }), wantErr: "--config " + bad},
		"bad mode":          {o: with(func(o *Config) { o.Mode = "free" }), wantErr: `unknown mode "free"`},
		"bad unsatisfiable": {o: with(func(o *Config) { o.OnUnsatisfiable = "ignore" }), wantErr: `on unsatisfiable: unknown action "ignore"`},
		"deny insufficient": {o: with(func(o *Config) { o.OnInsufficientCount = "deny" })},
		"bad insufficient":  {o: with(func(o *Config) { o.OnInsufficientCount = "warn" }), wantErr: `on insufficient count: unknown action "warn"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := tc.o.Decider()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || d == nil {
				t.Fatalf("Decider() = %v, %v", d, err)
			}
			if d.Mode() != tc.o.Mode {
				t.Errorf("mode = %s", d.Mode())
			}
		})
	}
}
