package replay

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func share(tasks []Task, r Resampling) (float64, int, int) {
	var in, all float64
	cpu, gpu := 0, 0
	for _, t := range tasks {
		if t.NumGPU <= 0 {
			cpu++
			continue
		}
		gpu++
		all += t.gpus()
		if r.of(t) {
			in += t.gpus()
		}
	}
	return in / all, cpu, gpu
}

// TestResample: the resampled list asks for the share it was told to, keeps
// its CPU-only tasks (and, for gpushare, its number of GPU tasks; for
// multigpu, every task that is not multi-GPU), and is the same for the
// same seed.
func TestResample(t *testing.T) {
	var tasks []Task
	for i := range 300 {
		tasks = append(tasks, Task{Name: "cpu", NumGPU: 0, Created: float64(i)})
		tasks = append(tasks, Task{Name: "share", NumGPU: 1, GPUMilli: 100 + i%9*100, Created: float64(i), Duration: float64(i)})
		tasks = append(tasks, Task{Name: "whole", NumGPU: 1, GPUMilli: 1000, Created: float64(i), Duration: 1})
		if i%10 == 0 {
			tasks = append(tasks, Task{Name: "multi", NumGPU: 2 + i%7, GPUMilli: 1000, Created: float64(i), Duration: 2})
		}
	}
	for _, spec := range []string{"gpushare=0.2", "gpushare=0.8", "gpushare=1", "multigpu=0.1", "multigpu=0.6"} {
		t.Run(spec, func(t *testing.T) {
			r, err := ParseResampling(spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Resample(tasks, r, 1)
			if err != nil {
				t.Fatal(err)
			}
			s, cpu, gpu := share(got, r)
			_, cpu0, gpu0 := share(tasks, r)
			if math.Abs(s-r.Share) > 0.03 {
				t.Errorf("share %.3f, want %.3f", s, r.Share)
			}
			if cpu != cpu0 {
				t.Errorf("%d CPU-only tasks, had %d", cpu, cpu0)
			}
			if r.Kind == "gpushare" && gpu != gpu0 {
				t.Errorf("%d GPU tasks, had %d", gpu, gpu0)
			}
			if r.Kind == "multigpu" {
				kept := 0
				for _, tk := range got {
					if tk.NumGPU == 1 {
						kept++
					}
				}
				if kept != 600 {
					t.Errorf("%d one-GPU tasks kept, want all 600", kept)
				}
			}
			again, _ := Resample(tasks, r, 1)
			other, _ := Resample(tasks, r, 2)
			same := func(a, b []Task) bool {
				return slices.EqualFunc(a, b, func(x, y Task) bool { return x.Name == y.Name && x.GPUMilli == y.GPUMilli && x.Created == y.Created })
			}
			if !same(got, again) || same(got, other) {
				t.Error("not the same list for the same seed, or the same for another")
			}
		})
	}
	for _, bad := range []string{"gpushare", "gpushare=1.5", "multigpu=1", "gpushare=0", "cpu=0.5", "multigpu=x"} {
		if _, err := ParseResampling(bad); err == nil || !strings.Contains(err.Error(), "resampling") {
			t.Errorf("%q: %v, want an error", bad, err)
		}
	}
	if _, err := Resample([]Task{{NumGPU: 1, GPUMilli: 1000}}, Resampling{Kind: "gpushare", Share: 0.5}, 1); err == nil {
		t.Error("a list without sharing tasks resampled to gpushare")
	}
}
