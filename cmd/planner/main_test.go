package main

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/migflex/migflex/internal/planner"
	"github.com/migflex/migflex/internal/reshape"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c config)
		wantErr string
	}{
		{
			name: "defaults",
			check: func(t *testing.T, c config) {
				o := c.opts
				if o.DryRun || !o.LeaderElection || o.Policy.Cooldown != planner.DefaultPolicy().Cooldown || o.MaxNodesPerRound != reshape.DefaultMaxNodesPerRound ||
					o.BatchIdle != reshape.DefaultBatchIdle || o.BatchMax != reshape.DefaultBatchMax || o.MetricsAddr != reshape.DefaultMetricsAddr || o.LeaseName != reshape.DefaultLeaseName {
					t.Errorf("defaults %+v", o)
				}
			},
		},
		{
			name: "environment twins",
			env: map[string]string{
				"MIGFLEX_PLANNER_DRY_RUN": "true", "MIGFLEX_PLANNER_COOLDOWN": "30s", "MIGFLEX_PLANNER_LEADER_ELECT_NAMESPACE": "gpu-webhook",
				"MIGFLEX_PLANNER_LEADER_ELECT_IDENTITY": "planner-abc", "MIGFLEX_PLANNER_MAX_NODES_PER_ROUND": "3",
			},
			check: func(t *testing.T, c config) {
				o := c.opts
				if !o.DryRun || o.Policy.Cooldown != 30*time.Second || o.LeaseNamespace != "gpu-webhook" || !strings.HasPrefix(o.Identity, "planner-abc_") || o.MaxNodesPerRound != 3 {
					t.Errorf("from the environment %+v", o)
				}
			},
		},
		{
			name: "a flag wins over its twin",
			args: []string{"--cooldown=1m", "--dry-run=false"},
			env:  map[string]string{"MIGFLEX_PLANNER_COOLDOWN": "30s", "MIGFLEX_PLANNER_DRY_RUN": "true"},
			check: func(t *testing.T, c config) {
				if c.opts.Policy.Cooldown != time.Minute || c.opts.DryRun {
					t.Errorf("cooldown %s dry run %v", c.opts.Policy.Cooldown, c.opts.DryRun)
				}
			},
		},
		{name: "a bad twin", env: map[string]string{"MIGFLEX_PLANNER_COOLDOWN": "soon"}, wantErr: `MIGFLEX_PLANNER_COOLDOWN="soon"`},
		{name: "a stray argument", args: []string{"x"}, wantErr: `unexpected arguments ["x"]`},
		{name: "no requests", args: []string{"--kube-api-qps=0"}, wantErr: "--kube-api-qps must be above 0"},
		{name: "an unknown flag", args: []string{"--nope"}, wantErr: "flag provided but not defined: -nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// The options a default command line gives are ones the controller takes
// (leader election needs the namespace the Deployment sets).
func TestDefaultsAreValid(t *testing.T) {
	c, err := parseFlags([]string{"--leader-elect-namespace=ns"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	c.opts.Client = fakeClient()
	if _, err := reshape.New(c.opts); err != nil {
		t.Fatal(err)
	}
}

func fakeClient() *fake.Clientset { return fake.NewClientset() }
