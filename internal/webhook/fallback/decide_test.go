package fallback

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/schedview"
)

type alloc = map[corev1.ResourceName]int64

// threeNodes is the fault suite's cluster: mf-b200 (with opts) has
// 2g.20gb, the two others 1g.10gb.
func threeNodes(opts ...nodeOpt) []*corev1.Node {
	return []*corev1.Node{
		node("mf-h100", alloc{mig1g10: 7}),
		node("mf-b200", alloc{mig2g20: 3}, opts...),
		node("mf-dra", alloc{mig1g10: 7}),
	}
}

func TestDecide(t *testing.T) {
	noUp := DefaultPolicy()
	noUp.AllowUp = false
	noDown := DefaultPolicy()
	noDown.AllowDown = false
	noWhole := DefaultPolicy()
	noWhole.AllowWholeGPU = false
	min20 := DefaultPolicy()
	min20.MinMemoryGB = 20
	chain := DefaultPolicy()
	chain.Chains = map[corev1.ResourceName][]corev1.ResourceName{
		mig3g40: {gpu, mig1g10},
		gpu:     {mig7g80},
	}

	tolerate := func(key string) podOpt {
		return withToleration(corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	}

	tests := map[string]struct {
		nodes  []*corev1.Node
		pod    *corev1.Pod
		opts   Options
		want   Outcome
		writes []Rewrite
		// wantPod is the pod after the patch, without annotations; nil
		// means the patch must be empty.
		wantPod *corev1.Pod
		// label is the expected gpu-webhook.k8s.io/fallback annotation.
		label string
		// message and warning must contain these.
		message []string
		warning []string
	}{
		"no GPU request is allowed untouched": {
			nodes: []*corev1.Node{node("n1", alloc{mig1g10: 7})},
			pod:   newPod(withContainer("app", both("cpu", "1", "memory", "1Gi"))),
			want:  OutcomeNoGPU,
		},
		"zero quantity is no GPU request": {
			nodes: []*corev1.Node{node("n1", alloc{mig1g10: 7})},
			pod:   gpuPod(mig2g20, "0"),
			want:  OutcomeNoGPU,
		},
		"requested type present: unchanged": {
			nodes: []*corev1.Node{node("n1", alloc{mig2g20: 8, mig3g40: 4})},
			pod:   gpuPod(mig2g20, "1"),
			want:  OutcomeUnchanged,
		},
		"down: 2g.20gb to 1g.10gb as in the seeds": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 28})},
			pod:     gpuPod(mig2g20, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: gpuPod(mig1g10, "1"),
			label:   "2g.20gb->1g.10gb",
		},
		"seeds chain: 3g.40gb to nearest smaller 2g.20gb": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 7}), node("n2", alloc{mig2g20: 3}), node("n3", alloc{gpu: 4})},
			pod:     gpuPod(mig3g40, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig3g40, mig2g20, ReasonAbsent}},
			wantPod: gpuPod(mig2g20, "1"),
			label:   "3g.40gb->2g.20gb",
		},
		"seeds chain: 3g.40gb to 1g.10gb when 2g.20gb is absent": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 7}), node("n3", alloc{gpu: 4})},
			pod:     gpuPod(mig3g40, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig3g40, mig1g10, ReasonAbsent}},
			wantPod: gpuPod(mig1g10, "1"),
			label:   "3g.40gb->1g.10gb",
		},
		"whole GPU last: 2g.20gb to gpu": {
			nodes:   []*corev1.Node{node("v100", alloc{gpu: 4})},
			pod:     gpuPod(mig2g20, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, gpu, ReasonAbsent}},
			wantPod: gpuPod(gpu, "1"),
			label:   "2g.20gb->gpu",
		},
		"up: 1g.10gb with only 2g.20gb present": {
			nodes:   []*corev1.Node{node("n1", alloc{mig2g20: 8})},
			pod:     gpuPod(mig1g10, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig1g10, mig2g20, ReasonAbsent}},
			wantPod: gpuPod(mig2g20, "1"),
			label:   "1g.10gb->2g.20gb",
		},
		"down before up": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 7, mig3g40: 2})},
			pod:     gpuPod(mig2g20, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: gpuPod(mig1g10, "1"),
			label:   "2g.20gb->1g.10gb",
		},
		"up before whole GPU, nearest first": {
			nodes:   []*corev1.Node{node("n1", alloc{mig7g80: 1, mig4g40: 1, gpu: 2})},
			pod:     gpuPod(mig3g40, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig3g40, mig4g40, ReasonAbsent}},
			wantPod: gpuPod(mig4g40, "1"),
			label:   "3g.40gb->4g.40gb",
		},
		"same slices: more memory is nearer going down": {
			nodes:   []*corev1.Node{node("h100", alloc{mig1g10: 7, mig1g20: 4})},
			pod:     gpuPod(mig2g20, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g20, ReasonAbsent}},
			wantPod: gpuPod(mig1g20, "1"),
			label:   "2g.20gb->1g.20gb",
		},
		// A profile's attribute suffix is part of its type: media
		// extensions, graphics or their absence are never dropped or added.
		"attributes: 1g.10gb.me never falls to plain profiles": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 7, mig2g20: 1})},
			pod:     gpuPod(mig1g10m, "1"),
			want:    OutcomeDenied,
			message: []string{"nvidia.com/mig-1g.10gb.me is on no node", "GPU types there: nvidia.com/mig-1g.10gb, nvidia.com/mig-2g.20gb"},
		},
		"attributes: 1g.10gb.me falls among .me profiles, nearest first": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 7, "nvidia.com/mig-1g.5gb.me": 1, "nvidia.com/mig-2g.12gb.me": 1, "nvidia.com/mig-1g.24gb-me": 1})},
			pod:     gpuPod(mig1g10m, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig1g10m, "nvidia.com/mig-1g.5gb.me", ReasonAbsent}},
			wantPod: gpuPod("nvidia.com/mig-1g.5gb.me", "1"),
			label:   "1g.10gb.me->1g.5gb.me",
		},
		"attributes: 1g.10gb.me falls to a whole GPU, which has every engine": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 7, gpu: 1})},
			pod:     gpuPod(mig1g10m, "1"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig1g10m, gpu, ReasonAbsent}},
			wantPod: gpuPod(gpu, "1"),
			label:   "1g.10gb.me->gpu",
		},
		"attributes: plain 1g.10gb never falls to 1g.10gb.me": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10m: 7})},
			pod:     gpuPod(mig1g10, "1"),
			want:    OutcomeDenied,
			message: []string{"nvidia.com/mig-1g.10gb is on no node", "GPU types there: nvidia.com/mig-1g.10gb.me"},
		},
		"attributes: +gfx and -me keep their suffix": {
			nodes:  []*corev1.Node{node("n1", alloc{"nvidia.com/mig-1g.24gb.gfx": 4, "nvidia.com/mig-1g.24gb-me": 4, "nvidia.com/mig-1g.24gb": 4})},
			pod:    newPod(withContainer("g", both("nvidia.com/mig-2g.48gb.gfx", "1")), withContainer("m", both("nvidia.com/mig-2g.48gb-me", "1"))),
			want:   OutcomeRewritten,
			writes: []Rewrite{{"nvidia.com/mig-2g.48gb.gfx", "nvidia.com/mig-1g.24gb.gfx", ReasonAbsent}, {"nvidia.com/mig-2g.48gb-me", "nvidia.com/mig-1g.24gb-me", ReasonAbsent}},
			label:  "2g.48gb.gfx->1g.24gb.gfx,2g.48gb-me->1g.24gb-me",
		},
		"quantity kept: 2 x 2g.20gb to 2 x 1g.10gb": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 7})},
			pod:     gpuPod(mig2g20, "2"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: gpuPod(mig1g10, "2"),
			label:   "2g.20gb->1g.10gb",
		},
		"init containers and sidecars are rewritten": {
			nodes: []*corev1.Node{node("n1", alloc{mig1g10: 7})},
			pod: newPod(
				withInit("warmup", both(string(mig2g20), "1")),
				withSidecar("agent", both(string(mig2g20), "1", "cpu", "100m")),
				withContainer("main", both("cpu", "1")),
			),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: newPod(
				withInit("warmup", both(string(mig1g10), "1")),
				withSidecar("agent", both(string(mig1g10), "1", "cpu", "100m")),
				withContainer("main", both("cpu", "1")),
			),
			label: "2g.20gb->1g.10gb",
		},
		"several containers, distinct rewrites comma-separated": {
			nodes: []*corev1.Node{node("n1", alloc{mig1g10: 7, gpu: 1}), node("n2", alloc{mig4g40: 1})},
			pod: newPod(
				withContainer("a", both(string(mig2g20), "1")),
				withContainer("b", both(string(mig3g40), "2", "memory", "8Gi")),
				withContainer("c", both(string(mig2g20), "3")),
				withContainer("d", both(string(mig4g40), "1")),
			),
			want: OutcomeRewritten,
			writes: []Rewrite{
				{mig2g20, mig1g10, ReasonAbsent},
				{mig3g40, mig1g10, ReasonAbsent},
			},
			wantPod: newPod(
				withContainer("a", both(string(mig1g10), "1")),
				withContainer("b", both(string(mig1g10), "2", "memory", "8Gi")),
				withContainer("c", both(string(mig1g10), "3")),
				withContainer("d", both(string(mig4g40), "1")),
			),
			label: "2g.20gb->1g.10gb,3g.40gb->1g.10gb",
			// n1 has the 1g.10gb, n2 the 4g.40gb: no node has both.
			warning: []string{"no node this pod can be scheduled to has the GPU devices it needs on one node: 6 nvidia.com/mig-1g.10gb, 1 nvidia.com/mig-4g.40gb"},
		},
		"limits only: only limits rewritten (the API server defaults requests)": {
			nodes: []*corev1.Node{node("n1", alloc{mig1g10: 7})},
			pod: newPod(withContainer("main", corev1.ResourceRequirements{
				Requests: rl("cpu", "1"),
				Limits:   rl(string(mig2g20), "1"),
			})),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: newPod(withContainer("main", corev1.ResourceRequirements{
				Requests: rl("cpu", "1"),
				Limits:   rl(string(mig1g10), "1"),
			})),
			label: "2g.20gb->1g.10gb",
		},
		"target already requested by the container: quantities add up": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 7})},
			pod:     newPod(withContainer("main", both(string(mig2g20), "1", string(mig1g10), "2"))),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: newPod(withContainer("main", both(string(mig1g10), "3"))),
			label:   "2g.20gb->1g.10gb",
		},
		"nothing present: denied, naming the resource and what was checked": {
			nodes: []*corev1.Node{node("cpu1", nil), node("cpu2", nil), node("t4", alloc{"nvidia.com/mig-x": 0})},
			pod:   gpuPod(mig2g20, "1"),
			want:  OutcomeDenied,
			message: []string{
				"nvidia.com/mig-2g.20gb is on no node this pod can be scheduled to (3 nodes of the cluster's 3); they have no GPU types",
				"they have no GPU types",
			},
		},
		"nothing fits but on-unsatisfiable=allow: allowed unchanged with a warning": {
			nodes:   []*corev1.Node{node("cpu1", nil)},
			pod:     gpuPod(mig2g20, "1"),
			opts:    Options{OnUnsatisfiable: UnsatisfiableAllow},
			want:    OutcomeUnsatisfiable,
			warning: []string{"nvidia.com/mig-2g.20gb is on no node this pod can be scheduled to (1 node of the cluster's 1); it has no GPU types", "left unchanged"},
		},
		"allow on unsatisfiable still rewrites what fits": {
			nodes:   []*corev1.Node{node("n1", alloc{mig1g10: 7})},
			pod:     newPod(withContainer("a", both(string(mig2g20), "1")), withContainer("b", both(string(mig3g40), "1"))),
			opts:    Options{OnUnsatisfiable: UnsatisfiableAllow, Policy: Policy{AllowDown: true, Chains: map[corev1.ResourceName][]corev1.ResourceName{mig3g40: {mig2g20}}}},
			want:    OutcomeUnsatisfiable,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: newPod(withContainer("a", both(string(mig1g10), "1")), withContainer("b", both(string(mig3g40), "1"))),
			label:   "2g.20gb->1g.10gb",
			warning: []string{"nvidia.com/mig-3g.40gb is on no node", "explicit fallback chain: nvidia.com/mig-2g.20gb"},
		},
		"nodeSelector narrows the nodes": {
			nodes: []*corev1.Node{
				node("a", alloc{mig2g20: 8}, labeled("pool", "h100")),
				node("b", alloc{mig1g10: 7}, labeled("pool", "a100")),
			},
			pod:     gpuPod(mig2g20, "1", withNodeSelector("pool", "a100")),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: gpuPod(mig1g10, "1", withNodeSelector("pool", "a100")),
			label:   "2g.20gb->1g.10gb",
		},
		"nodeSelector matching no GPU node: denied with the count": {
			nodes: []*corev1.Node{
				node("a", alloc{mig2g20: 8}, labeled("pool", "h100")),
				node("c", nil, labeled("pool", "cpu")),
			},
			pod:     gpuPod(mig2g20, "1", withNodeSelector("pool", "cpu")),
			want:    OutcomeDenied,
			message: []string{"nvidia.com/mig-2g.20gb is on no node this pod can be scheduled to (1 node of the cluster's 2)"},
		},
		"required node affinity narrows the nodes": {
			nodes: []*corev1.Node{
				node("a", alloc{mig2g20: 8}, labeled("zone", "z1")),
				node("b", alloc{mig1g10: 7}, labeled("zone", "z2")),
			},
			pod: gpuPod(mig2g20, "1", withRequiredAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"z1"}},
			}})),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			label:  "2g.20gb->1g.10gb",
		},
		"required affinity terms are ORed": {
			nodes: []*corev1.Node{
				node("a", alloc{mig2g20: 8}, labeled("zone", "z1")),
				node("b", alloc{mig1g10: 7}, labeled("zone", "z2")),
			},
			pod: gpuPod(mig2g20, "1", withRequiredAffinity(
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z2"}}}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}}},
			)),
			want: OutcomeUnchanged,
		},
		"hostname selector is matched per node": {
			nodes: []*corev1.Node{
				node("a", alloc{mig2g20: 8}, labeled("pool", "p")),
				node("b", alloc{mig2g20: 8}, labeled("pool", "p")),
				node("c", alloc{mig1g10: 7}, labeled("pool", "p")),
			},
			pod:    gpuPod(mig2g20, "1", withNodeSelector(corev1.LabelHostname, "c")),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			label:  "2g.20gb->1g.10gb",
		},
		"hostname affinity in a shared group is matched per node": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7}), node("b", alloc{mig1g10: 7})},
			pod: gpuPod(mig1g10, "1", withRequiredAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"nope"}},
			}})),
			want:    OutcomeDenied,
			message: []string{"is on no node this pod can be scheduled to (0 nodes of the cluster's 2)"},
		},
		"matchFields on metadata.name": {
			nodes: []*corev1.Node{node("a", alloc{mig2g20: 8}), node("b", alloc{mig1g10: 7})},
			pod: gpuPod(mig2g20, "1", withRequiredAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}},
			}})),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			label:  "2g.20gb->1g.10gb",
		},
		"spec.nodeName restricts to that node": {
			nodes:  []*corev1.Node{node("a", alloc{mig2g20: 8}), node("b", alloc{mig1g10: 7})},
			pod:    gpuPod(mig2g20, "1", func(p *corev1.Pod) { p.Spec.NodeName = "b" }),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			label:  "2g.20gb->1g.10gb",
		},
		// A pod with spec.nodeName skips the scheduler: the kubelet admits
		// it on a NoSchedule-tainted or cordoned node and refuses it only
		// for a NoExecute taint it does not tolerate (and for a node
		// selector or required affinity that excludes the node).
		"spec.nodeName on a NoSchedule-tainted node: the node counts": {
			nodes: []*corev1.Node{node("gpu1", alloc{mig1g10: 7}, tainted("nvidia.com/gpu", corev1.TaintEffectNoSchedule))},
			pod:   gpuPod(mig1g10, "1", onNode("gpu1")),
			want:  OutcomeUnchanged,
		},
		"spec.nodeName on a cordoned node: the node counts": {
			nodes:   []*corev1.Node{node("gpu1", alloc{mig1g10: 7}, cordoned), node("gpu2", alloc{mig2g20: 3})},
			pod:     gpuPod(mig2g20, "1", onNode("gpu1")),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: gpuPod(mig1g10, "1", onNode("gpu1")),
			label:   "2g.20gb->1g.10gb",
		},
		"spec.nodeName on a node with an untolerated NoExecute taint: denied, naming the taint": {
			nodes:   []*corev1.Node{node("gpu1", alloc{mig1g10: 7}, tainted("broken", corev1.TaintEffectNoExecute)), node("gpu2", alloc{mig1g10: 7})},
			pod:     gpuPod(mig1g10, "1", onNode("gpu1")),
			want:    OutcomeDenied,
			message: []string{`node "gpu1" (the pod's spec.nodeName) has the taint broken=true:NoExecute, which the pod does not tolerate`},
		},
		"spec.nodeName with a tolerated NoExecute taint: the node counts": {
			nodes: []*corev1.Node{node("gpu1", alloc{mig1g10: 7}, tainted("broken", corev1.TaintEffectNoExecute))},
			pod:   gpuPod(mig1g10, "1", onNode("gpu1"), tolerate("broken")),
			want:  OutcomeUnchanged,
		},
		"spec.nodeName on a node without the type: denied, naming the node and its types": {
			nodes:   []*corev1.Node{node("gpu1", alloc{mig1g10: 7}, tainted("nvidia.com/gpu", corev1.TaintEffectNoSchedule)), node("gpu2", alloc{mig2g20: 3})},
			pod:     gpuPod(mig2g20, "1", onNode("gpu1"), withAnnotation(AnnotationPolicy, "none")),
			want:    OutcomeDenied,
			message: []string{`nvidia.com/mig-2g.20gb is not on node "gpu1" (the pod's spec.nodeName)`, "GPU types there: nvidia.com/mig-1g.10gb", "fallback disabled"},
		},
		"spec.nodeName on a node without GPUs: denied, saying so": {
			nodes:   []*corev1.Node{node("cpu1", nil), node("gpu2", alloc{mig2g20: 3})},
			pod:     gpuPod(mig2g20, "1", onNode("cpu1")),
			want:    OutcomeDenied,
			message: []string{`nvidia.com/mig-2g.20gb is not on node "cpu1" (the pod's spec.nodeName); it has no GPU types`},
		},
		"spec.nodeName naming an unknown node: denied, saying so": {
			nodes:   []*corev1.Node{node("gpu2", alloc{mig2g20: 3})},
			pod:     gpuPod(mig2g20, "1", onNode("gone")),
			want:    OutcomeDenied,
			message: []string{`spec.nodeName "gone" names no node in the cluster (of 1 node)`},
		},
		"spec.nodeName and a nodeSelector that excludes the node: denied, saying so": {
			nodes:   []*corev1.Node{node("gpu1", alloc{mig2g20: 3}, labeled("pool", "a"))},
			pod:     gpuPod(mig2g20, "1", onNode("gpu1"), withNodeSelector("pool", "b")),
			want:    OutcomeDenied,
			message: []string{`node "gpu1" (the pod's spec.nodeName) does not match its nodeSelector or required node affinity`},
		},
		"untolerated NoSchedule taint: node does not count": {
			nodes: []*corev1.Node{
				node("a", alloc{mig2g20: 8}, tainted("reserved", corev1.TaintEffectNoSchedule)),
				node("b", alloc{mig1g10: 7}),
			},
			pod:    gpuPod(mig2g20, "1"),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			label:  "2g.20gb->1g.10gb",
		},
		"untolerated NoExecute taint: node does not count": {
			nodes: []*corev1.Node{
				node("a", alloc{mig2g20: 8}, tainted("broken", corev1.TaintEffectNoExecute)),
				node("b", alloc{mig1g10: 7}),
			},
			pod:    gpuPod(mig2g20, "1"),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			label:  "2g.20gb->1g.10gb",
		},
		"tolerated taint: node counts": {
			nodes: []*corev1.Node{
				node("a", alloc{mig2g20: 8}, tainted("nvidia.com/gpu", corev1.TaintEffectNoSchedule)),
				node("b", alloc{mig1g10: 7}),
			},
			pod:  gpuPod(mig2g20, "1", tolerate("nvidia.com/gpu")),
			want: OutcomeUnchanged,
		},
		// The node lifecycle controller taints a node whose kubelet is not
		// Ready (a kubelet restart: seconds) or does not report, and takes
		// the taints off when it does again; the scheduler keeps the pod
		// waiting meanwhile. A decision that stays with the pod must not
		// follow them: the fault suite saw a pod pinned to a node refused
		// with "0 nodes of the cluster's 3" right after a kubelet restart.
		"pinned to a not-ready node (NoSchedule): the node counts": {
			nodes: threeNodes(tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule)),
			pod:   gpuPod(mig2g20, "1", withNodeSelector(corev1.LabelHostname, "mf-b200")),
			want:  OutcomeUnchanged,
		},
		"pinned to a not-ready node (both effects): the node counts": {
			nodes: threeNodes(tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule), tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)),
			pod:   gpuPod(mig2g20, "1", withNodeSelector(corev1.LabelHostname, "mf-b200")),
			want:  OutcomeUnchanged,
		},
		"pinned to an unreachable node: the node counts": {
			nodes: threeNodes(tainted(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule), tainted(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)),
			pod:   gpuPod(mig2g20, "1", withNodeSelector(corev1.LabelHostname, "mf-b200")),
			want:  OutcomeUnchanged,
		},
		"pinned to a not-ready node without the type: rewritten to its types, not refused": {
			nodes:   threeNodes(tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule)),
			pod:     gpuPod(mig3g40, "1", withNodeSelector(corev1.LabelHostname, "mf-b200")),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig3g40, mig2g20, ReasonAbsent}},
			wantPod: gpuPod(mig2g20, "1", withNodeSelector(corev1.LabelHostname, "mf-b200")),
			label:   "3g.40gb->2g.20gb",
		},
		"spec.nodeName on a not-ready node (NoExecute): the node counts": {
			nodes: threeNodes(tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)),
			pod:   gpuPod(mig2g20, "1", onNode("mf-b200")),
			want:  OutcomeUnchanged,
		},
		"unpinned, the type only on a not-ready node: kept, not rewritten": {
			nodes: threeNodes(tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule)),
			pod:   gpuPod(mig2g20, "1"),
			want:  OutcomeUnchanged,
		},
		// Other taints the kubelet's conditions bring stay filters: a node
		// under memory pressure is not a blip of a restart.
		"pinned to a node under memory pressure: the node does not count": {
			nodes:   threeNodes(tainted(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule)),
			pod:     gpuPod(mig2g20, "1", withNodeSelector(corev1.LabelHostname, "mf-b200")),
			want:    OutcomeDenied,
			message: []string{"is on no node this pod can be scheduled to (0 nodes of the cluster's 3)"},
		},
		"PreferNoSchedule taint does not filter": {
			nodes: []*corev1.Node{node("a", alloc{mig2g20: 8}, tainted("soft", corev1.TaintEffectPreferNoSchedule))},
			pod:   gpuPod(mig2g20, "1"),
			want:  OutcomeUnchanged,
		},
		"cordoned node does not count": {
			nodes:  []*corev1.Node{node("a", alloc{mig2g20: 8}, cordoned), node("b", alloc{mig1g10: 7})},
			pod:    gpuPod(mig2g20, "1"),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			label:  "2g.20gb->1g.10gb",
		},
		"cordoned node counts for a pod tolerating the cordon, as in the scheduler": {
			nodes: []*corev1.Node{node("a", alloc{mig2g20: 8}, cordoned), node("b", alloc{mig1g10: 7})},
			pod:   gpuPod(mig2g20, "1", tolerate(corev1.TaintNodeUnschedulable)),
			want:  OutcomeUnchanged,
		},
		"zero allocatable after reconfiguration counts as absent": {
			nodes:  []*corev1.Node{node("a", alloc{mig2g20: 0, mig1g10: 7})},
			pod:    gpuPod(mig2g20, "1"),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			label:  "2g.20gb->1g.10gb",
		},
		"explicit chain replaces the derived order": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7, mig2g20: 3, gpu: 1})},
			pod:     gpuPod(mig3g40, "1"),
			opts:    Options{Policy: chain},
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig3g40, gpu, ReasonAbsent}},
			wantPod: gpuPod(gpu, "1"),
			label:   "3g.40gb->gpu",
		},
		"explicit chain is not extended with other present types": {
			nodes:   []*corev1.Node{node("a", alloc{mig2g20: 3})},
			pod:     gpuPod(mig3g40, "1"),
			opts:    Options{Policy: chain},
			want:    OutcomeDenied,
			message: []string{"GPU types there: nvidia.com/mig-2g.20gb", "explicit fallback chain: nvidia.com/gpu -> nvidia.com/mig-1g.10gb"},
		},
		"explicit chain makes whole-GPU requests managed": {
			nodes:   []*corev1.Node{node("a", alloc{mig7g80: 1})},
			pod:     gpuPod(gpu, "1"),
			opts:    Options{Policy: chain},
			want:    OutcomeRewritten,
			writes:  []Rewrite{{gpu, mig7g80, ReasonAbsent}},
			wantPod: gpuPod(mig7g80, "1"),
			label:   "gpu->7g.80gb",
		},
		"whole-GPU requests are not managed without a chain": {
			nodes: []*corev1.Node{node("a", alloc{mig7g80: 1})},
			pod:   gpuPod(gpu, "1"),
			want:  OutcomeUnchanged,
		},
		"allowDown=false goes up": {
			nodes:  []*corev1.Node{node("a", alloc{mig1g10: 7, mig4g40: 1})},
			pod:    gpuPod(mig2g20, "1"),
			opts:   Options{Policy: noDown},
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig4g40, ReasonAbsent}},
			label:  "2g.20gb->4g.40gb",
		},
		"allowUp=false: larger profiles are ruled out": {
			nodes:   []*corev1.Node{node("a", alloc{mig2g20: 3})},
			pod:     gpuPod(mig1g10, "1"),
			opts:    Options{Policy: noUp},
			want:    OutcomeDenied,
			message: []string{"ruled out by policy: nvidia.com/mig-2g.20gb (allowUp is false)"},
		},
		"allowWholeGPU=false: gpu is ruled out": {
			nodes:   []*corev1.Node{node("a", alloc{gpu: 8})},
			pod:     gpuPod(mig2g20, "1"),
			opts:    Options{Policy: noWhole},
			want:    OutcomeDenied,
			message: []string{"nvidia.com/gpu (allowWholeGPU is false)"},
		},
		"minimum memory skips smaller profiles": {
			nodes:  []*corev1.Node{node("a", alloc{mig1g10: 7, mig1g20: 1, gpu: 1})},
			pod:    gpuPod(mig3g40, "1"),
			opts:   Options{Policy: min20},
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig3g40, mig1g20, ReasonAbsent}},
			label:  "3g.40gb->1g.20gb",
		},
		"minimum memory: nothing above it but a whole GPU": {
			nodes:  []*corev1.Node{node("a", alloc{mig1g10: 7, gpu: 1})},
			pod:    gpuPod(mig3g40, "1"),
			opts:   Options{Policy: min20},
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig3g40, gpu, ReasonAbsent}},
			label:  "3g.40gb->gpu",
		},
		"minimum memory: denied with the reason": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:     gpuPod(mig3g40, "1"),
			opts:    Options{Policy: min20},
			want:    OutcomeDenied,
			message: []string{"nvidia.com/mig-1g.10gb (10GB is below minMemoryGB 20)"},
		},
		"pod policy none: no fallback": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:     gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "none")),
			want:    OutcomeDenied,
			message: []string{"fallback disabled by pod annotation migflex.io/fallback-policy=none"},
		},
		"pod policy none with the type present: unchanged": {
			nodes: []*corev1.Node{node("a", alloc{mig2g20: 7})},
			pod:   gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "none")),
			want:  OutcomeUnchanged,
		},
		"pod policy down: larger profiles ruled out": {
			nodes:   []*corev1.Node{node("a", alloc{mig4g40: 1})},
			pod:     gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "down")),
			want:    OutcomeDenied,
			message: []string{`4g.40gb is up, pod annotation migflex.io/fallback-policy is "down"`},
		},
		"pod policy down still allows the whole GPU": {
			nodes:  []*corev1.Node{node("a", alloc{mig4g40: 1, gpu: 1})},
			pod:    gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "down")),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, gpu, ReasonAbsent}},
			label:  "2g.20gb->gpu",
		},
		"pod policy up skips smaller profiles": {
			nodes:  []*corev1.Node{node("a", alloc{mig1g10: 7, mig4g40: 1})},
			pod:    gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "up")),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig4g40, ReasonAbsent}},
			label:  "2g.20gb->4g.40gb",
		},
		"pod policy cannot widen the cluster policy": {
			nodes:   []*corev1.Node{node("a", alloc{mig4g40: 1})},
			pod:     gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "up")),
			opts:    Options{Policy: noUp},
			want:    OutcomeDenied,
			message: []string{"allowUp is false"},
		},
		"pod policy any is the default": {
			nodes:  []*corev1.Node{node("a", alloc{mig4g40: 1})},
			pod:    gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "any")),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig4g40, ReasonAbsent}},
			label:  "2g.20gb->4g.40gb",
		},
		"invalid pod policy is denied with the valid values": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:     gpuPod(mig2g20, "1", withAnnotation(AnnotationPolicy, "sideways")),
			want:    OutcomeDenied,
			message: []string{`"sideways" is not one of none, down, up, any`},
		},
		// Issue 14, point 5: names the webhook does not understand are left
		// alone with a warning naming them, never rewritten to a near type.
		"unknown profile 9g.99gb: left alone with a warning": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7, mig7g80: 1, gpu: 1})},
			pod:     gpuPod("nvidia.com/mig-9g.99gb", "1"),
			want:    OutcomeUnknown,
			warning: []string{"unknown GPU resource nvidia.com/mig-9g.99gb left as it is: no node has it and it is no MIG profile of an NVIDIA GPU"},
		},
		"unknown profile 999g.99999gb": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7, gpu: 1})},
			pod:     gpuPod("nvidia.com/mig-999g.99999gb", "1"),
			want:    OutcomeUnknown,
			warning: []string{"nvidia.com/mig-999g.99999gb left as it is"},
		},
		"unknown attributes 1g.10gb.zzz.yyy": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7, gpu: 1})},
			pod:     gpuPod("nvidia.com/mig-1g.10gb.zzz.yyy", "1"),
			want:    OutcomeUnknown,
			warning: []string{"nvidia.com/mig-1g.10gb.zzz.yyy left as it is"},
		},
		"not a profile name: mig-foo": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7, gpu: 1})},
			pod:     gpuPod("nvidia.com/mig-foo", "1"),
			want:    OutcomeUnknown,
			warning: []string{`unknown GPU resource "nvidia.com/mig-foo" left as it is`},
		},
		"upper case: mig-3g.40GB": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7, gpu: 1})},
			pod:     gpuPod("nvidia.com/mig-3g.40GB", "1"),
			want:    OutcomeUnknown,
			warning: []string{`"nvidia.com/mig-3g.40GB" left as it is`},
		},
		"unknown and known in one pod: the known one is rewritten, the unknown named": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:   newPod(withContainer("main", both(string(mig2g20), "1", "nvidia.com/mig-9g.99gb", "1", "nvidia.com/mig-foo", "1"))),
			want:  OutcomeRewritten,
			writes: []Rewrite{
				{mig2g20, mig1g10, ReasonAbsent},
			},
			wantPod: newPod(withContainer("main", both(string(mig1g10), "1", "nvidia.com/mig-9g.99gb", "1", "nvidia.com/mig-foo", "1"))),
			label:   "2g.20gb->1g.10gb",
			warning: []string{`unknown GPU resources nvidia.com/mig-9g.99gb, "nvidia.com/mig-foo" left as they are`},
		},
		"a profile no NVIDIA GPU has but some node has is understood": {
			nodes: []*corev1.Node{
				node("a", alloc{mig1g10: 7}, labeled("pool", "a")),
				node("custom", alloc{"nvidia.com/mig-1g.9gb": 7}, labeled("pool", "custom")),
			},
			pod:     gpuPod("nvidia.com/mig-1g.9gb", "1", withNodeSelector("pool", "a")),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{"nvidia.com/mig-1g.9gb", mig1g10, ReasonAbsent}},
			wantPod: gpuPod(mig1g10, "1", withNodeSelector("pool", "a")),
			label:   "1g.9gb->1g.10gb",
		},
		"a profile the policy names is understood": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:   gpuPod("nvidia.com/mig-5g.50gb", "1"),
			opts: Options{Policy: Policy{AllowDown: true, AllowUp: true, AllowWholeGPU: true,
				Chains: map[corev1.ResourceName][]corev1.ResourceName{"nvidia.com/mig-5g.50gb": {mig1g10}}}},
			want:   OutcomeRewritten,
			writes: []Rewrite{{"nvidia.com/mig-5g.50gb", mig1g10, ReasonAbsent}},
			label:  "5g.50gb->1g.10gb",
		},
		// Issue 14, point 5: a count no node can hold is said, not passed
		// in silence; --on-insufficient-count=deny denies it.
		"more devices than any node has: allowed with a warning": {
			nodes:   []*corev1.Node{node("a", alloc{mig7g80: 1}), node("b", alloc{mig7g80: 1})},
			pod:     gpuPod(mig7g80, "3"),
			want:    OutcomeUnchanged,
			warning: []string{"no node this pod can be scheduled to has the GPU devices it needs on one node: 3 nvidia.com/mig-7g.80gb (at most 1 on one node); it stays Pending until one has"},
		},
		"more devices than any node has, on-insufficient-count=deny: denied": {
			nodes:   []*corev1.Node{node("a", alloc{mig7g80: 1}), node("b", alloc{mig7g80: 1})},
			pod:     gpuPod(mig7g80, "3"),
			opts:    Options{OnInsufficientCount: UnsatisfiableDeny},
			want:    OutcomeDenied,
			message: []string{"3 nvidia.com/mig-7g.80gb (at most 1 on one node)"},
		},
		"count of the rewritten type is checked": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 1})},
			pod:     gpuPod(mig2g20, "2"),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: gpuPod(mig1g10, "2"),
			label:   "2g.20gb->1g.10gb",
			warning: []string{"2 nvidia.com/mig-1g.10gb (at most 1 on one node)"},
		},
		"count by the scheduler's rules: init containers take the max": {
			nodes: []*corev1.Node{node("a", alloc{mig7g80: 2})},
			pod:   newPod(withInit("i", both(string(mig7g80), "2")), withContainer("main", both(string(mig7g80), "1"))),
			want:  OutcomeUnchanged,
		},
		"count only on the nodes the pod can be scheduled to": {
			nodes:   []*corev1.Node{node("a", alloc{mig7g80: 1}, labeled("pool", "a")), node("b", alloc{mig7g80: 8}, labeled("pool", "b"))},
			pod:     gpuPod(mig7g80, "2", withNodeSelector("pool", "a")),
			want:    OutcomeUnchanged,
			warning: []string{"2 nvidia.com/mig-7g.80gb (at most 1 on one node)"},
		},
		"count enough on some node: no warning": {
			nodes: []*corev1.Node{node("a", alloc{mig7g80: 1}), node("b", alloc{mig7g80: 8})},
			pod:   gpuPod(mig7g80, "2"),
			want:  OutcomeUnchanged,
		},
		// Issue 14, point 5: quantities the API server rejects are left to
		// it, so that its message names what the user wrote.
		"non-integer quantity 1.5: left alone": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:   gpuPod(mig2g20, "1.5"),
			want:  OutcomeInvalid,
		},
		"non-integer quantity 100m: left alone": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:   newPod(withContainer("main", corev1.ResourceRequirements{Limits: rl(string(mig2g20), "100m")})),
			want:  OutcomeInvalid,
		},
		"requests unequal to limits: left alone": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:   newPod(withContainer("main", corev1.ResourceRequirements{Requests: rl(string(mig2g20), "1"), Limits: rl(string(mig2g20), "2")})),
			want:  OutcomeInvalid,
		},
		"a request without a limit: left alone": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:   newPod(withContainer("main", corev1.ResourceRequirements{Requests: rl(string(mig2g20), "1")})),
			want:  OutcomeInvalid,
		},
		"a negative quantity elsewhere in the pod: left alone": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:   newPod(withContainer("main", both(string(mig2g20), "1")), withInit("i", both(string(mig1g10), "-1"))),
			want:  OutcomeInvalid,
		},
		"another vendor's extended resource that is not whole: left alone": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:   newPod(withContainer("main", both(string(mig2g20), "1", "example.com/fpga", "500m"))),
			want:  OutcomeInvalid,
		},
		"fractions of native resources are fine": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:     newPod(withContainer("main", both(string(mig2g20), "1", "cpu", "500m", "memory", "1.5Gi"))),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: newPod(withContainer("main", both(string(mig1g10), "1", "cpu", "500m", "memory", "1.5Gi"))),
			label:   "2g.20gb->1g.10gb",
		},
		"already processed pod is not rewritten again": {
			nodes: []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:   gpuPod(mig2g20, "1", withAnnotation(AnnotationOriginal, `{}`)),
			want:  OutcomeAlreadyProcessed,
		},
		"existing annotations are kept": {
			nodes:   []*corev1.Node{node("a", alloc{mig1g10: 7})},
			pod:     gpuPod(mig2g20, "1", withAnnotation("team", "ml")),
			want:    OutcomeRewritten,
			writes:  []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
			wantPod: gpuPod(mig1g10, "1"),
			label:   "2g.20gb->1g.10gb",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := NewDecider(withDefaults(tc.opts))
			if err != nil {
				t.Fatal(err)
			}
			pod := tc.pod.DeepCopy()
			got := d.Decide(pod, snapshotOf(tc.nodes...))
			if diff := cmp.Diff(tc.pod, pod); diff != "" {
				t.Fatalf("Decide modified its input (-before +after):\n%s", diff)
			}
			if got.Outcome != tc.want {
				t.Fatalf("outcome = %s, want %s (message %q)", got.Outcome, tc.want, got.Message)
			}
			if want := tc.want != OutcomeDenied; got.Allowed != want {
				t.Errorf("allowed = %v, want %v", got.Allowed, want)
			}
			if diff := cmp.Diff(tc.writes, got.Rewrites); diff != "" {
				t.Errorf("rewrites (-want +got):\n%s", diff)
			}
			for _, s := range tc.message {
				if !strings.Contains(got.Message, s) {
					t.Errorf("message %q does not contain %q", got.Message, s)
				}
			}
			warnings := strings.Join(got.Warnings, "\n")
			for _, s := range tc.warning {
				if !strings.Contains(warnings, s) {
					t.Errorf("warnings %q do not contain %q", warnings, s)
				}
			}
			if len(tc.warning) == 0 && len(got.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", got.Warnings)
			}
			if len(tc.writes) == 0 {
				if len(got.Patch) != 0 {
					t.Fatalf("patch = %+v, want none", got.Patch)
				}
				return
			}
			patched := applyPatch(t, tc.pod, got.Patch)
			if got := patched.Annotations[AnnotationFallback]; got != tc.label {
				t.Errorf("annotation %s = %q, want %q", AnnotationFallback, got, tc.label)
			}
			for k, v := range tc.pod.Annotations {
				if patched.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want it kept as %q", k, patched.Annotations[k], v)
				}
			}
			if tc.wantPod != nil {
				if diff := cmp.Diff(tc.wantPod.Spec, patched.Spec, quantityEqual); diff != "" {
					t.Errorf("patched spec (-want +got):\n%s", diff)
				}
			}
			// Reinvocation and re-admission see the annotation and change nothing.
			again := d.Decide(patched, snapshotOf(tc.nodes...))
			if again.Outcome != OutcomeAlreadyProcessed || len(again.Patch) != 0 {
				t.Errorf("second decision = %s with %d ops, want %s and none", again.Outcome, len(again.Patch), OutcomeAlreadyProcessed)
			}
		})
	}
}

