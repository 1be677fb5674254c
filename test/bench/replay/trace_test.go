package replay

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
)

func readFile(t *testing.T, path string) ([]Task, Columns) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tasks, cols, err := ReadTasks(f)
	if err != nil {
		t.Fatal(err)
	}
	return tasks, cols
}

// TestReadRealFiles reads the samples of two trace files: one with every
// column, one with only five.
func TestReadRealFiles(t *testing.T) {
	tasks, cols := readFile(t, "testdata/openb_pod_list_default.head.csv")
	if len(tasks) != 20 || !cols.Times || !cols.QoS || !cols.GPUSpec || !cols.GPUMilli {
		t.Fatalf("default sample: %d tasks, columns %+v", len(tasks), cols)
	}
	// openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
	want := Task{Name: "openb-pod-0001", NumGPU: 1, GPUMilli: 460, QoS: "LS", Created: 427061, Duration: 12902960 - 427061}
	if diff := cmp.Diff(want, tasks[1]); diff != "" {
		t.Errorf("task 1 (-want +got):\n%s", diff)
	}
	tasks, cols = readFile(t, "testdata/openb_pod_list_multigpu30.head.csv")
	if len(tasks) != 20 || cols.Times || cols.QoS || cols.GPUSpec || !cols.GPUMilli {
		t.Fatalf("multigpu30 sample: %d tasks, columns %+v", len(tasks), cols)
	}
	if got := tasks[1]; got.NumGPU != 1 || got.GPUMilli != 460 || got.Created != 0 || got.Duration != 0 || got.Spec != nil {
		t.Errorf("multigpu30 task 1 = %+v", got)
	}
	f, err := os.Open("testdata/openb_node_list.head.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	nodes, err := ReadNodes(f)
	if err != nil {
		t.Fatal(err)
	}
	// The three CPU-only nodes are skipped.
	wantNodes := []TraceNode{
		{"openb-node-0234", 8, "G2"}, {"openb-node-0235", 8, "G2"}, {"openb-node-0236", 8, "G2"},
		{"openb-node-0244", 2, "T4"}, {"openb-node-0251", 2, "T4"},
	}
	if diff := cmp.Diff(wantNodes, nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}

// TestReadTasksColumns covers what other files of the format may do:
// columns in another order, nan, a gpu_spec, missing columns, bad rows.
func TestReadTasksColumns(t *testing.T) {
	for name, tc := range map[string]struct {
		csv   string
		want  []Task
		times bool
		err   string
	}{
		"reordered, nan, spec, unscheduled": {
			csv: "qos,num_gpu,name,gpu_spec,creation_time,scheduled_time,deletion_time,gpu_milli,extra\n" +
				"BE,1,a,nan,10,12,20,250,x\n" +
				"LS,2,b,V100M16|V100M32,5,,9,1000,y\n",
			want: []Task{
				{Name: "a", NumGPU: 1, GPUMilli: 250, QoS: "BE", Created: 10, Duration: 8},
				{Name: "b", NumGPU: 2, GPUMilli: 1000, QoS: "LS", Spec: []string{"V100M16", "V100M32"}, Created: 5, Duration: 4},
			},
			times: true,
		},
		"only num_gpu": {
			csv:  "num_gpu\n1\n0\n",
			want: []Task{{Name: "row-1", NumGPU: 1, GPUMilli: 1000}, {Name: "row-2", GPUMilli: 1000}},
		},
		"no num_gpu":        {csv: "name,gpu_milli\na,100\n", err: "no num_gpu column"},
		"some time columns": {csv: "num_gpu,creation_time\n1,5\n", err: "come together"},
		"negative":          {csv: "num_gpu,gpu_milli\n1,-5\n", err: "line 2: gpu_milli \"-5\""},
		"not a number":      {csv: "num_gpu\nx\n", err: "line 2: num_gpu \"x\""},
		"empty num_gpu":     {csv: "name,num_gpu\na,\n", err: "line 2: num_gpu is empty"},
		"no deletion":       {csv: "num_gpu,creation_time,deletion_time,scheduled_time\n1,5,,5\n", err: "required"},
		"empty file":        {csv: "", err: "reading the header"},
	} {
		t.Run(name, func(t *testing.T) {
			tasks, cols, err := ReadTasks(strings.NewReader(tc.csv))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cols.Times != tc.times {
				t.Errorf("Times = %v, want %v", cols.Times, tc.times)
			}
			if diff := cmp.Diff(tc.want, tasks); diff != "" {
				t.Errorf("tasks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMapping is the mapping docs/PLANNER.md states.
func TestMapping(t *testing.T) {
	h100, _ := simmodels.Get(DefaultModel)
	a100, _ := simmodels.Get("A100-SXM4-40GB")
	for _, tc := range []struct {
		task  Task
		model solver.Model
		res   corev1.ResourceName
		count int
		size  float64
		ok    bool
	}{
		{Task{NumGPU: 0}, h100, "", 0, 0, false},
		{Task{NumGPU: 1, GPUMilli: 1000}, h100, "nvidia.com/gpu", 1, 1, true},
		{Task{NumGPU: 8, GPUMilli: 1000}, h100, "nvidia.com/gpu", 8, 1, true},
		{Task{NumGPU: 2, GPUMilli: 300}, h100, "nvidia.com/gpu", 2, 1, true},
		// Memory share: 1g.10gb is 1/8 of the memory slices, 1g.20gb 2/8
		// (fewer compute slices than 2g.20gb), 3g.40gb 4/8, 7g.80gb all.
		{Task{NumGPU: 1, GPUMilli: 50}, h100, "nvidia.com/mig-1g.10gb", 1, 0.125, true},
		{Task{NumGPU: 1, GPUMilli: 125}, h100, "nvidia.com/mig-1g.10gb", 1, 0.125, true},
		{Task{NumGPU: 1, GPUMilli: 126}, h100, "nvidia.com/mig-1g.20gb", 1, 0.25, true},
		{Task{NumGPU: 1, GPUMilli: 460}, h100, "nvidia.com/mig-3g.40gb", 1, 0.5, true},
		{Task{NumGPU: 1, GPUMilli: 501}, h100, "nvidia.com/mig-7g.80gb", 1, 1, true},
		{Task{NumGPU: 1, GPUMilli: 999}, h100, "nvidia.com/mig-7g.80gb", 1, 1, true},
		{Task{NumGPU: 1, GPUMilli: 100}, a100, "nvidia.com/mig-1g.5gb", 1, 0.125, true},
		{Task{NumGPU: 1, GPUMilli: 0}, h100, "nvidia.com/mig-1g.10gb", 1, 0.125, true},
	} {
		got, ok := requestFor(tc.task, tc.model)
		if ok != tc.ok || got.res != tc.res || got.count != tc.count || got.size != tc.size {
			t.Errorf("requestFor(%+v, %s) = %+v %v, want %s x%d size %v %v", tc.task, tc.model.Name, got, ok, tc.res, tc.count, tc.size, tc.ok)
		}
	}
	for qos, want := range map[string]int32{"LS": 1000, "Guaranteed": 1000, "Burstable": 500, "BE": 0, "": 500, "other": 500} {
		if got := priorityOf(qos); got != want {
			t.Errorf("priorityOf(%q) = %d, want %d", qos, got, want)
		}
	}
	m, err := ParseModelMap("T4=A100-SXM4-40GB")
	if err != nil {
		t.Fatal(err)
	}
	if m.of("T4") != "A100-SXM4-40GB" || m.of("G2") != DefaultModel {
		t.Errorf("model map %v", m)
	}
	for _, bad := range []string{"T4", "T4=", "T4=Nope-GPU"} {
		if _, err := ParseModelMap(bad); err == nil {
			t.Errorf("ParseModelMap(%q) accepted", bad)
		}
	}
}

// TestSampleNodes keeps each trace model and is the same for a seed.
func TestSampleNodes(t *testing.T) {
	var nodes []TraceNode
	for i := range 100 {
		nodes = append(nodes, TraceNode{Name: "g2-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), GPUs: 8, Model: "G2"})
	}
	nodes = append(nodes, TraceNode{Name: "a10", GPUs: 1, Model: "A10"})
	got := sampleNodes(nodes, 0.1, 7)
	if len(got) != 11 {
		t.Fatalf("%d nodes, want 10 G2 and the one A10", len(got))
	}
	if diff := cmp.Diff(got, sampleNodes(nodes, 0.1, 7)); diff != "" {
		t.Errorf("not deterministic:\n%s", diff)
	}
	if cmp.Equal(got, sampleNodes(nodes, 0.1, 8)) {
		t.Error("another seed sampled the same nodes")
	}
}
