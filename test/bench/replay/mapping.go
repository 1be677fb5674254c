package replay

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
)

// LabelTraceModel is the node label carrying the trace's GPU model, which
// a task's gpu_spec becomes a required node affinity on.
const LabelTraceModel = "migflex.io/trace-gpu-model"

// DefaultModel is the MIG model every trace GPU becomes unless the model
// map says otherwise.
const DefaultModel = "H100-SXM5-80GB"

// ModelMap maps the trace's GPU models (P100, T4, V100M16, V100M32, A10,
// G2, G3, ...) to simulator models; "*" is every other model.
type ModelMap map[string]string

// ParseModelMap reads "G2=H100-SXM5-80GB,T4=A100-SXM4-40GB,*=H100-SXM5-80GB".
// Without "*" every unnamed model becomes DefaultModel.
func ParseModelMap(s string) (ModelMap, error) {
	m := ModelMap{"*": DefaultModel}
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("model map item %q: want TRACE_MODEL=SIMULATOR_MODEL", item)
		}
		if _, known := simmodels.Get(v); !known {
			return nil, fmt.Errorf("model map item %q: %q is not a simulator model", item, v)
		}
		m[k] = v
	}
	return m, nil
}

func (m ModelMap) of(trace string) string {
	if v, ok := m[trace]; ok {
		return v
	}
	return m["*"]
}

// request is what a task asks the cluster for.
type request struct {
	res   corev1.ResourceName
	count int
	// size is one device's share of a GPU's memory (1 for a whole GPU).
	size float64
}

func (r request) total() float64 { return r.size * float64(r.count) }

// kind names the request in reports: "gpu x8", "mig-3g.40gb x1".
func (r request) kind() string {
	return fmt.Sprintf("%s x%d", strings.TrimPrefix(string(r.res), "nvidia.com/"), r.count)
}

// requestFor maps a task to a request on MIG model m: num_gpu >= 2, or
// gpu_milli >= 1000, asks for that many whole GPUs (nvidia.com/gpu); a
// GPU-sharing task (num_gpu 1, gpu_milli < 1000) asks for the smallest MIG
// profile whose share of the GPU's memory slices covers gpu_milli/1000
// (fewest compute slices, then fewest memory slices; profiles with
// attributes such as +me are never chosen). CPU-only tasks (num_gpu 0)
// ask for nothing (ok false).
func requestFor(t Task, m solver.Model) (request, bool) {
	switch {
	case t.NumGPU <= 0:
		return request{}, false
	case t.NumGPU > 1 || t.GPUMilli >= 1000:
		return request{res: resourcename.GPU, count: t.NumGPU, size: 1}, true
	}
	p, total, ok := profileFor(m, t.GPUMilli)
	if !ok {
		return request{res: resourcename.GPU, count: 1, size: 1}, true
	}
	return request{res: resourcename.MIG(p.Name), count: 1, size: float64(p.MemorySlices) / float64(total)}, true
}

// profileFor is the smallest plain profile of m whose memory share covers
// milli thousandths of the GPU, and the model's memory slices.
func profileFor(m solver.Model, milli int) (mig.Profile, int, bool) {
	total := memorySlices(m)
	var best mig.Profile
	found := false
	for _, p := range m.Profiles {
		if strings.ContainsAny(p.Name, "+-") || p.MemorySlices*1000 < milli*total {
			continue
		}
		if !found || cmp.Or(cmp.Compare(p.Slices, best.Slices), cmp.Compare(p.MemorySlices, best.MemorySlices), cmp.Compare(p.Name, best.Name)) < 0 {
			best, found = p, true
		}
	}
	return best, total, found
}

func memorySlices(m solver.Model) int {
	total := 0
	for _, p := range m.Profiles {
		for _, s := range p.Placements {
			total = max(total, s+p.MemorySlices)
		}
	}
	return total
}

// priorityOf maps the trace's QoS class to a pod priority: latency
// sensitive (LS) and Guaranteed first, Burstable next, best effort (BE)
// last; a missing or unknown class sits with Burstable.
func priorityOf(qos string) int32 {
	switch strings.ToLower(qos) {
	case "ls", "guaranteed":
		return 1000
	case "be":
		return 0
	}
	return 500
}

// sampleNodes keeps about fraction of the nodes of each trace model (at
// least one of each), chosen with the seed; the result is in name order.
func sampleNodes(nodes []TraceNode, fraction float64, seed uint64) []TraceNode {
	if fraction >= 1 {
		out := slices.Clone(nodes)
		slices.SortFunc(out, func(a, b TraceNode) int { return cmp.Compare(a.Name, b.Name) })
		return out
	}
	byModel := map[string][]TraceNode{}
	for _, n := range nodes {
		byModel[n.Model] = append(byModel[n.Model], n)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6e6f646573))
	var out []TraceNode
	for _, model := range slices.Sorted(func(yield func(string) bool) {
		for k := range byModel {
			if !yield(k) {
				return
			}
		}
	}) {
		group := byModel[model]
		slices.SortFunc(group, func(a, b TraceNode) int { return cmp.Compare(a.Name, b.Name) })
		rng.Shuffle(len(group), func(i, j int) { group[i], group[j] = group[j], group[i] })
		keep := max(1, int(math.Round(fraction*float64(len(group)))))
		out = append(out, group[:min(keep, len(group))]...)
	}
	slices.SortFunc(out, func(a, b TraceNode) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// epoch is the wall-clock time of the replay's second zero, for the
// timestamps pods and snapshots carry.
var epoch = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)

func simTime(s float64) time.Time {
	return epoch.Add(time.Duration(math.Round(s * float64(time.Second))))
}

// simSeconds is the replay second of a time simTime gave.
func simSeconds(t time.Time) float64 { return t.Sub(epoch).Seconds() }

// k8sPod is the pod a task becomes: one container requesting the device,
// its priority, its creation time, and gpu_spec as a required affinity on
// the trace model label.
func k8sPod(name string, req request, prio int32, created float64, spec []string) *corev1.Pod {
	q := *resource.NewQuantity(int64(req.count), resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "trace", CreationTimestamp: metav1.NewTime(simTime(created))},
		Spec: corev1.PodSpec{
			Priority: &prio,
			Containers: []corev1.Container{{
				Name: "task",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{req.res: q},
					Limits:   corev1.ResourceList{req.res: q},
				},
			}},
		},
	}
	if len(spec) > 0 {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: LabelTraceModel, Operator: corev1.NodeSelectorOpIn, Values: spec}},
			}}},
		}}
	}
	return p
}
