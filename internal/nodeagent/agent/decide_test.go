package agent

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// h100Table is an H100 with the built-in model's profiles, as Discover
// reads it, so that documents validate against it.
func h100Table(t *testing.T, index int, migOn bool, instances ...mig.Instance) mig.GPU {
	t.Helper()
	m, ok := gpumodel.Lookup("H100-SXM5-80GB")
	if !ok {
		t.Fatal("no built-in H100-SXM5-80GB")
	}
	g := h100(index, migOn, instances...)
	g.Model, g.PCIDeviceID, g.MemoryMiB, g.Profiles = m.Name, m.PCIDeviceID, m.MemoryMiB, m.MIGProfiles()
	return g
}

func annotation(doc string) nodeinfo.Source {
	return nodeinfo.Source{Kind: nodeinfo.SourceAnnotation, Document: doc}
}

const (
	twoThrees   = "version: v1\nmig-configs:\n  selected:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"3g.40gb\": 2}\n"
	twoKinds    = "version: v1\nmig-configs:\n  selected:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {\"3g.40gb\": 2}\n  - devices: [1]\n    mig-enabled: true\n    mig-devices: {\"7g.80gb\": 1}\n"
	fleetThrees = "version: v1\nmig-configs:\n  threes:\n  - devices: [0, 1, 5]\n    mig-enabled: true\n    mig-devices: {\"3g.40gb\": 2}\n"
)

