package agent

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
)

// instanceGPUs is GPU 0 with MIG on: a 3g.40gb (GI 1), a 1g.10gb (GI 3)
// and a 1g.10gb with no compute instance yet (no UUID, GI 4); and GPU 1,
// MIG off.
func instanceGPUs() []mig.GPU {
	return []mig.GPU{
		{Index: 0, UUID: "GPU-0", MigEnabled: true, Instances: []mig.Instance{
			{Profile: "3g.40gb", Start: 0, Size: 4, GIID: 1, UUID: "MIG-a"},
			{Profile: "1g.10gb", Start: 4, Size: 1, GIID: 3, UUID: "MIG-b"},
			{Profile: "1g.10gb", Start: 5, Size: 1, GIID: 4},
		}},
		{Index: 1, UUID: "GPU-1"},
	}
}

// gatherInstances returns the per-instance series reg serves, one line
// each: "name{label=value,...} value", sorted.
func gatherInstances(t *testing.T, reg prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "migflex_agent_instance_") {
			continue
		}
		for _, s := range mf.GetMetric() {
			var ls []string
			for _, l := range s.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out = append(out, mf.GetName()+"{"+strings.Join(ls, ",")+"} "+strconv.FormatFloat(s.GetGauge().GetValue(), 'g', -1, 64))
		}
	}
	sort.Strings(out)
	return out
}

// series formats one series as gatherInstances does.
func series(name string, labels map[string]string, value int) string {
	var ls []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		ls = append(ls, k+"="+labels[k])
	}
	return name + "{" + strings.Join(ls, ",") + "} " + strconv.Itoa(value)
}

// The per-instance series: one info series per MIG instance with a UUID
// and per pod holding it (replicas of a shared instance, "<uuid>::<n>",
// count as the instance), one with empty pod and namespace while none
// does; whole GPUs and IDs of no instance are left out.
func TestInstanceSeries(t *testing.T) {
	inst := func(uuid string) map[string]string {
		l := map[string]string{"node": "node-a", "serving": "dra", "gpu": "0", "gpu_uuid": "GPU-0", "uuid": uuid}
		switch uuid {
		case "MIG-a":
			l["gi"], l["profile"] = "1", "3g.40gb"
		case "MIG-b":
			l["gi"], l["profile"] = "3", "1g.10gb"
		}
		return l
	}
	info := func(uuid, ns, pod string) string {
		l := inst(uuid)
		l["namespace"], l["pod"] = ns, pod
		return series("migflex_agent_instance_info", l, 1)
	}
	replicas := func(uuid string, n int) string {
		return series("migflex_agent_instance_replicas_in_use", inst(uuid), n)
	}
	tests := []struct {
		name  string
		inUse []podresources.Assignment
		want  []string
	}{{
		name: "idle",
		want: []string{info("MIG-a", "", ""), info("MIG-b", "", ""), replicas("MIG-a", 0), replicas("MIG-b", 0)},
	}, {
		name: "one pod, two containers; a whole GPU and a foreign ID left out",
		inUse: []podresources.Assignment{
			{Namespace: "ml", Pod: "p", Container: "c", DeviceID: "MIG-b"},
			{Namespace: "ml", Pod: "p", Container: "d", DeviceID: "MIG-b"},
			{Namespace: "ml", Pod: "whole", Container: "c", DeviceID: "GPU-1"},
			{Namespace: "x", Pod: "y", Container: "c", DeviceID: "OTHER-0"},
		},
		want: []string{info("MIG-a", "", ""), info("MIG-b", "ml", "p"), replicas("MIG-a", 0), replicas("MIG-b", 1)},
	}, {
		name: "shared through replicas: one series per pod",
		inUse: []podresources.Assignment{
			{Namespace: "ml", Pod: "p", Container: "c", DeviceID: "MIG-a::0"},
			{Namespace: "ml", Pod: "q", Container: "c", DeviceID: "MIG-a::1"},
			{Namespace: "web", Pod: "r", Container: "c", DeviceID: "MIG-a::3"},
		},
		want: []string{info("MIG-a", "ml", "p"), info("MIG-a", "ml", "q"), info("MIG-a", "web", "r"), info("MIG-b", "", ""), replicas("MIG-a", 3), replicas("MIG-b", 0)},
	}, {
		name: "a shared DRA claim, and claims no pod reserved, one series per namespace",
		inUse: []podresources.Assignment{
			{Namespace: "ml", Pod: "p", Container: "c", DeviceID: "MIG-a", Claim: "shared"},
			{Namespace: "ml", Pod: "q", Container: "c", DeviceID: "MIG-a", Claim: "shared"},
			{Namespace: "ml", DeviceID: "MIG-b", Claim: "one"},
			{Namespace: "ml", DeviceID: "MIG-b", Claim: "two"},
		},
		want: []string{info("MIG-a", "ml", "p"), info("MIG-a", "ml", "q"), info("MIG-b", "ml", ""), replicas("MIG-a", 1), replicas("MIG-b", 1)},
	}}
	for _, tt := range tests {
		slices.Sort(tt.want)
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := newMetrics(reg, nopServer{}, "node-a", "dra")
			if err != nil {
				t.Fatal(err)
			}
			m.instances.setLayout(instanceGPUs())
			(&Agent{metrics: m}).noteAssignments(tt.inUse)
			if diff := cmp.Diff(tt.want, gatherInstances(t, reg)); diff != "" {
				t.Errorf("series (-want +got):\n%s", diff)
			}
		})
	}
}

