package migconfig

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/migflex/migflex/internal/domain/mig"
)

// mediaShortfall explains why the instances in counts cannot share the
// GPU's media engines, or returns "". A GPU has a fixed number of video
// decoders and encoders, JPEG decoders and OFAs (MediaLimits), and a driver
// gives each instance its profile's share, never the same engine twice: on
// an A30, 1g.6gb+me and 2g.12gb+me both need its only OFA. nvml.h adds that
// a +me.all instance, which takes them all, coexists only with -me ones.
func mediaShortfall(g *mig.GPU, counts map[string]int) string {
	var sum mig.Engines
	var allMe, others []string
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		p, _ := g.Profile(name)
		n := counts[name]
		sum.Decoders += n * p.Engines.Decoders
		sum.Encoders += n * p.Engines.Encoders
		sum.JPEGs += n * p.Engines.JPEGs
		sum.OFAs += n * p.Engines.OFAs
		switch mig.MediaOf(p.Query) {
		case mig.AllMedia:
			for range n {
				allMe = append(allMe, name)
			}
		case mig.NoMedia:
		default:
			others = append(others, name)
		}
	}
	if len(allMe) > 0 && len(allMe)+len(others) > 1 {
		return fmt.Sprintf("%s takes all media engines and can share the GPU only with -me profiles", allMe[0])
	}
	limit := g.MediaLimits()
	var short []string
	for _, e := range []struct {
		what       string
		need, have int
	}{
		{"video decoders", sum.Decoders, limit.Decoders},
		{"video encoders", sum.Encoders, limit.Encoders},
		{"JPEG decoders", sum.JPEGs, limit.JPEGs},
		{"OFAs", sum.OFAs, limit.OFAs},
	} {
		if e.need > e.have {
			short = append(short, fmt.Sprintf("%d of the GPU's %d %s", e.need, e.have, e.what))
		}
	}
	if len(short) == 0 {
		return ""
	}
	return "needs " + strings.Join(short, ", ") + " (media engines go to one instance each)"
}