func TestDecidePlan(t *testing.T) {
	threes := []mig.Instance{inst("3g.40gb", 0, 4, 1), inst("3g.40gb", 4, 4, 2)}
	inPlace := []mig.GPU{h100Table(t, 0, true, threes...), h100Table(t, 1, true, inst("3g.40gb", 0, 4, 3), inst("3g.40gb", 4, 4, 4))}
	fresh := []mig.GPU{h100Table(t, 0, false), h100Table(t, 1, false)}
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	// held holds gpu until an hour from now; due holds it until now.
	held := func(gpus []mig.GPU, doc string, gpu int) map[int]hold {
		return map[int]hold{gpu: {key: holdKey(sourceIdentity(annotation(doc), doc), gpus, gpu), reason: "GPU 0: create failed", retryAt: now.Add(time.Hour)}}
	}
	due := func(gpus []mig.GPU, doc string, gpu int) map[int]hold {
		h := held(gpus, doc, gpu)
		h[gpu] = hold{key: h[gpu].key, reason: h[gpu].reason, retryAt: now}
		return h
	}
	stale := map[int]hold{0: {key: "an older layout", reason: "GPU 0: create failed"}, 7: {key: "x"}}

	type want struct {
		done, report bool
		state        string
		statusHas    string
		result       string
		reason       string
		message      string
		stage        string
		retry        bool
		todo         []int
		holds        []int
		retrying     []int
	}
	tests := []struct {
		name string
		in   planInput
		want want
	}{
		{
			name: "no source: nothing to do, holds dropped, nothing reported",
			in:   planInput{gpus: fresh, holds: stale},
			want: want{done: true, result: resultNone},
		},
		{
			name: "no source, and the GPUs as they are cannot be served",
			in:   planInput{gpus: fresh, serveErr: errors.New("two profiles"), holds: stale},
			want: want{done: true, report: true, state: nodeinfo.StateFailed, statusHas: "two profiles", result: resultFailed, reason: ReasonFailed},
		},
		{
			name: "the config file cannot be read: retried, holds kept",
			in:   planInput{src: nodeinfo.Source{Kind: nodeinfo.SourceLabel, ConfigName: "threes"}, docErr: errors.New("no such file"), gpus: fresh, holds: stale},
			want: want{done: true, report: true, state: nodeinfo.StateFailed, statusHas: "no such file", result: resultFailed, reason: ReasonFailed, stage: stageConfig, retry: true, holds: []int{0, 7}},
		},
		{
			name: "a document that does not parse: invalid, not retried",
			in:   planInput{src: annotation("version: v1\nmig-configs: ["), doc: "version: v1\nmig-configs: [", gpus: fresh, holds: stale},
			want: want{done: true, report: true, state: nodeinfo.StateFailed, statusHas: "the GPUs are left as they are", result: resultInvalid, reason: ReasonInvalid, stage: stageConfig, holds: []int{0, 7}},
		},
		{
			name: "a layout the MIG strategy cannot serve is refused before any GPU changes",
			in:   planInput{src: annotation(twoKinds), doc: twoKinds, gpus: fresh, servable: oneProfile},
			want: want{done: true, report: true, state: nodeinfo.StateFailed, statusHas: "--mig-strategy=single", result: resultInvalid, reason: ReasonInvalid, stage: stageConfig},
		},
		{
			name: "the layout is in place: success, holds dropped",
			in:   planInput{src: annotation(twoThrees), doc: twoThrees, gpus: inPlace, servable: serveAny, holds: stale},
			want: want{done: true, report: true, state: nodeinfo.StateSuccess, result: resultSuccess, reason: ReasonApplied, message: "the layout is in place: GPU 0 (H100-SXM5-80GB): unchanged, 3g.40gb@0:4"},
		},
		{
			name: "in place, but not servable as it is",
			in:   planInput{src: annotation(twoThrees), doc: twoThrees, gpus: inPlace, serveErr: errors.New("refused"), servable: serveAny},
			want: want{done: true, report: true, state: nodeinfo.StateFailed, statusHas: "refused", result: resultFailed, reason: ReasonFailed},
		},
		{
			name: "in place from a fleet's file: what does not apply is said",
			in:   planInput{src: nodeinfo.Source{Kind: nodeinfo.SourceLabel, ConfigName: "threes"}, doc: fleetThrees, gpus: inPlace, servable: serveAny},
			want: want{done: true, report: true, state: nodeinfo.StateSuccess, statusHas: "5", result: resultSuccess, reason: ReasonApplied, message: "the layout is in place"},
		},
		{
			name: "GPUs to change",
			in:   planInput{src: annotation(twoThrees), doc: twoThrees, gpus: fresh, servable: serveAny, holds: stale},
			want: want{todo: []int{0, 1}},
		},
		{
			name: "a GPU on hold for this document and layout is left out",
			in:   planInput{src: annotation(twoThrees), doc: twoThrees, gpus: fresh, servable: serveAny, holds: held(fresh, twoThrees, 0), now: now},
			want: want{todo: []int{1}, holds: []int{0}},
		},
		{
			name: "a hold whose backoff is over: the GPU is tried again, not announced, the hold kept for its count",
			in:   planInput{src: annotation(twoThrees), doc: twoThrees, gpus: fresh, servable: serveAny, holds: due(fresh, twoThrees, 0), now: now},
			want: want{todo: []int{0, 1}, holds: []int{0}, retrying: []int{0}},
		},
		{
			name: "a hold for another layout of the GPU (a reset) is lifted",
			in:   planInput{src: annotation(twoThrees), doc: twoThrees, gpus: fresh, servable: serveAny, holds: held(inPlace, twoThrees, 0), now: now},
			want: want{todo: []int{0, 1}},
		},
		{
			name: "a hold for another document is lifted",
			in:   planInput{src: annotation(twoThrees), doc: twoThrees, gpus: fresh, servable: serveAny, holds: held(fresh, twoKinds, 0), now: now},
			want: want{todo: []int{0, 1}},
		},
		{
			name: "every GPU to change on hold: failed with the hold's reason, no Event",
			in: planInput{src: annotation(twoThrees), doc: twoThrees, gpus: []mig.GPU{fresh[0], inPlace[1]}, servable: serveAny,
				holds: held([]mig.GPU{fresh[0], inPlace[1]}, twoThrees, 0), now: now},
			want: want{done: true, state: nodeinfo.StateFailed, statusHas: "GPU 0: create failed", result: resultHeld, holds: []int{0}},
		},
		{
			name: "a GPU a call has not returned on is left out, hold or none",
			in: planInput{src: annotation(twoThrees), doc: twoThrees, gpus: fresh, servable: serveAny,
				stuck: map[int]string{1: "GPU 1: NVML SetMigMode (MIG on) has not returned"}},
			want: want{todo: []int{0}},
		},
		{
			name: "every GPU to change has a call outstanding: failed with why, no Event",
			in: planInput{src: annotation(twoThrees), doc: twoThrees, gpus: []mig.GPU{fresh[0], inPlace[1]}, servable: serveAny,
				stuck: map[int]string{0: "GPU 0: NVML SetMigMode (MIG on) has not returned", 1: "GPU 1: not in the plan's changes"}},
			want: want{done: true, state: nodeinfo.StateFailed, statusHas: "annotation nvidia.com/mig.config: GPU 0: NVML SetMigMode (MIG on) has not returned", result: resultHeld},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decidePlan(tc.in)
			got := want{
				done: d.done, report: d.report, state: d.out.status.State, result: d.out.result, reason: d.reason,
				stage: d.stage, retry: d.out.retry, statusHas: tc.want.statusHas, message: tc.want.message,
			}
			if !strings.Contains(d.out.status.Reason, tc.want.statusHas) {
				got.statusHas = d.out.status.Reason
			}
			if !strings.Contains(d.message, tc.want.message) || (tc.want.message == "") != (d.message == "") {
				got.message = d.message
			}
			for _, p := range d.todo.GPUs {
				if p.Changed() {
					got.todo = append(got.todo, p.GPU)
				}
			}
			for gpu := range d.holds {
				got.holds = append(got.holds, gpu)
			}
			slices.Sort(got.holds)
			for gpu := range d.retrying {
				got.retrying = append(got.retrying, gpu)
			}
			slices.Sort(got.retrying)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if !d.done && d.srcID != sourceIdentity(tc.in.src, tc.in.doc) {
				t.Error("the decision does not carry the source's identity for the holds it makes")
			}
		})
	}
}

