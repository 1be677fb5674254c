package replay

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Task is one row of a pod list of the openb trace (Alibaba cluster-trace-
// gpu-v2023): what it asks for and when.
type Task struct {
	Name string
	// NumGPU is num_gpu; GPUMilli is gpu_milli, the share of one GPU a
	// GPU-sharing task (NumGPU 1) asks for, in thousandths.
	NumGPU   int
	GPUMilli int
	// Spec lists the GPU models of gpu_spec ("V100M16|V100M32"); empty
	// means any.
	Spec []string
	QoS  string
	// Created is creation_time; Duration how long the task runs once
	// placed: deletion_time - scheduled_time, or deletion_time -
	// creation_time for a task the trace never scheduled. Both in seconds.
	Created  float64
	Duration float64
}

// Columns says which optional columns a pod list had.
type Columns struct {
	Names    []string `json:"names"`
	GPUSpec  bool     `json:"gpuSpec"`
	QoS      bool     `json:"qos"`
	Times    bool     `json:"times"`
	GPUMilli bool     `json:"gpuMilli"`
	// Unscheduled counts tasks without scheduled_time, whose duration is
	// taken from creation_time.
	Unscheduled int `json:"unscheduled"`
}

// ReadTasks reads a pod list of the trace's format by column name, in any
// column order; extra columns are ignored. Only num_gpu is required.
// Missing columns: gpu_milli means whole GPUs (1000); gpu_spec means no
// constraint; qos means no priority class; creation_time, deletion_time
// and scheduled_time (all three or none) mean the file has no times, and
// Columns.Times is false: the caller borrows or synthesizes them. Empty
// cells and "nan" read as missing. A malformed row is an error naming it.
func ReadTasks(r io.Reader) ([]Task, Columns, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, Columns{}, fmt.Errorf("reading the header: %w", err)
	}
	col := index(header)
	cols := Columns{Names: header}
	if _, ok := col["num_gpu"]; !ok {
		return nil, Columns{}, fmt.Errorf("header %q has no num_gpu column", strings.Join(header, ","))
	}
	_, cols.GPUMilli = col["gpu_milli"]
	_, cols.GPUSpec = col["gpu_spec"]
	_, cols.QoS = col["qos"]
	timeCols := 0
	for _, c := range []string{"creation_time", "deletion_time", "scheduled_time"} {
		if _, ok := col[c]; ok {
			timeCols++
		}
	}
	switch timeCols {
	case 0:
	case 3:
		cols.Times = true
	default:
		return nil, Columns{}, errors.New("creation_time, deletion_time and scheduled_time come together: the header has only some of them")
	}
	var tasks []Task
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, Columns{}, fmt.Errorf("line %d: %w", line, err)
		}
		t, unscheduled, err := parseTask(rec, col, cols)
		if err != nil {
			return nil, Columns{}, fmt.Errorf("line %d: %w", line, err)
		}
		if t.Name == "" {
			t.Name = fmt.Sprintf("row-%d", line-1)
		}
		if unscheduled {
			cols.Unscheduled++
		}
		tasks = append(tasks, t)
	}
	return tasks, cols, nil
}

func parseTask(rec []string, col map[string]int, cols Columns) (Task, bool, error) {
	get := func(name string) string {
		i, ok := col[name]
		if !ok || i >= len(rec) {
			return ""
		}
		v := strings.TrimSpace(rec[i])
		if strings.EqualFold(v, "nan") {
			return ""
		}
		return v
	}
	num := func(name string) (float64, bool, error) {
		s := get(name)
		if s == "" {
			return 0, false, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return 0, false, fmt.Errorf("%s %q is not a number of 0 or more", name, s)
		}
		return f, true, nil
	}
	t := Task{Name: get("name"), QoS: get("qos"), GPUMilli: 1000}
	n, ok, err := num("num_gpu")
	if err != nil {
		return Task{}, false, err
	}
	if !ok {
		return Task{}, false, errors.New("num_gpu is empty")
	}
	t.NumGPU = int(n)
	if m, ok, err := num("gpu_milli"); err != nil {
		return Task{}, false, err
	} else if ok {
		t.GPUMilli = int(m)
	}
	if s := get("gpu_spec"); s != "" {
		for _, m := range strings.Split(s, "|") {
			if m = strings.TrimSpace(m); m != "" && !slices.Contains(t.Spec, m) {
				t.Spec = append(t.Spec, m)
			}
		}
	}
	if !cols.Times {
		return t, false, nil
	}
	created, hasC, err := num("creation_time")
	if err != nil {
		return Task{}, false, err
	}
	deleted, hasD, err := num("deletion_time")
	if err != nil {
		return Task{}, false, err
	}
	scheduled, hasS, err := num("scheduled_time")
	if err != nil {
		return Task{}, false, err
	}
	if !hasC || !hasD {
		return Task{}, false, errors.New("creation_time and deletion_time are required when the columns exist")
	}
	t.Created = created
	from := created
	if hasS {
		from = scheduled
	}
	t.Duration = max(deleted-from, 0)
	return t, !hasS, nil
}

// TraceNode is one row of a node list.
type TraceNode struct {
	Name  string
	GPUs  int
	Model string
}

// ReadNodes reads a node list (sn, gpu, model; other columns ignored).
// Nodes without GPUs are skipped.
func ReadNodes(r io.Reader) ([]TraceNode, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("reading the header: %w", err)
	}
	col := index(header)
	for _, c := range []string{"sn", "gpu"} {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("node list header %q has no %s column", strings.Join(header, ","), c)
		}
	}
	var nodes []TraceNode
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		field := func(name string) string {
			i, ok := col[name]
			if !ok || i >= len(rec) {
				return ""
			}
			return strings.TrimSpace(rec[i])
		}
		n, err := strconv.Atoi(field("gpu"))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("line %d: gpu %q is not a count", line, field("gpu"))
		}
		if n == 0 {
			continue
		}
		model := field("model")
		if strings.EqualFold(model, "nan") {
			model = ""
		}
		nodes = append(nodes, TraceNode{Name: field("sn"), GPUs: n, Model: model})
	}
	return nodes, nil
}

func index(header []string) map[string]int {
	col := map[string]int{}
	for i, h := range header {
		col[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))] = i
	}
	return col
}
