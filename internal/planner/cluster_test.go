package planner

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/simmodels"
	"github.com/migflex/migflex/internal/planner/solver"
)

// A small model of the cluster for the round's tests: Nodes as the agent
// reports them, an agent that applies a mig.config at once, and a
// scheduler that binds a pending pod to a free device. The real agent,
// kubelet and scheduler are in the integration and end-to-end tests.

const (
	h100  = "H100-SXM5-80GB"
	mig1g = "nvidia.com/mig-1g.10gb"
	mig3g = "nvidia.com/mig-3g.40gb"
	mig7g = "nvidia.com/mig-7g.80gb"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

var all1g = []string{"1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"}

// simGPU is an H100 with instances "1g.10gb@3", "=ns/pod" for one in use.
func simGPU(index int, instances ...string) nodeinfo.GPU {
	g := nodeinfo.GPU{Index: index, UUID: fmt.Sprintf("GPU-%d", index), Model: h100, MigMode: nodeinfo.MigModeEnabled}
	for _, s := range instances {
		s, user, _ := strings.Cut(s, "=")
		name, start, _ := strings.Cut(s, "@")
		in := nodeinfo.Instance{Profile: name, Health: nodeinfo.HealthHealthy}
		fmt.Sscan(start, &in.Placement.Start)
		in.Placement.Size = sizeOf(name)
		in.UUID = fmt.Sprintf("MIG-%d-%s", index, s)
		if user != "" {
			in.UsedBy = []string{user}
		}
		g.Instances = append(g.Instances, in)
	}
	return g
}

func sizeOf(profile string) int {
	m, _ := simmodels.Get(h100)
	for _, p := range m.Profiles {
		if p.Name == profile {
			return p.MemorySlices
		}
	}
	panic("no profile " + profile)
}

type cluster struct {
	t     *testing.T
	now   time.Time
	nodes map[string]*corev1.Node
	pods  map[string]*corev1.Pod
	rv    int
	// changes records each GPU layout change the agent made: node/gpu ->
	// times and layouts.
	changes map[gpuKey][]change
	writes  int
}

type change struct {
	at     time.Time
	layout string
}

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, now: t0, nodes: map[string]*corev1.Node{}, pods: map[string]*corev1.Pod{}, changes: map[gpuKey][]change{}}
}

// addNode adds an opted-in node whose agent reports success.
func (c *cluster) addNode(name string, gpus ...nodeinfo.GPU) *corev1.Node {
	m, _ := simmodels.Get(h100)
	profiles, _ := json.Marshal([]nodeinfo.Model{nodeinfo.NewModel(h100, m.Profiles)})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, UID: types.UID("uid-" + name),
		Labels:      map[string]string{nodeinfo.LabelPlanner: nodeinfo.PlannerEnabled, nodeinfo.LabelMigConfigState: nodeinfo.StateSuccess, corev1.LabelHostname: name},
		Annotations: map[string]string{nodeinfo.AnnotationProfiles: string(profiles)},
	}}
	c.nodes[name] = n
	c.setLayout(n, gpus)
	return n
}

func (c *cluster) setLayout(n *corev1.Node, gpus []nodeinfo.GPU) {
	b, err := json.Marshal(gpus)
	if err != nil {
		c.t.Fatal(err)
	}
	n.Annotations[nodeinfo.AnnotationLayout] = string(b)
	c.bump(n)
}

func (c *cluster) bump(n *corev1.Node) {
	c.rv++
	n.ResourceVersion = fmt.Sprint(c.rv)
}

func (c *cluster) layout(name string) []nodeinfo.GPU {
	l, err := nodeinfo.ParseLayout(c.nodes[name].Annotations[nodeinfo.AnnotationLayout])
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// pod adds a pending, unschedulable pod asking for n devices of res.
func (c *cluster) pod(name string, res corev1.ResourceName, n int64) *corev1.Pod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(c.now)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{res: q}, Limits: corev1.ResourceList{res: q},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		}}},
	}
	c.pods[name] = p
	return p
}

func (c *cluster) nodeList() []*corev1.Node {
	var out []*corev1.Node
	for _, n := range c.nodes {
		out = append(out, n.DeepCopy())
	}
	return out
}

func (c *cluster) podList() []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range c.pods {
		out = append(out, p.DeepCopy())
	}
	return out
}