func TestDecideBusy(t *testing.T) {
	fresh := []mig.GPU{h100Table(t, 0, false), h100Table(t, 1, false)}
	plan := func(doc string) migconfig.Plan {
		r, err := migconfig.Resolve([]byte(doc), "", fresh, migconfig.ScopeNode)
		if err != nil {
			t.Fatal(err)
		}
		return r.Plan
	}
	tests := []struct {
		name      string
		in        busyInput
		wantFree  []int
		wantEvict []string
		wantRetry bool
		busyHas   string
		serveHas  string
	}{
		{name: "nothing busy", in: busyInput{todo: plan(twoThrees), gpus: fresh, servable: serveAny}, wantFree: []int{0, 1}},
		{
			name:     "a busy GPU waits",
			in:       busyInput{todo: plan(twoThrees), gpus: fresh, busy: map[int][]string{1: {"ns/p"}}, policy: BusyWait, servable: serveAny},
			wantFree: []int{0}, wantRetry: true, busyHas: "(--busy-policy=wait): GPU 1: ns/p",
		},
		{
			name:     "its pods are evicted under evict",
			in:       busyInput{todo: plan(twoThrees), gpus: fresh, busy: map[int][]string{1: {"ns/p", "ns/q"}}, policy: BusyEvict, servable: serveAny},
			wantFree: []int{0}, wantEvict: []string{"ns/p", "ns/q"}, wantRetry: true, busyHas: "--busy-policy=evict",
		},
		{
			name: "under single, the free GPUs' share alone is not served: nothing changes",
			in: busyInput{todo: plan(twoThrees), gpus: []mig.GPU{fresh[0], h100Table(t, 1, true, inst("7g.80gb", 0, 8, 1))},
				busy: map[int][]string{1: {"ns/p"}}, policy: BusyWait, servable: oneProfile},
			wantRetry: true, busyHas: "ns/p", serveHas: "the free GPUs are left as they are too",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decideBusy(tc.in)
			var free []int
			for _, p := range d.free.GPUs {
				free = append(free, p.GPU)
			}
			if !slices.Equal(free, tc.wantFree) || !slices.Equal(d.evict, tc.wantEvict) || d.retry != tc.wantRetry {
				t.Errorf("free %v, evict %v, retry %v; want %v, %v, %v", free, d.evict, d.retry, tc.wantFree, tc.wantEvict, tc.wantRetry)
			}
			if !strings.Contains(d.busyNote, tc.busyHas) || (tc.busyHas == "") != (d.busyNote == "") {
				t.Errorf("busy note %q, want one containing %q", d.busyNote, tc.busyHas)
			}
			if !strings.Contains(d.serveNote, tc.serveHas) || (tc.serveHas == "") != (d.serveNote == "") {
				t.Errorf("serve note %q, want one containing %q", d.serveNote, tc.serveHas)
			}
		})
	}
}

