// Command replay replays a pod list of Alibaba's openb GPU trace on a
// simulated MIG fleet for every policy (static layouts, static with the
// fallback webhook, first fit at allocation, HAMi's dynamic MIG, migflex's
// DRA dynamic mode (first fit over the agent's steered order), nos-style
// greedy batches, the migflex planner, a fluid reference) at several loads,
// plus the FGD fill experiment, and writes replay.json, replay.md and SVG
// plots (served share and p99 wait against load, the fill) into --out. The
// same seed gives the same numbers; docs/PLANNER.md explains the model.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
	"github.com/migflex/migflex/test/bench/replay"
	"github.com/migflex/migflex/test/bench/report"
)

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pods := fs.String("pods", "", "pod list of the openb format (columns found by name), e.g. openb_pod_list_default.csv")
	nodes := fs.String("nodes", "", "node list (sn, gpu, model), e.g. openb_node_list_gpu_node.csv")
	timesFrom := fs.String("times-from", "", "when the pod list has no times: a pod list whose arrival gaps and durations are resampled")
	models := fs.String("models", "", `trace GPU model to simulator model, e.g. "G2=H100-SXM5-80GB,T4=A100-SXM4-40GB"; "*" is the rest (default: every GPU an `+replay.DefaultModel+`)`)
	speedup := fs.Float64("speedup", 100, "divide the trace's inter-arrival times by this (durations stay)")
	loads := fs.String("loads", "0.6,0.8,1,1.25,1.5,2", "loads (peak GPU demand / fleet GPUs) to replay at; the fleet is shrunk to match")
	drain := fs.Duration("drain", time.Hour, "how long to replay after the last arrival")
	latency := fs.Duration("latency", 5*time.Second, "time for a layout change (or a carved instance) to become usable")
	seed := fs.Uint64("seed", 1, "seed for the fleet sample and resampled times")
	policies := fs.String("policies", strings.Join(replay.AllPolicies, ","), "policies to replay")
	resample := fs.String("resample", "", "draw the pod list again so that a kind of task asks for a share of the GPUs requested, as the trace's own resampled files were made: gpushare=SHARE or multigpu=SHARE (with -seed)")
	fgd := fs.Bool("fgd", true, "run the FGD fill experiment")
	fillOnly := fs.Bool("fill-only", false, "run the fill experiment alone, not the timed replays")
	fgdFraction := fs.Float64("fgd-fleet", 0.25, "share of the node list the fill experiment uses (1: the whole list)")
	fgdOffered := fs.Float64("fgd-offered", 1.3, "demand the fill experiment offers, as a multiple of the fleet's GPUs")
	parallel := fs.Int("parallel", 0, "replays run at once (default: the CPUs)")
	out := fs.String("out", "_output/replay", "directory for replay.json and replay.md")
	pol := solver.DefaultPolicy()
	fs.IntVar(&pol.MaxGPUsPerRound, "planner-max-gpus", pol.MaxGPUsPerRound, "migflex: GPUs one round may repartition (0: no cap)")
	fs.DurationVar(&pol.Cooldown, "planner-cooldown", pol.Cooldown, "migflex: time a GPU is left alone after a change")
	fs.Float64Var(&pol.Weights.Touch, "planner-touch", pol.Weights.Touch, "migflex: cost of repartitioning a GPU")
	fs.Float64Var(&pol.Weights.Destroy, "planner-destroy", pol.Weights.Destroy, "migflex: cost of each free instance destroyed")
	fs.Float64Var(&pol.Weights.Fragmentation, "planner-fragmentation", pol.Weights.Fragmentation, "migflex: cost of each GPU's worth of usable capacity lost")
	fs.BoolVar(&pol.ReclaimIdle, "planner-reclaim", pol.ReclaimIdle, "migflex: give MIG GPUs with nothing in use back to whole")
	fs.BoolVar(&pol.HoldForMultiGPU, "planner-hold", pol.HoldForMultiGPU, "migflex: keep new MIG instances off the nodes a waiting multi-GPU pod could use")
	resv := reserve.DefaultPolicy()
	fs.IntVar(&resv.Max, "reserve-max", resv.Max, "migflex: nodes reserved at once for pods waiting for several whole GPUs (0: none)")
	fs.DurationVar(&resv.After, "reserve-after", resv.After, "migflex: how long such a pod waits before a node is reserved for it")
	fs.DurationVar(&resv.Lead, "reserve-lead", resv.Lead, "migflex: reserve only a node whose GPUs are expected free for the pod within this")
	fs.DurationVar(&resv.MaxLead, "reserve-max-lead", resv.MaxLead, "migflex: ... or within as long as the pod has waited, up to this")
	fs.DurationVar(&resv.Grace, "reserve-grace", resv.Grace, "migflex: a reservation lapses this long after its GPUs were expected free")
	cadence := solver.DefaultCadence()
	fs.DurationVar(&cadence.Idle, "migflex-idle", cadence.Idle, "migflex: a round runs once no pod became pending for this long")
	fs.DurationVar(&cadence.Max, "migflex-max", cadence.Max, "migflex: ... and at most this long after the first")
	fs.DurationVar(&cadence.Resync, "migflex-resync", cadence.Resync, "migflex: how often rounds run again while pods wait")
	fs.BoolVar(&cadence.Leading, "migflex-leading", cadence.Leading, "migflex: a round at once for the first pod after a quiet spell")
	halfLife := fs.Duration("mix-half-life", time.Hour, "migflex: half-life of the observed demand mix")
	migflexPreset := fs.Bool("migflex-preset", false, "migflex: start from the static policies' preset layouts (as nos does), not with every GPU whole")
	migflexDepartures := fs.Bool("migflex-departures", true, "migflex: a pod leaving its devices starts a round, as in the controller (false: only pods that cannot be scheduled and the resync do)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the replay to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *pods == "" || *nodes == "" {
		return errors.New("-pods and -nodes are required (the trace: github.com/alibaba/clusterdata, cluster-trace-gpu-v2023/csv)")
	}
	o := replay.Options{TraceName: filepath.Base(*pods), Speedup: *speedup, Drain: *drain, Latency: *latency,
		Seed: *seed, Planner: pol, Reserve: resv, Cadence: cadence, MixHalfLife: *halfLife, MigflexPreset: *migflexPreset, MigflexIgnoresDepartures: !*migflexDepartures, FGD: *fgd, FillOnly: *fillOnly, FGDFraction: *fgdFraction, FGDOffered: *fgdOffered,
		Parallel: *parallel, Progress: func(s string) { fmt.Fprintln(stderr, s) }}
	var err error
	if o.Models, err = replay.ParseModelMap(*models); err != nil {
		return err
	}
	for _, l := range strings.Split(*loads, ",") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		v, err := strconv.ParseFloat(l, 64)
		if err != nil {
			return fmt.Errorf("-loads: %q is not a number", l)
		}
		o.Loads = append(o.Loads, v)
	}
	for _, p := range strings.Split(*policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.Policies = append(o.Policies, p)
		}
	}
	if o.Tasks, o.Columns, err = readTasks(*pods); err != nil {
		return err
	}
	if *resample != "" {
		r, err := replay.ParseResampling(*resample)
		if err != nil {
			return err
		}
		if o.Tasks, err = replay.Resample(o.Tasks, r, *seed); err != nil {
			return err
		}
		o.TraceName = fmt.Sprintf("%s resampled %s (seed %d)", o.TraceName, r, *seed)
	}
	if *timesFrom != "" {
		if o.TimesFrom, _, err = readTasks(*timesFrom); err != nil {
			return err
		}
	}
	f, err := os.Open(*nodes)
	if err != nil {
		return err
	}
	defer f.Close()
	if o.Nodes, err = replay.ReadNodes(f); err != nil {
		return fmt.Errorf("%s: %w", *nodes, err)
	}
	r, err := replay.Run(o)
	if err != nil {
		return err
	}
	if err := report.Write(*out, "replay", r, func(w io.Writer) error { return replay.WriteMarkdown(w, r) }); err != nil {
		return err
	}
	if err := replay.WritePlots(*out, r); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s, %s and the plots (*.svg)\n", filepath.Join(*out, "replay.json"), filepath.Join(*out, "replay.md"))
	return nil
}

func readTasks(path string) ([]replay.Task, replay.Columns, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, replay.Columns{}, err
	}
	defer f.Close()
	tasks, cols, err := replay.ReadTasks(f)
	if err != nil {
		return nil, replay.Columns{}, fmt.Errorf("%s: %w", path, err)
	}
	return tasks, cols, nil
}

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
}
