package planner

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

func lookupIn(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestParseFlags(t *testing.T) {
	defaults := Config{
		Options: Options{
			Policy: solver.DefaultPolicy(), MaxNodesPerRound: DefaultMaxNodesPerRound, WriteParallelism: DefaultWriteParallelism, ManualHold: DefaultManualHold,
			Cadence: solver.DefaultCadence(), StartGrace: DefaultStartGrace, MixHalfLife: DefaultMixHalfLife, Reserve: reserve.DefaultPolicy(),
			LeaderElection: true, LeaseName: DefaultLeaseName, LeaseDuration: DefaultLeaseDuration,
			RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod,
		},
		KubeAPIQPS: DefaultKubeAPIQPS, KubeAPIBurst: DefaultKubeAPIBurst, MetricsAddr: DefaultMetricsAddr,
	}
	with := func(change func(c *Config)) Config {
		c := defaults
		change(&c)
		return c
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    Config
		wantErr string
	}{
		{name: "defaults", want: defaults},
		{
			name: "flags",
			args: []string{"--kubeconfig=/kc", "--dry-run", "--cooldown=1m", "--max-gpus-per-round=2", "--max-nodes-per-round=3", "--manual-hold=1s",
				"--batch-idle=1s", "--batch-max=4s", "--resync=9s", "--batch-leading", "--start-grace=5s", "--mix-half-life=2h", "--leader-elect=false",
				"--leader-elect-namespace=ns", "--leader-elect-name=l", "--leader-elect-identity=me", "--leader-elect-lease-duration=6s",
				"--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s", "--metrics-addr=", "--metrics-cert-dir=/certs", "--kube-api-qps=2.5", "--kube-api-burst=5",
				"--reserve-after=1m", "--reserve-max=2", "--reserve-lead=3m", "--reserve-max-lead=1h", "--reserve-grace=30s"},
			want: with(func(c *Config) {
				c.Kubeconfig, c.DryRun, c.Policy.Cooldown, c.Policy.MaxGPUsPerRound, c.MaxNodesPerRound, c.ManualHold = "/kc", true, time.Minute, 2, 3, time.Second
				c.Cadence = solver.Cadence{Idle: time.Second, Max: 4 * time.Second, Resync: 9 * time.Second, Leading: true}
				c.StartGrace, c.MixHalfLife, c.LeaderElection = 5*time.Second, 2*time.Hour, false
				c.LeaseNamespace, c.LeaseName, c.Identity = "ns", "l", "me"
				c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 6*time.Second, 4*time.Second, time.Second
				c.MetricsAddr, c.MetricsCertDir, c.KubeAPIQPS, c.KubeAPIBurst = "", "/certs", 2.5, 5
				c.Reserve = reserve.Policy{After: time.Minute, Max: 2, Lead: 3 * time.Minute, MaxLead: time.Hour, Grace: 30 * time.Second}
			}),
		},
		{
			name: "environment twins",
			env: map[string]string{
				"MIGFLEX_PLANNER_DRY_RUN": "true", "MIGFLEX_PLANNER_COOLDOWN": "30s", "MIGFLEX_PLANNER_LEADER_ELECT_NAMESPACE": "gpu-webhook",
				"MIGFLEX_PLANNER_LEADER_ELECT_IDENTITY": "planner-abc", "MIGFLEX_PLANNER_MAX_NODES_PER_ROUND": "3", "MIGFLEX_PLANNER_BATCH_IDLE": "1s",
				"KUBECONFIG": "/not/a/twin",
			},
			want: with(func(c *Config) {
				c.DryRun, c.Policy.Cooldown, c.LeaseNamespace, c.Identity, c.MaxNodesPerRound, c.Cadence.Idle = true, 30*time.Second, "gpu-webhook", "planner-abc", 3, time.Second
			}),
		},
		{
			name: "no cap on nodes per round",
			args: []string{"--max-nodes-per-round=0", "--max-gpus-per-round=0"},
			want: with(func(c *Config) { c.MaxNodesPerRound, c.Policy.MaxGPUsPerRound = -1, 0 }),
		},
		{
			name: "a flag wins over its twin",
			args: []string{"--cooldown=1m", "--dry-run=false"},
			env:  map[string]string{"MIGFLEX_PLANNER_COOLDOWN": "30s", "MIGFLEX_PLANNER_DRY_RUN": "true"},
			want: with(func(c *Config) { c.Policy.Cooldown = time.Minute }),
		},
		{name: "a bad twin", env: map[string]string{"MIGFLEX_PLANNER_COOLDOWN": "soon"}, wantErr: `MIGFLEX_PLANNER_COOLDOWN="soon"`},
		{name: "a stray argument", args: []string{"x"}, wantErr: `unexpected arguments ["x"]`},
		{name: "no requests", args: []string{"--kube-api-qps=0"}, wantErr: "--kube-api-qps (env MIGFLEX_PLANNER_KUBE_API_QPS) must be above 0"},
		{name: "an unknown flag", args: []string{"--nope"}, wantErr: "flag provided but not defined: -nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, lookupIn(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, c, cmpopts.IgnoreUnexported(solver.Policy{})); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// The options a default command line gives are ones the controller takes
// (leader election needs the namespace the Deployment sets and a name).
func TestDefaultsAreValid(t *testing.T) {
	c, err := parseFlags([]string{"--leader-elect-namespace=ns", "--leader-elect-identity=me"}, lookupIn(nil))
	if err != nil {
		t.Fatal(err)
	}
	c.Client = fake.NewClientset()
	if _, err := New(c.Options); err != nil {
		t.Fatal(err)
	}
}
