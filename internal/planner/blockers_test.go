package planner

import (
	"fmt"
	"testing"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

// TestBlockersNameTheFirstGPUs: the message names the busy GPUs first by
// node and index, whatever order the nodes come in, and counts the rest.
func TestBlockersNameTheFirstGPUs(t *testing.T) {
	busyNode := func(name string, gpus int) plansnap.Node {
		v := plansnap.Node{Node: solver.Node{Node: schedview.Node{Name: name}, OptedIn: true}}
		for i := range gpus {
			v.GPUs = append(v.GPUs, solver.GPU{Index: i, Model: h100})
			v.Layout = append(v.Layout, nodeinfo.GPU{Index: i, Model: h100, UsedBy: []string{fmt.Sprintf("ns/%s-%d", name, i)}})
		}
		return v
	}
	const head = "the GPUs that could take it hold pods, whose instances the planner never repartitions: "
	for _, tc := range []struct {
		name  string
		views []plansnap.Node
		want  string
	}{
		{name: "none", views: []plansnap.Node{{Node: solver.Node{Node: schedview.Node{Name: "idle"}, OptedIn: true}}}},
		{
			name:  "fewer than shown",
			views: []plansnap.Node{busyNode("b", 1), busyNode("a", 2)},
			want:  head + "a GPU 0 (ns/a-0), a GPU 1 (ns/a-1), b GPU 0 (ns/b-0)",
		},
		{
			name:  "exactly shown",
			views: []plansnap.Node{busyNode("b", 2), busyNode("a", 2)},
			want:  head + "a GPU 0 (ns/a-0), a GPU 1 (ns/a-1), b GPU 0 (ns/b-0), b GPU 1 (ns/b-1)",
		},
		{
			name:  "more than shown, in reverse order",
			views: []plansnap.Node{busyNode("e", 3), busyNode("d", 3), busyNode("c", 1), busyNode("b", 3), busyNode("a", 1)},
			want:  head + "a GPU 0 (ns/a-0), b GPU 0 (ns/b-0), b GPU 1 (ns/b-1), b GPU 2 (ns/b-2) and 7 more",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			b := newBlockerIndex(tc.views, []solver.Model{{Name: h100}})
			if got := b.holding(c.pod("p", resourcename.GPU, 1)); got != tc.want {
				t.Errorf("holding:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// A round's views of Nodes unchanged since the last round are the last
// round's (plansnap Options.Reuse): what a round marks in its views (a
// reservation's GPUs) must not show in the next round's.
func TestReusedViewsStayAsRead(t *testing.T) {
	c := newCluster(t)
	c.addNode("n1", simGPU(0), simGPU(1))
	o := testOptions()
	m := newMemory(o.MixHalfLife)
	nodes := c.nodeList()
	var d decision
	first := d.readNodes(o, m, c.now, nodes, nil)
	read := &first[0].GPUs[0]
	markReserved(first, reserve.Reservation{Node: "n1", GPUs: []int{0, 1}})
	second := d.readNodes(o, m, c.now, nodes, nil)
	if read != &second[0].GPUs[0] {
		t.Fatal("the unchanged Node was read again")
	}
	for _, g := range second[0].GPUs {
		if g.Reserved {
			t.Errorf("GPU %d reserved in the next round's view", g.Index)
		}
	}
	c.setLayout(c.nodes["n1"], []nodeinfo.GPU{simGPU(0, "1g.10gb@0")})
	third := d.readNodes(o, m, c.now, c.nodeList(), nil)
	if len(third[0].GPUs) != 1 || len(third[0].GPUs[0].Instances) != 1 {
		t.Errorf("the changed Node's view: %+v", third[0].GPUs)
	}
}
