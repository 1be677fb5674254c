package replay

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/migflex/migflex/internal/planner/solver"
)

// TestPlots: every plot is well-formed SVG with a line per policy, and the
// fill's curve ends where the fill ended.
func TestPlots(t *testing.T) {
	tasks := []Task{
		{Name: "a", NumGPU: 1, GPUMilli: 400, Created: 0, Duration: 100},
		{Name: "b", NumGPU: 1, GPUMilli: 1000, Created: 10, Duration: 100},
		{Name: "c", NumGPU: 2, GPUMilli: 1000, Created: 20, Duration: 100},
	}
	o := Options{Tasks: tasks, Columns: Columns{Times: true}, Nodes: []TraceNode{{Name: "n0", GPUs: 2, Model: "G2"}, {Name: "n1", GPUs: 2, Model: "G2"}},
		Speedup: 1, Loads: []float64{0.5, 1}, Drain: time.Hour, Latency: 5 * time.Second, Planner: solver.DefaultPolicy(),
		MixHalfLife: time.Hour, FGD: true, Parallel: 1}
	r, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	plots := Plots(r)
	for _, name := range []string{"served.svg", "wait.svg", "fill.svg"} {
		s, ok := plots[name]
		if !ok {
			t.Fatalf("no %s", name)
		}
		d := xml.NewDecoder(strings.NewReader(s))
		lines := 0
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
				lines++
			}
		}
		want := len(plotted)
		if name == "served.svg" {
			want++ // the bound
		}
		if lines != want {
			t.Errorf("%s: %d lines, want %d", name, lines, want)
		}
	}
	for _, res := range r.FGD.Results {
		last := res.Curve[len(res.Curve)-1]
		if !near(last.Allocated, res.AllocatedAtEnd) {
			t.Errorf("%s: the curve ends at %v, the fill at %v", res.Policy, last.Allocated, res.AllocatedAtEnd)
		}
	}
}