// No stale series: a pod that goes takes its series with it (the
// instance shows idle), an instance destroyed takes all of its series,
// and a layout without MIG leaves none.
func TestInstanceSeriesGo(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, nopServer{}, "node-a", "device-plugin")
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{metrics: m}
	m.instances.setLayout(instanceGPUs())
	a.noteAssignments([]podresources.Assignment{
		{Namespace: "ml", Pod: "p", DeviceID: "MIG-a::0"},
		{Namespace: "ml", Pod: "q", DeviceID: "MIG-a::1"},
		{Namespace: "ml", Pod: "r", DeviceID: "MIG-b"},
	})
	// pods lists "uuid pod" of each info series.
	pods := func() []string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range mfs {
			if mf.GetName() != "migflex_agent_instance_info" {
				continue
			}
			for _, s := range mf.GetMetric() {
				l := map[string]string{}
				for _, p := range s.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				out = append(out, "uuid="+l["uuid"]+" pod="+l["pod"])
			}
		}
		slices.Sort(out)
		return out
	}
	steps := []struct {
		name string
		do   func()
		want []string
	}{
		{"all held", func() {}, []string{"uuid=MIG-a pod=p", "uuid=MIG-a pod=q", "uuid=MIG-b pod=r"}},
		{"q goes", func() {
			a.noteAssignments([]podresources.Assignment{{Namespace: "ml", Pod: "p", DeviceID: "MIG-a::0"}, {Namespace: "ml", Pod: "r", DeviceID: "MIG-b"}})
		}, []string{"uuid=MIG-a pod=p", "uuid=MIG-b pod=r"}},
		{"MIG-b destroyed under its pod's last report", func() {
			gpus := instanceGPUs()
			gpus[0].Instances = gpus[0].Instances[:1]
			m.instances.setLayout(gpus)
		}, []string{"uuid=MIG-a pod=p"}},
		{"p goes", func() { a.noteAssignments(nil) }, []string{"uuid=MIG-a pod="}},
		{"MIG off", func() { m.instances.setLayout([]mig.GPU{{Index: 0, UUID: "GPU-0"}}) }, nil},
	}
	for _, s := range steps {
		s.do()
		if diff := cmp.Diff(s.want, pods()); diff != "" {
			t.Errorf("%s: instance, pod (-want +got):\n%s", s.name, diff)
		}
	}
	if got := gatherInstances(t, reg); len(got) != 0 {
		t.Errorf("with MIG off, series left: %q", got)
	}
}

// instanceHolders reads r's migflex_agent_instance_info: each MIG
// device UUID to "namespace/pod" of each of its series ("/" when free),
// sorted.
func instanceHolders(t *testing.T, reg prometheus.Gatherer) map[string][]string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, mf := range mfs {
		if mf.GetName() != "migflex_agent_instance_info" {
			continue
		}
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["uuid"]] = append(out[l["uuid"]], l["namespace"]+"/"+l["pod"])
		}
	}
	for _, pods := range out {
		slices.Sort(pods)
	}
	return out
}

// waitInstanceHolders polls the running agent's series until every MIG
// instance the node's GPUs have now shows the pods held says ("/" for
// the others), and no other instance shows.
func waitInstanceHolders(t *testing.T, n *node, r *agentRun, held map[string][]string) {
	t.Helper()
	deadline := time.Now().Add(hangTimeout)
	for {
		want := map[string][]string{}
		for _, g := range n.discover() {
			for _, in := range g.Instances {
				if pods, ok := held[in.UUID]; ok {
					want[in.UUID] = pods
				} else {
					want[in.UUID] = []string{"/"}
				}
			}
		}
		got := instanceHolders(t, r.reg)
		if cmp.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("migflex_agent_instance_info, uuid to pods (-want +got):\n%s", cmp.Diff(want, got))
		}
		time.Sleep(pollInterval) // polling a gauge nothing signals
	}
}

