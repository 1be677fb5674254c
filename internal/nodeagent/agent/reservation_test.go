package agent

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin"
	"github.com/migflex/migflex/internal/nodeagent/deviceplugin/kubeletstub"
	"github.com/migflex/migflex/internal/nodeagent/podresources/podresourcestest"
)

// TestWithheld: a reservation withholds the free devices of its GPUs until
// all of them are free and whole, then offers them at once; never a device
// a pod holds; nothing from its deadline on.
func TestWithheld(t *testing.T) {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	deadline := now.Add(time.Minute)
	whole := func(i int) mig.GPU { return mig.GPU{Index: i, UUID: "GPU-" + string(rune('0'+i))} }
	migGPU := func(i int, instances ...string) mig.GPU {
		g := whole(i)
		g.MigEnabled = true
		for _, u := range instances {
			g.Instances = append(g.Instances, mig.Instance{UUID: u})
		}
		return g
	}
	resv := &nodeinfo.Reservation{Pod: "ml/big", GPUs: []int{0, 1}, Deadline: deadline}
	tests := []struct {
		name  string
		r     *nodeinfo.Reservation
		gpus  []mig.GPU
		inUse map[string][]string
		now   time.Time
		want  []string
		until time.Time
	}{
		{name: "no reservation", gpus: []mig.GPU{whole(0), whole(1)}, now: now},
		{
			name: "a free GPU is withheld while another is held by a pod", r: resv,
			gpus: []mig.GPU{whole(0), whole(1), whole(2)}, inUse: map[string][]string{"GPU-1": {"ml/small"}}, now: now,
			want: []string{"GPU-0"}, until: deadline,
		},
		{
			name: "all free and whole: offered at once", r: resv,
			gpus: []mig.GPU{whole(0), whole(1), whole(2)}, inUse: map[string][]string{"GPU-2": {"ml/other"}}, now: now,
			until: deadline,
		},
		{
			name: "a MIG GPU's free instances are withheld, its busy one is not", r: resv,
			gpus: []mig.GPU{whole(0), migGPU(1, "MIG-a", "MIG-b")}, inUse: map[string][]string{"MIG-a": {"ml/small"}}, now: now,
			want: []string{"GPU-0", "MIG-b"}, until: deadline,
		},
		{
			// The planner makes it whole; meanwhile nothing of it is offered,
			// nor the GPU itself once it comes back whole.
			name: "an idle MIG GPU is not whole yet: withheld, the GPU too", r: resv,
			gpus: []mig.GPU{whole(0), migGPU(1, "MIG-a")}, now: now,
			want: []string{"GPU-0", "GPU-1", "MIG-a"}, until: deadline,
		},
		{
			name: "a GPU the node lacks keeps the others withheld", r: &nodeinfo.Reservation{Pod: "ml/big", GPUs: []int{0, 5}, Deadline: deadline},
			gpus: []mig.GPU{whole(0), whole(1)}, now: now,
			want: []string{"GPU-0"}, until: deadline,
		},
		{
			name: "from the deadline on, nothing", r: resv,
			gpus: []mig.GPU{whole(0), whole(1)}, inUse: map[string][]string{"GPU-1": {"ml/small"}}, now: deadline,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := withheld(tc.r, tc.gpus, tc.inUse, tc.now)
			if !slices.Equal(got.ids, tc.want) || !got.until.Equal(tc.until) {
				t.Errorf("withheld = %v until %v (%s), want %v until %v", got.ids, got.until, got.why, tc.want, tc.until)
			}
		})
	}
}

// kubeletHealth is each device the kubelet stand-in was last sent, with
// whether it is healthy.
func kubeletHealth(st kubeletstub.State) map[string]bool {
	out := map[string]bool{}
	for _, p := range st.Plugins {
		for _, d := range p.Devices {
			out[d.ID] = d.Health == pluginapi.Healthy
		}
	}
	return out
}