// apply is a successful server-side apply of the write, as the API server
// does it (the managed field's time included).
func (c *cluster) apply(w nodeWrite) {
	n := c.nodes[w.node.Name]
	if !w.anyVersion && n.ResourceVersion != w.node.ResourceVersion {
		c.t.Fatalf("write to %s from resourceVersion %s, the node is at %s", n.Name, w.node.ResourceVersion, n.ResourceVersion)
	}
	c.writes++
	if w.value == "" {
		delete(n.Annotations, w.key)
	} else {
		n.Annotations[w.key] = w.value
	}
	n.ManagedFields = slices.DeleteFunc(n.ManagedFields, func(mf metav1.ManagedFieldsEntry) bool {
		owner, _ := plansnap.AnnotationOwner(&corev1.Node{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{mf}}}, w.key)
		return owner != ""
	})
	if w.value != "" {
		n.ManagedFields = append(n.ManagedFields, plansnap.ManagedTime(cmp.Or(w.manager, DefaultFieldManager), w.key, c.now))
	}
	c.bump(n)
}

// agent applies every node's mig.config at once, as the agent would plan
// it (plansnap's reading of a change in flight), keeping the pods on the
// instances it keeps.
func (c *cluster) agent() {
	for _, n := range c.nodes {
		v := plansnap.FromAPI(n, plansnap.Options{Now: c.now})
		if len(v.InFlight) == 0 {
			continue
		}
		old := c.layout(n.Name)
		var next []nodeinfo.GPU
		for _, g := range v.GPUs {
			i := slices.IndexFunc(old, func(o nodeinfo.GPU) bool { return o.Index == g.Index })
			og := old[i]
			if !slices.Contains(v.InFlight, g.Index) {
				next = append(next, og)
				continue
			}
			ng := nodeinfo.GPU{Index: og.Index, UUID: og.UUID, Model: og.Model, MigMode: nodeinfo.MigModeEnabled}
			for _, in := range g.Instances {
				spec := fmt.Sprintf("%s@%d", in.Profile, in.Start)
				j := slices.IndexFunc(og.Instances, func(o nodeinfo.Instance) bool {
					return o.Profile == in.Profile && o.Placement.Start == in.Start
				})
				if j >= 0 {
					ng.Instances = append(ng.Instances, og.Instances[j])
				} else {
					ng.Instances = append(ng.Instances, simGPU(g.Index, spec).Instances[0])
				}
			}
			next = append(next, ng)
			key := gpuKey{n.Name, g.Index}
			c.changes[key] = append(c.changes[key], change{at: c.now, layout: describeGPU(ng)})
		}
		c.setLayout(n, next)
	}
}

func describeGPU(g nodeinfo.GPU) string {
	var parts []string
	for _, in := range g.Instances {
		parts = append(parts, fmt.Sprintf("%s@%d", in.Profile, in.Placement.Start))
	}
	return strings.Join(parts, ",")
}

// schedule binds each pending pod to free devices of its resource on one
// node, as the scheduler would, and reports them in use.
func (c *cluster) schedule() {
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range c.pods {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		p := c.pods[name]
		if p.Spec.NodeName != "" {
			continue
		}
		var res corev1.ResourceName
		var count int64
		for r, q := range p.Spec.Containers[0].Resources.Requests {
			res, count = r, q.Value()
		}
		for _, nn := range slices.Sorted(func(yield func(string) bool) {
			for k := range c.nodes {
				if !yield(k) {
					return
				}
			}
		}) {
			l := c.layout(nn)
			var free [][2]int
			for gi, g := range l {
				for ii, in := range g.Instances {
					if len(in.UsedBy) == 0 && resourcename.MIG(in.Profile) == res {
						free = append(free, [2]int{gi, ii})
					}
				}
			}
			if int64(len(free)) < count {
				continue
			}
			for _, f := range free[:count] {
				l[f[0]].Instances[f[1]].UsedBy = []string{p.Namespace + "/" + p.Name}
			}
			c.setLayout(c.nodes[nn], l)
			p.Spec.NodeName = nn
			p.Status.Phase = corev1.PodRunning
			break
		}
	}
}

// finish ends a running pod: its devices are free again.
func (c *cluster) finish(name string) {
	p := c.pods[name]
	delete(c.pods, name)
	if p.Spec.NodeName == "" {
		return
	}
	key := p.Namespace + "/" + p.Name
	l := c.layout(p.Spec.NodeName)
	for gi := range l {
		for ii := range l[gi].Instances {
			l[gi].Instances[ii].UsedBy = slices.DeleteFunc(l[gi].Instances[ii].UsedBy, func(s string) bool { return s == key })
		}
	}
	c.setLayout(c.nodes[p.Spec.NodeName], l)
}

// round decides once and applies the writes.
func (c *cluster) round(o *Options, pl *solver.Planner, m *memory) decision {
	c.t.Helper()
	d, err := decide(o, pl, m, c.now, c.nodeList(), c.podList())
	if err != nil {
		c.t.Fatal(err)
	}
	for _, w := range d.writes {
		c.apply(w)
		m.wrote(o, w, c.now)
	}
	return d
}
