package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/migflex/migflex/internal/webhook/fallback"
)

// policyValues give the chart the policy of
// testdata/kustomize/real-fallback-policy/policy.yaml.
const policyValues = `
webhook:
  policy:
    apiVersion: migflex.io/v1alpha1
    kind: FallbackPolicy
    allowUp: false
    minMemoryGB: 10
    chains:
      nvidia.com/mig-3g.40gb: [nvidia.com/mig-2g.20gb, nvidia.com/gpu]
`

const policyConfigMap = "gpu-webhook-policy"

// components/fallback-policy, with the ConfigMap a user's overlay
// generates, gives a kustomize install what the chart's webhook.policy
// gives: the same policy (compared as the webhook parses it), mounted and
// passed with --config, and nothing else changed.
func TestFallbackPolicyComponent(t *testing.T) {
	helmPath(t)
	kubectlPath(t)
	helm := helmTemplate(t, scenarioNamed(t, "policy"))
	kust := kustomizeBuildTestdata(t, "real-fallback-policy")

	want := policyOf(t, helm, func(name string) bool { return name == policyConfigMap })
	if cmp.Equal(want, fallback.DefaultPolicy()) {
		t.Fatal("the chart's policy is the built-in one: nothing to compare with")
	}
	// kustomize's generated name carries a hash of the content, which is
	// what rolls the webhook when the policy changes.
	got := policyOf(t, kust, func(name string) bool { return strings.HasPrefix(name, policyConfigMap+"-") })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("policy of helm (-) and kustomize (+) differ:\n%s", diff)
	}

	// Everything else: the hashed name unhashed, the ConfigMap's content
	// and labels (compared above, and the user's to choose) left out.
	for _, objs := range []objects{helm, kust} {
		for _, o := range objs {
			switch {
			case o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), policyConfigMap):
				o.SetName(policyConfigMap)
				o.SetLabels(nil)
				unstructured.RemoveNestedField(o.Object, "data")
			case o.GetKind() == "Deployment" && o.GetName() == "gpu-webhook":
				normaliseWebhookPod(t, o)
			}
		}
	}
	if diff := cmp.Diff(normalise(helm, true), normalise(kust, false)); diff != "" {
		t.Errorf("helm with webhook.policy (-) and kustomize with components/fallback-policy (+) differ:\n%s", diff)
	}
}

// The component's example is a valid policy, and the built-in one as its
// comment says.
func TestFallbackPolicyExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), kustomize, "components/fallback-policy/example-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := fallback.ParsePolicy(data)
	if err != nil {
		t.Fatalf("example-policy.yaml: %v", err)
	}
	if diff := cmp.Diff(fallback.DefaultPolicy(), p); diff != "" {
		t.Errorf("example-policy.yaml is not the built-in policy (-built-in +example):\n%s", diff)
	}
}

// policyOf parses, as the webhook would, the policy.yaml of the one
// ConfigMap in objs whose name matches, after checking that the webhook
// mounts that ConfigMap where --config points.
func policyOf(t *testing.T, objs objects, match func(string) bool) fallback.Policy {
	t.Helper()
	var cm *unstructured.Unstructured
	for _, o := range objs.ofKind("ConfigMap") {
		if match(o.GetName()) {
			if cm != nil {
				t.Fatalf("two policy ConfigMaps: %s and %s", cm.GetName(), o.GetName())
			}
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no policy ConfigMap rendered")
	}
	var dir string
	for _, o := range objs.ofKind("Deployment") {
		if o.GetName() != "gpu-webhook" {
			continue
		}
		spec := as[appsv1.Deployment](t, o).Spec.Template.Spec
		var volume string
		for _, v := range spec.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == cm.GetName() {
				volume = v.Name
			}
		}
		for _, m := range spec.Containers[0].VolumeMounts {
			if volume != "" && m.Name == volume {
				dir = m.MountPath
			}
		}
		if !slices.Contains(spec.Containers[0].Args, "--config="+dir+"/policy.yaml") {
			t.Fatalf("webhook args %q: want --config=%s/policy.yaml, where ConfigMap %s is mounted", spec.Containers[0].Args, dir, cm.GetName())
		}
	}
	if dir == "" {
		t.Fatalf("the webhook does not mount ConfigMap %s", cm.GetName())
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "policy.yaml")
	p, err := fallback.ParsePolicy([]byte(data))
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", cm.GetName(), err)
	}
	return p
}

// normaliseWebhookPod sorts the webhook container's arguments, whose order
// does not matter to the flag parser (the chart puts --config before --v,
// the component's JSON patch can only append), and unhashes the policy
// ConfigMap's name in the volume.
func normaliseWebhookPod(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		c := c.(map[string]any)
		args, _ := c["args"].([]any)
		slices.SortFunc(args, func(a, b any) int { return strings.Compare(a.(string), b.(string)) })
	}
	if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	vs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
	for _, v := range vs {
		if cm, ok := v.(map[string]any)["configMap"].(map[string]any); ok && strings.HasPrefix(cm["name"].(string), policyConfigMap) {
			cm["name"] = policyConfigMap
		}
	}
	if err := unstructured.SetNestedSlice(o.Object, vs, "spec", "template", "spec", "volumes"); err != nil {
		t.Fatal(err)
	}
}

// docs/INSTALL.md's example FallbackPolicy is one the webhook accepts.
func TestInstallDocPolicyParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docs/INSTALL.md"))
	if err != nil {
		t.Fatal(err)
	}
	var found int
	for _, block := range strings.Split(string(data), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.Contains(block, "kind: FallbackPolicy") {
			continue
		}
		found++
		if _, err := fallback.ParsePolicy([]byte(block)); err != nil {
			t.Errorf("docs/INSTALL.md's FallbackPolicy:\n%s\n%v", block, err)
		}
	}
	if found == 0 {
		t.Error("docs/INSTALL.md shows no FallbackPolicy")
	}
}