// TestAgentHonoursReservation: on the device-plugin path, the agent
// withholds a reserved GPU's free devices from the kubelet (sent unhealthy)
// while another reserved GPU is held by a pod, offers both at once when
// both are free, withholds again when a pod takes one, and offers
// everything at the deadline by itself, with no change to the Node, and
// when the reservation goes away.
func TestAgentHonoursReservation(t *testing.T) {
	api := startAPIServer(t)
	n := newNode(t, api, withGPUs("H100-SXM5-80GB", 3))
	gpus := n.discover()
	g0, g1, g2 := gpus[0].UUID, gpus[1].UUID, gpus[2].UUID
	// The deadline's clock and timer are the test's: it passes when the
	// test says so, however slow the machine.
	var mu sync.Mutex
	offset := time.Duration(0)
	lapse := make(chan time.Time)
	n.start(withInUseInterval(20*time.Millisecond), func(o *Options, _ *deviceplugin.Options) {
		o.now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return time.Now().Add(offset)
		}
		o.lapseAfter = func(time.Duration) <-chan time.Time { return lapse }
	})
	n.waitServed(map[string]int{"nvidia.com/gpu": 3})

	waitHealth := func(what string, want map[string]bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), hangTimeout)
		defer cancel()
		st, err := n.kubelet.Wait(ctx, func(st kubeletstub.State) bool { return cmp.Equal(kubeletHealth(st), want) })
		if err != nil {
			t.Fatalf("%s: %v; the kubelet has %v, want %v", what, err, kubeletHealth(st), want)
		}
	}
	holds := func(pod, id string) podresourcestest.Device {
		return podresourcestest.Device{Namespace: "ml", Pod: pod, Container: "main", Resource: "nvidia.com/gpu", IDs: []string{id}}
	}
	reserve := func(deadline time.Time) {
		t.Helper()
		v, err := nodeinfo.Reservation{Pod: "ml/big", GPUs: []int{0, 1}, Since: time.Now(), Ready: time.Now(), Deadline: deadline}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		n.annotate(nodeinfo.AnnotationReservation, v)
	}

	n.podres.Set(holds("small", g1))
	reserve(time.Now().Add(time.Hour))
	waitHealth("GPU 0 withheld, GPU 1 in use untouched", map[string]bool{g0: false, g1: true, g2: true})

	n.podres.Set()
	waitHealth("both free: offered at once", map[string]bool{g0: true, g1: true, g2: true})

	n.podres.Set(holds("other", g0))
	waitHealth("GPU 0 taken: GPU 1 withheld", map[string]bool{g0: true, g1: false, g2: true})

	n.annotate(nodeinfo.AnnotationReservation, "")
	waitHealth("reservation gone: offered", map[string]bool{g0: true, g1: true, g2: true})

	// The deadline ends it with nothing else changing: its timer fires.
	reserve(time.Now().Add(time.Hour))
	waitHealth("withheld again", map[string]bool{g0: true, g1: false, g2: true})
	mu.Lock()
	offset = time.Hour
	mu.Unlock()
	lapse <- time.Now()
	waitHealth("deadline passed: offered", map[string]bool{g0: true, g1: true, g2: true})
}

// reserver is a Server that honours reservations itself (the DRA
// server); it records what it is handed, "" for nil.
type reserver struct {
	Server
	got []string
}

func (r *reserver) Reserve(res *nodeinfo.Reservation) {
	if res == nil {
		r.got = append(r.got, "")
		return
	}
	r.got = append(r.got, res.String())
}

// TestReserveThrough: a Server that is a Reserver (the DRA server) is
// handed the Node's reservation while it is active, once per change, and
// nil when it goes, does not parse, or its deadline passes, by the
// agent's own clock; the deadline is when the agent looks again.
func TestReserveThrough(t *testing.T) {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	deadline := now.Add(time.Minute)
	encode := func(r nodeinfo.Reservation) string {
		t.Helper()
		v, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	resv := nodeinfo.Reservation{Pod: "ml/big", UID: "uid-big", GPUs: []int{0, 1}, Since: now, Ready: now, Deadline: deadline}
	other := resv
	other.GPUs = []int{1, 2}
	steps := []struct {
		what  string
		value string // the annotation; "-" for none
		at    time.Time
		want  []string
		until time.Time
	}{
		{"no reservation: nothing handed", "-", now, nil, time.Time{}},
		{"a reservation: handed, looked at again at its deadline", encode(resv), now, []string{resv.String()}, deadline},
		{"the Node changes, the reservation does not: nothing", encode(resv), now.Add(time.Second), nil, deadline},
		{"another reservation: handed", encode(other), now.Add(2 * time.Second), []string{other.String()}, deadline},
		{"its deadline passes on the agent's clock: ended", encode(other), deadline, []string{""}, time.Time{}},
		{"and stays ended", encode(other), deadline.Add(time.Second), nil, time.Time{}},
		{"a new one", encode(nodeinfo.Reservation{Pod: "ml/big", GPUs: []int{0}, Deadline: deadline.Add(time.Hour)}), deadline.Add(2 * time.Second),
			[]string{"GPU 0 reserved for pod ml/big until " + deadline.Add(time.Hour).UTC().Format(time.RFC3339)}, deadline.Add(time.Hour)},
		{"one that does not parse: ended", "{", deadline.Add(3 * time.Second), []string{""}, time.Time{}},
	}
	srv := &reserver{}
	clock := now
	a := &Agent{opts: Options{Server: srv, now: func() time.Time { return clock }}, log: klog.Background()}
	for _, s := range steps {
		node := &corev1.Node{}
		if s.value != "-" {
			node.Annotations = map[string]string{nodeinfo.AnnotationReservation: s.value}
		}
		clock = s.at
		srv.got = nil
		a.honourReservation(node)
		if diff := cmp.Diff(s.want, srv.got); diff != "" {
			t.Errorf("%s: handed (-want +got):\n%s", s.what, diff)
		}
		if !a.resvUntil.Equal(s.until) {
			t.Errorf("%s: looks again at %v, want %v", s.what, a.resvUntil, s.until)
		}
	}
}