func withDefaults(o Options) Options {
	if o.Policy.Chains == nil && !o.Policy.AllowDown && !o.Policy.AllowUp && !o.Policy.AllowWholeGPU && o.Policy.MinMemoryGB == 0 {
		o.Policy = DefaultPolicy()
	}
	return o
}

func TestDecideRecordsOriginalResources(t *testing.T) {
	d, err := NewDecider(Options{Policy: DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod(
		withInit("init", both(string(mig2g20), "1")),
		withContainer("main", both(string(mig2g20), "2", "cpu", "2")),
		withContainer("cpu-only", both("cpu", "1")),
	)
	got := d.Decide(pod, snapshotOf(node("a", alloc{mig1g10: 7})))
	patched := applyPatch(t, pod, got.Patch)

	var orig OriginalResources
	if err := json.Unmarshal([]byte(patched.Annotations[AnnotationOriginal]), &orig); err != nil {
		t.Fatalf("annotation %s: %v", AnnotationOriginal, err)
	}
	want := OriginalResources{
		Containers:     map[string]ContainerResources{"main": {Requests: rl(string(mig2g20), "2"), Limits: rl(string(mig2g20), "2")}},
		InitContainers: map[string]ContainerResources{"init": {Requests: rl(string(mig2g20), "1"), Limits: rl(string(mig2g20), "1")}},
	}
	if diff := cmp.Diff(want, orig, quantityEqual); diff != "" {
		t.Errorf("original resources (-want +got):\n%s", diff)
	}
	if got, want := patched.Annotations[AnnotationReason], "2g.20gb->1g.10gb=absent"; got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
}

func TestDecideCapacityMode(t *testing.T) {
	// a has 2 x 2g.20gb, b has 7 x 1g.10gb and 1 gpu; usage is per node.
	nodes := []*corev1.Node{node("a", alloc{mig2g20: 2}), node("b", alloc{mig1g10: 7, gpu: 1})}
	tests := map[string]struct {
		used   map[string]alloc
		pod    *corev1.Pod
		want   Outcome
		writes []Rewrite
	}{
		"requested type has a free device: unchanged": {
			used: map[string]alloc{"a": {mig2g20: 1}},
			pod:  gpuPod(mig2g20, "1"),
			want: OutcomeUnchanged,
		},
		"requested type exhausted: falls back to a type with free devices": {
			used:   map[string]alloc{"a": {mig2g20: 2}},
			pod:    gpuPod(mig2g20, "1"),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonExhausted}},
		},
		"need counts on one node: 2 devices do not fit in 1 + 1": {
			used:   map[string]alloc{"a": {mig2g20: 1}, "b": {mig1g10: 5}},
			pod:    gpuPod(mig2g20, "2"),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonExhausted}},
		},
		"exhausted candidates are skipped": {
			used:   map[string]alloc{"a": {mig2g20: 2}, "b": {mig1g10: 7}},
			pod:    gpuPod(mig2g20, "1"),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, gpu, ReasonExhausted}},
		},
		"everything exhausted: existence decides and the pod waits": {
			used: map[string]alloc{"a": {mig2g20: 2}, "b": {mig1g10: 7, gpu: 1}},
			pod:  gpuPod(mig2g20, "1"),
			want: OutcomeUnchanged,
		},
		"absent type, everything exhausted: first present candidate": {
			used:   map[string]alloc{"a": {mig2g20: 2}, "b": {mig1g10: 7, gpu: 1}},
			pod:    gpuPod(mig3g40, "1"),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig3g40, mig2g20, ReasonAbsent}},
		},
		"init containers take the max, not the sum": {
			used: map[string]alloc{"a": {mig2g20: 0}},
			pod: newPod(
				withInit("i1", both(string(mig2g20), "2")),
				withInit("i2", both(string(mig2g20), "2")),
				withContainer("main", both(string(mig2g20), "1")),
			),
			want: OutcomeUnchanged,
		},
		"sidecars add up with the main containers": {
			used: map[string]alloc{},
			pod: newPod(
				withSidecar("s", both(string(mig2g20), "1")),
				withContainer("main", both(string(mig2g20), "2")),
			),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonExhausted}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := schedview.NewBuilder(nil)
			for _, n := range nodes {
				b.SetNode(schedview.NodeFromAPI(n))
			}
			for n, u := range tc.used {
				b.SetPod("default/used-on-"+n, n, u)
			}
			d, err := NewDecider(Options{Policy: DefaultPolicy(), Mode: ModeCapacity})
			if err != nil {
				t.Fatal(err)
			}
			got := d.Decide(tc.pod, b.Snapshot())
			if got.Outcome != tc.want {
				t.Fatalf("outcome = %s, want %s (message %q)", got.Outcome, tc.want, got.Message)
			}
			if diff := cmp.Diff(tc.writes, got.Rewrites); diff != "" {
				t.Errorf("rewrites (-want +got):\n%s", diff)
			}
			if len(tc.writes) > 0 {
				patched := applyPatch(t, tc.pod, got.Patch)
				if !strings.Contains(patched.Annotations[AnnotationReason], "="+tc.writes[0].Reason) {
					t.Errorf("reason annotation %q, want %s", patched.Annotations[AnnotationReason], tc.writes[0].Reason)
				}
			}
		})
	}
}

