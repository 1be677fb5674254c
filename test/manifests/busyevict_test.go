package manifests

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// testOverlays are kustomizations under testdata/kustomize that use the
// components the way a user's overlay would; they are rendered, dry-run
// applied and flag-checked like the shipped overlays.
var testOverlays = []string{"real-busy-evict", "local-busy-evict", "real-fallback-policy", "simulated-planner", "real-planner-dry-run", "simulated-planner-monitoring", "real-dra", "real-dra-dynamic", "real-sharing"}

const testOverlayDir = "test/manifests/testdata/kustomize"

// kustomizeBuildTestdata renders testdata/kustomize/name.
func kustomizeBuildTestdata(t testing.TB, name string) objects {
	t.Helper()
	out, err := run(t, kubectlPath(t), "kustomize", path.Join(testOverlayDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// evictionGrants are the ClusterRoles and Roles of objs that grant
// something on pods/eviction, and the bindings that bind them, normalised
// as TestKustomizeMatchesHelm compares objects.
func evictionGrants(t testing.TB, objs objects, helm bool) map[string]map[string]any {
	t.Helper()
	roles := map[string]bool{}
	var picked objects
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		for _, r := range as[rbacv1.ClusterRole](t, o).Rules {
			if slices.Contains(r.Resources, "pods/eviction") || slices.Contains(r.Resources, "*") {
				roles[o.GetKind()+"/"+o.GetName()] = true
				picked = append(picked, o)
				break
			}
		}
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
			continue
		}
		if ref := as[rbacv1.ClusterRoleBinding](t, o).RoleRef; roles[ref.Kind+"/"+ref.Name] {
			picked = append(picked, o)
		}
	}
	return normalise(picked, helm)
}

// busyPolicies are the agent's --busy-policy arguments in objs, those of
// every agent DaemonSet (the local overlays have two pools).
func busyPolicies(t testing.TB, objs objects) []string {
	t.Helper()
	var out []string
	for _, o := range objs.ofKind("DaemonSet") {
		for _, a := range as[appsv1.DaemonSet](t, o).Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--busy-policy") {
				out = append(out, a)
			}
		}
	}
	return out
}

// everyAgent is arg once for each agent DaemonSet in objs, at least one.
func everyAgent(t testing.TB, objs objects, arg string) []string {
	t.Helper()
	n := len(objs.ofKind("DaemonSet"))
	if n == 0 {
		t.Fatal("no agent DaemonSet")
	}
	return slices.Repeat([]string{arg}, n)
}

// components/busy-evict gives a kustomize install what the chart's
// agent.busyPolicy=evict gives: the agent's --busy-policy=evict and the
// permission to create pods/eviction, with the same scope. Without it, no
// overlay grants eviction.
func TestBusyEvictComponent(t *testing.T) {
	helmPath(t)
	kubectlPath(t)
	evict := helmTemplate(t, scenarioNamed(t, "evict"))
	want := evictionGrants(t, evict, true)
	if len(want) == 0 {
		t.Fatal("helm with agent.busyPolicy=evict grants nothing on pods/eviction: nothing to compare with")
	}

	t.Run("real-busy-evict renders what helm renders", func(t *testing.T) {
		got := kustomizeBuildTestdata(t, "real-busy-evict")
		if diff := cmp.Diff(want, evictionGrants(t, got, false)); diff != "" {
			t.Errorf("the eviction permission of helm (-) and kustomize (+) differ:\n%s", diff)
		}
		// Everything else too: the component changes only the flag and
		// adds only the permission.
		if diff := cmp.Diff(normalise(evict, true), normalise(got, false)); diff != "" {
			t.Errorf("helm --set agent.busyPolicy=evict (-) and kustomize (+) differ:\n%s", diff)
		}
	})

	t.Run("local-busy-evict", func(t *testing.T) {
		got := kustomizeBuildTestdata(t, "local-busy-evict")
		if diff := cmp.Diff(want, evictionGrants(t, got, false)); diff != "" {
			t.Errorf("the eviction permission of helm (-) and kustomize (+) differ:\n%s", diff)
		}
		if diff := cmp.Diff(everyAgent(t, got, "--busy-policy=evict"), busyPolicies(t, got)); diff != "" {
			t.Errorf("agent --busy-policy (-want +got):\n%s", diff)
		}
	})

	for _, o := range overlays {
		t.Run(o+" grants no eviction", func(t *testing.T) {
			objs := kustomizeBuild(t, o)
			if got := evictionGrants(t, objs, false); len(got) != 0 {
				t.Errorf("eviction granted without the busy-evict component: %v", slices.Sorted(maps.Keys(got)))
			}
			if diff := cmp.Diff(everyAgent(t, objs, "--busy-policy=wait"), busyPolicies(t, objs)); diff != "" {
				t.Errorf("agent --busy-policy (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("helm default grants no eviction", func(t *testing.T) {
		if got := evictionGrants(t, helmTemplate(t, scenarioNamed(t, "default")), true); len(got) != 0 {
			t.Errorf("eviction granted with busyPolicy wait: %v", slices.Sorted(maps.Keys(got)))
		}
	})

	// The component replaces the argument at its index only after checking
	// it: an overlay whose arguments moved fails the build instead of
	// losing another flag.
	t.Run("moved arguments fail the build", func(t *testing.T) {
		out, err := run(t, kubectlPath(t), "kustomize", path.Join(testOverlayDir, "args-moved-busy-evict"))
		if err == nil || !strings.Contains(err.Error(), "test failed") {
			t.Errorf("kustomize with the agent's arguments moved: %v, want the component's test op to fail\n%s", err, out)
		}
	})
}