// dynamicServer is a DRA server in dynamic mode: free is what the node can
// still make, ok false once it falls back to static.
type dynamicServer struct {
	nopServer
	free map[string]int64
	ok   bool
}

func (s *dynamicServer) Makeable() (map[string]int64, bool) { return s.free, s.ok }

// What a dynamic node can still make is read at scrape time: a series per
// resource, 0 included; none once the server has nothing to say (static
// mode), and none from a server that cannot say (the device plugin).
func TestMakeableSeries(t *testing.T) {
	srv := &dynamicServer{ok: true, free: map[string]int64{"nvidia.com/mig-1g.10gb": 6, "nvidia.com/mig-4g.40gb": 0, "nvidia.com/gpu": 0}}
	series := func(srv Server) []string {
		t.Helper()
		reg := prometheus.NewRegistry()
		if _, err := newMetrics(reg, srv, "node-a", "dra"); err != nil {
			t.Fatal(err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range mfs {
			if mf.GetName() != "migflex_agent_dynamic_free_devices" {
				continue
			}
			for _, s := range mf.GetMetric() {
				l := map[string]string{}
				for _, p := range s.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				out = append(out, l["node"]+" "+l["resource"]+" "+strconv.FormatFloat(s.GetGauge().GetValue(), 'g', -1, 64))
			}
		}
		return out
	}
	want := []string{"node-a nvidia.com/gpu 0", "node-a nvidia.com/mig-1g.10gb 6", "node-a nvidia.com/mig-4g.40gb 0"}
	if diff := cmp.Diff(want, series(srv)); diff != "" {
		t.Errorf("dynamic node (-want +got):\n%s", diff)
	}
	srv.ok = false
	if got := series(srv); got != nil {
		t.Errorf("fallen back to static: %v, want no series", got)
	}
	if got := series(nopServer{}); got != nil {
		t.Errorf("a server that cannot say: %v, want no series", got)
	}
}

// fakeHolders is PodResources answering what it holds.
type fakeHolders struct{ as []podresources.Assignment }

func (f *fakeHolders) List(context.Context) ([]podresources.Assignment, error) { return f.as, nil }

// noNode is a Node cache without the Node: the report it would refresh
// is not this test's.
type noNode struct{}

func (noNode) GetByKey(string) (any, bool, error) { return nil, false, nil }
func (noNode) Mutation(any)                       {}

// A pod holding a device the GPUs last read do not have (dynamic mode's
// Prepare made it) asks for a reconcile, which reads the GPUs again, once
// per new set of such devices: not at every poll, and not for devices the
// GPUs have.
func TestPollInUseAsksToReadNewDevices(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry(), nopServer{}, "node-a", "dra")
	if err != nil {
		t.Fatal(err)
	}
	holders := &fakeHolders{}
	a := &Agent{metrics: m, gpus: instanceGPUs(), trigger: make(chan struct{}, 1), nodes: noNode{}, log: klog.Background(),
		opts: Options{PodResources: holders}}
	poked := func() bool {
		select {
		case <-a.trigger:
			return true
		default:
			return false
		}
	}
	for _, step := range []struct {
		name string
		held []podresources.Assignment
		poke bool
	}{
		{"a pod on a known instance", []podresources.Assignment{{Namespace: "ml", Pod: "p", DeviceID: "MIG-a"}}, false},
		{"a pod on an instance made since", []podresources.Assignment{{Namespace: "ml", Pod: "p", DeviceID: "MIG-a"}, {Namespace: "ml", Pod: "q", DeviceID: "MIG-new"}}, true},
		{"the same at the next poll", []podresources.Assignment{{Namespace: "ml", Pod: "p", DeviceID: "MIG-a"}, {Namespace: "ml", Pod: "q", DeviceID: "MIG-new"}}, false},
		{"a replica of another new one", []podresources.Assignment{{Namespace: "ml", Pod: "q", DeviceID: "MIG-new"}, {Namespace: "ml", Pod: "r", DeviceID: "MIG-newer::1"}}, true},
		{"none held", nil, false},
		{"a whole GPU", []podresources.Assignment{{Namespace: "ml", Pod: "w", DeviceID: "GPU-1"}}, false},
	} {
		holders.as = step.held
		a.pollInUse(context.Background())
		if got := poked(); got != step.poke {
			t.Errorf("%s: asked for a reconcile %v, want %v", step.name, got, step.poke)
		}
	}
}
