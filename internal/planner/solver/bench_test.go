package solver_test

import (
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner/solver"
)

// BenchmarkPlanRound is one round at the scale of the planner issue: 5,000
// nodes of 8 GPUs and 1,000 pending pods (results in docs/PLANNER.md).
func BenchmarkPlanRound(b *testing.B) {
	for _, size := range []struct {
		name           string
		nodes, pending int
		busy           float64
		maxGPUs        int
	}{
		// Six in ten instances in use: many pods find a free instance.
		{"nodes=5000/pending=1000/busy=0.6", 5000, 1000, 0.6, 64},
		// Almost everything in use and no cap: most pods need a reshape.
		{"nodes=5000/pending=1000/busy=1/nocap", 5000, 1000, 1, 0},
		{"nodes=500/pending=100/busy=0.6", 500, 100, 0.6, 64},
	} {
		snap := bigScenarioBusy(1, size.nodes, size.pending, size.busy)
		// The baseline, measured in the same run: one read of the same
		// snapshot (snapshotPass), the least a round must do. The
		// round's cost is also reported as a ratio to it, which holds
		// across machines and loads where CPU milliseconds do not.
		var baseline float64
		b.Run(size.name+"/baseline=snapshot-pass", func(b *testing.B) {
			free := 0
			cpu0 := cpuTime()
			for b.Loop() {
				free = snapshotPass(snap)
			}
			baseline = float64(cpuTime()-cpu0) / float64(b.N)
			b.ReportMetric(baseline, "cpu-ns/op")
			b.ReportMetric(float64(free), "free-devices")
		})
		b.Run(size.name, func(b *testing.B) {
			pol := solver.DefaultPolicy()
			pol.MaxGPUsPerRound = size.maxGPUs
			pl, err := solver.New(pol)
			if err != nil {
				b.Fatal(err)
			}
			// Build the per-model tables outside the timed loop: they are
			// built once per process.
			if _, err := pl.Plan(snap); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var res solver.Result
			cpu0 := cpuTime()
			for b.Loop() {
				res, err = pl.Plan(snap)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			// On a shared machine wall time includes waiting for a core;
			// the process's CPU time per round (GC included) does not.
			cpu := float64(cpuTime()-cpu0) / float64(b.N)
			b.ReportMetric(cpu, "cpu-ns/op")
			if baseline > 0 {
				b.ReportMetric(cpu/baseline, "x-snapshot-pass")
			}
			served := 0
			for _, p := range res.Pods {
				if p.Action != solver.ActionNone {
					served++
				}
			}
			b.ReportMetric(float64(served), "served")
			gpus := 0
			for _, n := range res.Nodes {
				gpus += len(n.GPUs)
			}
			b.ReportMetric(float64(gpus), "gpus-changed")
		})
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// snapshotPass reads the snapshot once, counting each node's free devices
// by resource (what the scheduler would offer a pod): the least any round
// must do, so the unit a round's cost is given in.
func snapshotPass(snap solver.Snapshot) int {
	total := 0
	free := map[corev1.ResourceName]int{}
	for ni := range snap.Nodes {
		clear(free)
		for _, g := range snap.Nodes[ni].GPUs {
			if !g.MigEnabled {
				if !g.InUse {
					free[resourcename.GPU]++
				}
				continue
			}
			for _, in := range g.Instances {
				if !in.InUse {
					free[resourcename.MIG(in.Profile)]++
				}
			}
		}
		for _, n := range free {
			total += n
		}
	}
	return total
}
