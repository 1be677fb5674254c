package fallback

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/migflex/migflex/internal/domain/resourcename"
)

// knownProfiles are the MIG profiles of the GPUs NVIDIA makes, in the form
// of their resource names without the nvidia.com/mig- prefix (1g.10gb+me is
// 1g.10gb.me), as NVIDIA's mig-parted lays them out (its config-default.yaml
// and examples at commit bd7160f: A30, A100/A800 40/80GB, H100/H800 80GB,
// H100 NVL, H100 96GB, H20, H200, GH200, B200, B300, GB200, GB300, RTX PRO
// 6000 Blackwell). Profiles with attributes are listed one by one: an
// attribute exists only on the profiles that have it (+me on one-slice
// profiles, +gfx on RTX PRO 6000 Blackwell), so 7g.80gb.me is no GPU's.
//
// It lists more GPUs than the built-in models (internal/domain/gpumodel), which
// are the ones the simulator presents; known_builtin_test.go checks that
// every profile of every built-in model is here. A profile missing here is
// still understood when a node has it or the fallback policy names it.
var knownProfiles = wordSet(`
	1g.5gb 1g.6gb 1g.10gb 1g.12gb 1g.18gb 1g.20gb 1g.23gb 1g.24gb 1g.34gb
	1g.35gb 1g.36gb 1g.45gb 1g.47gb 1g.67gb 1g.70gb
	2g.10gb 2g.12gb 2g.20gb 2g.24gb 2g.35gb 2g.36gb 2g.45gb 2g.47gb 2g.48gb
	2g.67gb 2g.70gb
	3g.20gb 3g.40gb 3g.47gb 3g.48gb 3g.71gb 3g.72gb 3g.90gb 3g.93gb 3g.95gb
	3g.135gb 3g.139gb
	4g.20gb 4g.24gb 4g.40gb 4g.47gb 4g.48gb 4g.71gb 4g.72gb 4g.90gb 4g.93gb
	4g.95gb 4g.96gb 4g.135gb 4g.139gb
	7g.40gb 7g.80gb 7g.94gb 7g.96gb 7g.141gb 7g.144gb 7g.180gb 7g.186gb
	7g.189gb 7g.269gb 7g.278gb

	1g.5gb.me 1g.6gb.me 1g.10gb.me 1g.12gb.me 1g.18gb.me 1g.23gb.me
	1g.24gb.me 1g.34gb.me 1g.35gb.me 2g.12gb.me
	1g.24gb.me.all 2g.48gb.me.all
	1g.24gb-me 2g.48gb-me
	1g.24gb.gfx 2g.48gb.gfx 4g.96gb.gfx`)

func wordSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(s) {
		out[w] = true
	}
	return out
}

// Known reports whether r is nvidia.com/gpu or the resource of a MIG
// profile of a GPU NVIDIA makes. The set of such names is small and fixed,
// unlike the names a pod may ask for.
func Known(r corev1.ResourceName) bool {
	if r == resourcename.GPU {
		return true
	}
	s, ok := strings.CutPrefix(string(r), resourcename.MIGPrefix)
	return ok && knownProfiles[s]
}
