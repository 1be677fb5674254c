package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Resampling makes a pod list of another mix from one of the trace's, the
// way the trace's own resampled files were made from its default list
// (openb_pod_list_gpushare*, _multigpu*: the same tasks, drawn again so
// that a kind of task asks for a given share of the GPUs requested), so
// that the planner can be checked on mixes no file here has. CPU-only
// tasks are kept as they are; drawn tasks keep their own times.
type Resampling struct {
	// Kind is "gpushare" (GPU-sharing tasks: one GPU, gpu_milli under
	// 1000) or "multigpu" (tasks of two GPUs or more).
	Kind string
	// Share is the share of the GPUs requested (num_gpu * gpu_milli /
	// 1000, summed) that tasks of Kind ask for after resampling.
	Share float64
}

// ParseResampling reads "gpushare=0.6" or "multigpu=0.3".
func ParseResampling(s string) (Resampling, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return Resampling{}, fmt.Errorf("resampling %q: want gpushare=SHARE or multigpu=SHARE", s)
	}
	share, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	r := Resampling{Kind: strings.TrimSpace(k), Share: share}
	if r.Kind != "gpushare" && r.Kind != "multigpu" {
		return Resampling{}, fmt.Errorf("resampling %q: the kind is gpushare or multigpu", s)
	}
	// Every GPU task may share a GPU (gpushare=1); multi-GPU tasks
	// cannot be all there is, as the others are kept.
	if err != nil || share <= 0 || share > 1 || share == 1 && r.Kind == "multigpu" {
		return Resampling{}, fmt.Errorf("resampling %q: the share must be a number above 0 and below 1 (up to 1 for gpushare)", s)
	}
	return r, nil
}

func (r Resampling) String() string { return fmt.Sprintf("%s=%g", r.Kind, r.Share) }

// gpus is what a task asks for in GPUs.
func (t Task) gpus() float64 {
	if t.NumGPU == 1 && t.GPUMilli < 1000 {
		return float64(t.GPUMilli) / 1000
	}
	return float64(t.NumGPU)
}

func (r Resampling) of(t Task) bool {
	if r.Kind == "gpushare" {
		return t.NumGPU == 1 && t.GPUMilli < 1000
	}
	return t.NumGPU >= 2
}

// Resample draws a pod list with the resampling's mix from tasks, with the
// seed. gpushare keeps the number of GPU tasks, as the trace's
// gpushare files do: tasks of the kind and the others are drawn (with
// replacement) in the numbers that give the share. multigpu keeps every
// other task and draws multi-GPU tasks until they ask for the share, as
// the trace's multigpu files do.
func Resample(tasks []Task, r Resampling, seed uint64) ([]Task, error) {
	var cpu, in, out []Task
	for _, t := range tasks {
		switch {
		case t.NumGPU <= 0:
			cpu = append(cpu, t)
		case r.of(t):
			in = append(in, t)
		default:
			out = append(out, t)
		}
	}
	if len(in) == 0 || len(out) == 0 && r.Share < 1 {
		return nil, fmt.Errorf("resampling %s: the pod list needs tasks of the kind and others (%d and %d)", r, len(in), len(out))
	}
	mean := func(ts []Task) float64 {
		s := 0.0
		for _, t := range ts {
			s += t.gpus()
		}
		return s / float64(len(ts))
	}
	rng := rand.New(rand.NewPCG(seed, 0x7265736d))
	draw := func(from []Task, n int) []Task {
		outs := make([]Task, n)
		for i := range outs {
			outs[i] = from[rng.IntN(len(from))]
		}
		return outs
	}
	res := append([]Task(nil), cpu...)
	switch r.Kind {
	case "gpushare":
		// n_in * a_in / (n_in * a_in + n_out * a_out) = share, n_in + n_out = n.
		n := len(in) + len(out)
		ain, aout := mean(in), mean(out)
		nin := int(math.Round(float64(n) * r.Share * aout / (r.Share*aout + (1-r.Share)*ain)))
		nin = min(max(nin, 1), n-1)
		if r.Share == 1 {
			nin = n
		}
		res = append(res, draw(in, nin)...)
		res = append(res, draw(out, n-nin)...)
	case "multigpu":
		// n_in * a_in = share / (1 - share) * (the others' GPUs).
		others := mean(out) * float64(len(out))
		nin := int(math.Round(r.Share / (1 - r.Share) * others / mean(in)))
		res = append(res, out...)
		res = append(res, draw(in, max(nin, 1))...)
	}
	for i := range res {
		res[i].Name = fmt.Sprintf("%s-r%d", res[i].Name, i)
	}
	return res, nil
}
