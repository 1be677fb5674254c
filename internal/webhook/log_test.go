package webhook

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// rewriteLine is the part of a "Rewrote GPU request" line that users search
// the logs by.
type rewriteLine struct {
	Pod      klog.ObjectRef
	UID      any
	DryRun   any
	From, To any
	Reason   any
}

// rewriteLines returns the handler's "Rewrote GPU request" lines, and fails
// the test on a key that is missing or given twice.
func rewriteLines(t *testing.T, log ktesting.Log) []rewriteLine {
	t.Helper()
	var out []rewriteLine
	for _, e := range log {
		if e.Message != "Rewrote GPU request" {
			continue
		}
		if e.Type != ktesting.LogInfo || e.Verbosity != 0 {
			t.Errorf("rewrite logged as %s at V(%d), want info at V(0)", e.Type, e.Verbosity)
		}
		kv := map[string]any{}
		for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
			k := fmt.Sprint(e.ParameterKVList[i])
			if _, dup := kv[k]; dup {
				t.Errorf("key %q logged twice: %v", k, e.ParameterKVList)
			}
			kv[k] = e.ParameterKVList[i+1]
		}
		for _, k := range []string{"pod", "uid", "dryRun", "from", "to", "reason"} {
			if _, ok := kv[k]; !ok {
				t.Errorf("rewrite line lacks %q: %v", k, e.ParameterKVList)
			}
		}
		pod, ok := kv["pod"].(klog.ObjectRef)
		if !ok {
			t.Errorf("pod = %#v, want a klog.ObjectRef", kv["pod"])
		}
		out = append(out, rewriteLine{Pod: pod, UID: kv["uid"], DryRun: kv["dryRun"], From: kv["from"], To: kv["to"], Reason: kv["reason"]})
	}
	return out
}

// One structured line per rewritten resource type, with the pod, the types
// and the reason; none for a pod that is not rewritten.
func TestHandlerLogsRewrites(t *testing.T) {
	const uid = "0b4a7d6c-1111-2222-3333-444455556666"
	a100 := snapshotOf(gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 28}))
	// b has two 2g.20gb, both held by running pods; c has 1g.10gb free.
	full := schedview.NewBuilder(nil)
	full.SetNode(schedview.NodeFromAPI(gpuNode("b", map[corev1.ResourceName]int64{mig2g20: 2})))
	full.SetNode(schedview.NodeFromAPI(gpuNode("c", map[corev1.ResourceName]int64{mig1g10: 7})))
	full.SetPod("default/r1", "b", map[corev1.ResourceName]int64{mig2g20: 1})
	full.SetPod("default/r2", "b", map[corev1.ResourceName]int64{mig2g20: 1})

	line := func(pod string, dryRun bool, from, to corev1.ResourceName, reason string) rewriteLine {
		return rewriteLine{Pod: klog.KRef("default", pod), UID: types.UID(uid), DryRun: dryRun,
			From: string(from), To: string(to), Reason: reason}
	}
	tests := map[string]struct {
		snap *schedview.Snapshot
		mode fallback.Mode
		body []byte
		want []rewriteLine
	}{
		"one type rewritten": {
			body: reviewFor(t, gpuPod("train", mig2g20, "2"), nil),
			want: []rewriteLine{line("train", false, mig2g20, mig1g10, fallback.ReasonAbsent)},
		},
		"dry run says so": {
			body: reviewFor(t, gpuPod("train", mig2g20, "1"), func(r *admissionv1.AdmissionRequest) { r.DryRun = ptr.To(true) }),
			want: []rewriteLine{line("train", true, mig2g20, mig1g10, fallback.ReasonAbsent)},
		},
		// In the order of the fallback annotation, "3g.40gb->1g.10gb,2g.20gb->1g.10gb".
		"two types: one line each": {
			body: reviewFor(t, func() *corev1.Pod {
				p := gpuPod("multi", "nvidia.com/mig-3g.40gb", "1")
				p.Spec.InitContainers = []corev1.Container{{Name: "warmup", Image: "cuda", Resources: rr(mig2g20, "1")}}
				return p
			}(), nil),
			want: []rewriteLine{
				line("multi", false, "nvidia.com/mig-3g.40gb", mig1g10, fallback.ReasonAbsent),
				line("multi", false, mig2g20, mig1g10, fallback.ReasonAbsent),
			},
		},
		"one type in two containers: one line": {
			body: reviewFor(t, func() *corev1.Pod {
				p := gpuPod("pair", mig2g20, "1")
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side", Image: "cuda", Resources: rr(mig2g20, "1")})
				return p
			}(), nil),
			want: []rewriteLine{line("pair", false, mig2g20, mig1g10, fallback.ReasonAbsent)},
		},
		"generateName pod is named by its prefix": {
			body: reviewFor(t, func() *corev1.Pod { p := gpuPod("", mig2g20, "1"); p.GenerateName = "job-"; return p }(), nil),
			want: []rewriteLine{line("job-*", false, mig2g20, mig1g10, fallback.ReasonAbsent)},
		},
		"exhausted in capacity mode": {
			snap: full.Snapshot(),
			mode: fallback.ModeCapacity,
			body: reviewFor(t, gpuPod("late", mig2g20, "1"), nil),
			want: []rewriteLine{line("late", false, mig2g20, mig1g10, fallback.ReasonExhausted)},
		},
		"type present: no line": {
			body: reviewFor(t, gpuPod("fits", mig1g10, "1"), nil),
		},
		"no GPU: no line": {
			body: reviewFor(t, cpuPod("web"), nil),
		},
		"denied: no rewrite line": {
			snap: snapshotOf(gpuNode("cpu", nil)),
			body: reviewFor(t, gpuPod("nowhere", mig2g20, "1"), nil),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			snap := tc.snap
			if snap == nil {
				snap = a100
			}
			d, err := fallback.NewDecider(fallback.Options{Policy: fallback.DefaultPolicy(), Mode: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			h, err := NewHandler(HandlerOptions{Decider: d, Source: StaticSource{snap}, Metrics: NewMetrics(prometheus.NewRegistry()), Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			f := &fixture{h: h}
			if w := f.post(http.MethodPost, "application/json", tc.body); w.Code != http.StatusOK {
				t.Fatalf("status = %d (%s)", w.Code, w.Body)
			}
			underlier, ok := logger.GetSink().(ktesting.Underlier)
			if !ok {
				t.Fatalf("sink %T has no buffer", logger.GetSink())
			}
			got := rewriteLines(t, underlier.GetBuffer().Data())
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rewrite lines (-want +got):\n%s", diff)
			}
		})
	}
}