// In capacity mode the pod's needs are tested together: everything the pod
// would request after its rewrites, type by type (what it already requests
// of a target included), must be free on one node.
func TestDecideCapacityCombinedNeed(t *testing.T) {
	type nodeUse struct {
		alloc, used alloc
	}
	chain := DefaultPolicy()
	chain.Chains = map[corev1.ResourceName][]corev1.ResourceName{mig3g40: {gpu, mig2g20}}
	tests := map[string]struct {
		nodes  map[string]nodeUse
		policy *Policy
		pod    *corev1.Pod
		want   Outcome
		writes []Rewrite
	}{
		"2g.20gb and 1g.10gb in one container, 2g.20gb exhausted, one 1g.10gb free: not 2 x 1g.10gb": {
			nodes: map[string]nodeUse{
				"a": {alloc{mig2g20: 2}, alloc{mig2g20: 2}},
				"b": {alloc{mig1g10: 7}, alloc{mig1g10: 6}},
			},
			pod:  newPod(withContainer("main", both(string(mig2g20), "1", string(mig1g10), "1"))),
			want: OutcomeUnchanged,
		},
		"the same in two containers, 2g.20gb first": {
			nodes: map[string]nodeUse{
				"a": {alloc{mig2g20: 2}, alloc{mig2g20: 2}},
				"b": {alloc{mig1g10: 7}, alloc{mig1g10: 6}},
			},
			pod:  newPod(withContainer("x", both(string(mig2g20), "1")), withContainer("y", both(string(mig1g10), "1"))),
			want: OutcomeUnchanged,
		},
		"a target the pod already requests counts: the next candidate that holds it all": {
			nodes: map[string]nodeUse{
				"a": {alloc{mig2g20: 2}, alloc{mig2g20: 2}},
				"b": {alloc{mig1g10: 7, gpu: 1}, alloc{mig1g10: 5}},
			},
			pod:    newPod(withContainer("x", both(string(mig1g10), "2")), withContainer("y", both(string(mig2g20), "1"))),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, gpu, ReasonExhausted}},
		},
		"two rewrites to one target must fit together": {
			nodes: map[string]nodeUse{
				"a": {alloc{mig2g20: 2}, alloc{mig2g20: 2}},
				"b": {alloc{mig1g10: 7, gpu: 1}, alloc{mig1g10: 6}},
			},
			pod:    newPod(withContainer("main", both(string(mig2g20), "1", string(mig3g40), "1"))),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonExhausted}, {mig3g40, gpu, ReasonAbsent}},
		},
		"free on two different nodes is not free on one: the next candidate that is": {
			nodes: map[string]nodeUse{
				"a": {alloc{mig1g10: 1, mig2g20: 1}, nil},
				"b": {alloc{gpu: 1}, nil},
			},
			policy: &chain,
			pod:    newPod(withContainer("main", both(string(mig1g10), "1", string(mig3g40), "1"))),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig3g40, mig2g20, ReasonAbsent}},
		},
		"nothing holds it all: the existence rule decides, as for one type": {
			nodes: map[string]nodeUse{
				"a": {alloc{mig1g10: 1}, nil},
				"b": {alloc{gpu: 1}, nil},
			},
			policy: &chain,
			pod:    newPod(withContainer("main", both(string(mig1g10), "1", string(mig3g40), "1"))),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig3g40, gpu, ReasonAbsent}},
		},
		"hostname selector: only that node's free devices count": {
			nodes: map[string]nodeUse{
				"a": {alloc{mig1g10: 7}, alloc{mig1g10: 6}},
				"b": {alloc{mig1g10: 7}, nil},
			},
			pod:    gpuPod(mig2g20, "2", withNodeSelector(corev1.LabelHostname, "a")),
			want:   OutcomeRewritten,
			writes: []Rewrite{{mig2g20, mig1g10, ReasonAbsent}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := schedview.NewBuilder(nil)
			for n, u := range tc.nodes {
				b.SetNode(schedview.NodeFromAPI(node(n, u.alloc)))
				b.SetPod("default/used-on-"+n, n, u.used)
			}
			policy := DefaultPolicy()
			if tc.policy != nil {
				policy = *tc.policy
			}
			d, err := NewDecider(Options{Policy: policy, Mode: ModeCapacity})
			if err != nil {
				t.Fatal(err)
			}
			got := d.Decide(tc.pod, b.Snapshot())
			if got.Outcome != tc.want {
				t.Fatalf("outcome = %s, want %s (rewrites %v, message %q)", got.Outcome, tc.want, got.Rewrites, got.Message)
			}
			if diff := cmp.Diff(tc.writes, got.Rewrites); diff != "" {
				t.Errorf("rewrites (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewDeciderRejectsBadOptions(t *testing.T) {
	bad := DefaultPolicy()
	bad.MinMemoryGB = -1
	tests := map[string]Options{
		"mode":             {Policy: DefaultPolicy(), Mode: "free"},
		"on-unsatisfiable": {Policy: DefaultPolicy(), OnUnsatisfiable: "maybe"},
		"policy":           {Policy: bad},
	}
	for name, o := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := NewDecider(o); err == nil {
				t.Fatal("NewDecider succeeded, want an error")
			}
		})
	}
}

func TestHasGPURequest(t *testing.T) {
	tests := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"empty":        {newPod(), false},
		"cpu only":     {newPod(withContainer("a", both("cpu", "1"))), false},
		"mig request":  {gpuPod(mig1g10, "1"), true},
		"gpu limit":    {newPod(withContainer("a", corev1.ResourceRequirements{Limits: rl("nvidia.com/gpu", "1")})), true},
		"init only":    {newPod(withInit("i", both(string(mig2g20), "1"))), true},
		"zero":         {gpuPod(mig1g10, "0"), false},
		"other vendor": {newPod(withContainer("a", both("amd.com/gpu", "1"))), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := schedview.HasGPURequest(tc.pod); got != tc.want {
				t.Errorf("HasGPURequest = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHasGPURequestDoesNotAllocate(t *testing.T) {
	pod := newPod(withContainer("a", both("cpu", "1", "memory", "1Gi")), withInit("i", both("cpu", "1")))
	if n := testing.AllocsPerRun(100, func() { schedview.HasGPURequest(pod) }); n != 0 {
		t.Errorf("HasGPURequest allocates %v times per call, want 0", n)
	}
}