func TestConclude(t *testing.T) {
	src := annotation(twoThrees)
	appliedEv := event{corev1.EventTypeNormal, ReasonApplied, "annotation nvidia.com/mig.config: GPU 0: 2 created"}
	ok := outcome{status: status{State: nodeinfo.StateSuccess}, result: resultSuccess, events: []event{appliedEv}}
	failedApply := outcome{status: status{nodeinfo.StateFailed, "GPU 1: create failed"}, result: resultFailed}
	tests := []struct {
		name       string
		in         concludeInput
		wantStatus status
		wantResult string
		wantReason string
		wantEvent  string
	}{
		{
			name:       "applied: success, the notes on the status and the Event",
			in:         concludeInput{src: src, notes: []string{"GPU 5 is not on this node"}, applied: ok},
			wantStatus: status{nodeinfo.StateSuccess, "annotation nvidia.com/mig.config: GPU 5 is not on this node"}, wantResult: resultSuccess,
			wantReason: ReasonApplied, wantEvent: appliedEv.Message + "; GPU 5 is not on this node",
		},
		{
			name:       "busy GPUs wait: pending",
			in:         concludeInput{src: src, busy: true, retry: true, waitNote: "waiting for pods", applied: ok},
			wantStatus: status{nodeinfo.StatePending, "annotation nvidia.com/mig.config: waiting for pods"}, wantResult: resultPending, wantReason: ReasonPending, wantEvent: appliedEv.Message,
		},
		{
			name:       "held GPUs: failed with their reasons and the wait",
			in:         concludeInput{src: src, reasons: []string{"GPU 0: held"}, failed: true, busy: true, waitNote: "waiting for pods", applied: ok},
			wantStatus: status{nodeinfo.StateFailed, "annotation nvidia.com/mig.config: GPU 0: held; waiting for pods"}, wantResult: resultFailed, wantReason: ReasonFailed, wantEvent: appliedEv.Message,
		},
		{
			name:       "the apply failed on a GPU",
			in:         concludeInput{src: src, reasons: []string{"GPU 0: held"}, applied: failedApply},
			wantStatus: status{nodeinfo.StateFailed, "annotation nvidia.com/mig.config: GPU 0: held; GPU 1: create failed"}, wantResult: resultFailed, wantReason: ReasonFailed,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, reason := conclude(tc.in)
			if out.status != tc.wantStatus || out.result != tc.wantResult || reason != tc.wantReason || out.retry != tc.in.retry {
				t.Errorf("conclude() = %+v, %q, %q, retry %v; want %+v, %q, %q, retry %v", out.status, out.result, reason, out.retry, tc.wantStatus, tc.wantResult, tc.wantReason, tc.in.retry)
			}
			var ev string
			if len(out.events) > 0 {
				ev = out.events[0].Message
			}
			if ev != tc.wantEvent {
				t.Errorf("Applied Event %q, want %q", ev, tc.wantEvent)
			}
		})
	}
	if ok.events[0].Message != appliedEv.Message {
		t.Error("conclude changed the applied outcome's Events in place")
	}
}

func TestRetryBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempts int
		want     time.Duration
	}{
		{1, 10 * time.Second},
		{2, 20 * time.Second},
		{3, 40 * time.Second},
		{5, 160 * time.Second},
		{6, 5 * time.Minute},
		{100, 5 * time.Minute}, // no overflow
	} {
		if got := retryBackoff(10*time.Second, tc.attempts); got != tc.want {
			t.Errorf("retryBackoff(10s, %d) = %v, want %v", tc.attempts, got, tc.want)
		}
	}
}

func TestNextRetry(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		soon bool
		held map[int]hold
		// now is when the reconcile ends; it began at began.
		began, now time.Time
		want       time.Duration
		wantOK     bool
	}{
		{name: "nothing to wait for"},
		{name: "a retry soon", soon: true, want: 10 * time.Second, wantOK: true},
		{name: "a hold due later", held: map[int]hold{0: {retryAt: now.Add(time.Minute)}, 1: {retryAt: now.Add(40 * time.Second)}}, want: 40 * time.Second, wantOK: true},
		{name: "a hold due before the retry", soon: true, held: map[int]hold{0: {retryAt: now.Add(time.Second)}}, want: time.Second, wantOK: true},
		// Its GPU is busy or has a call outstanding: that wakes the loop,
		// not a timer that would fire at once, forever.
		{name: "a hold already due when the reconcile began", held: map[int]hold{0: {retryAt: now}}},
		// The reconcile that set it took longer than its backoff.
		{name: "a hold that fell due during the reconcile: at once", held: map[int]hold{0: {retryAt: now.Add(50 * time.Millisecond)}}, began: now, now: now.Add(time.Second), wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := &Agent{opts: Options{RetryInterval: 10 * time.Second}, held: tc.held}
			began, end := tc.began, tc.now
			if began.IsZero() {
				began, end = now, now
			}
			got, ok := a.nextRetry(tc.soon, began, end)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("nextRetry = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
