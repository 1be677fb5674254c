package manifests

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/migflex/migflex/internal/domain/sharing"
)

// sharingValues give the chart the configs of
// testdata/kustomize/real-sharing: one as a document, one as its text (as
// NVIDIA's chart takes them).
const sharingValues = `
agent:
  sharingConfig:
    default: {version: v1}
    ts-1g: |
      version: v1
      sharing:
        timeSlicing:
          resources:
          - name: nvidia.com/mig-1g.10gb
            replicas: 2
`

const sharingConfigMap = "migflex-sharing-config"

// components/sharing, with the ConfigMap a user's overlay generates, gives
// a kustomize install what the chart's agent.sharingConfig gives: the same
// configs (compared as the agent parses them), mounted where
// --sharing-config points, and nothing else changed.
func TestSharingComponent(t *testing.T) {
	helmPath(t)
	kubectlPath(t)
	helm := helmTemplate(t, scenarioNamed(t, "sharing"))
	kust := kustomizeBuildTestdata(t, "real-sharing")

	want := sharingConfigsOf(t, helm, func(name string) bool { return name == sharingConfigMap })
	got := sharingConfigsOf(t, kust, func(name string) bool { return strings.HasPrefix(name, sharingConfigMap+"-") })
	if len(want) != 2 || want["ts-1g"].Strategy != sharing.StrategyTimeSlicing {
		t.Fatalf("the chart's configs %v: want default and a time-slicing ts-1g", want)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sharing configs of helm (-) and kustomize (+) differ:\n%s", diff)
	}

	for _, objs := range []objects{helm, kust} {
		for _, o := range objs {
			switch {
			case o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), sharingConfigMap):
				o.SetName(sharingConfigMap)
				o.SetLabels(nil)
				unstructured.RemoveNestedField(o.Object, "data")
			case o.GetKind() == "DaemonSet" && o.GetName() == "migflex-agent":
				vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
				for _, v := range vols {
					if cm, ok := v.(map[string]any)["configMap"].(map[string]any); ok && strings.HasPrefix(cm["name"].(string), sharingConfigMap) {
						cm["name"] = sharingConfigMap
					}
				}
				if err := unstructured.SetNestedSlice(o.Object, vols, "spec", "template", "spec", "volumes"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if diff := cmp.Diff(normalise(helm, true), normalise(kust, false)); diff != "" {
		t.Errorf("helm with agent.sharingConfig (-) and kustomize with components/sharing (+) differ:\n%s", diff)
	}
}

// sharingConfigsOf parses, as the agent would, every config of the one
// ConfigMap in objs whose name matches, after checking that the agent
// DaemonSet mounts it where --sharing-config points.
func sharingConfigsOf(t *testing.T, objs objects, match func(string) bool) map[string]*sharing.Config {
	t.Helper()
	var cm *unstructured.Unstructured
	for _, o := range objs.ofKind("ConfigMap") {
		if match(o.GetName()) {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no sharing ConfigMap rendered")
	}
	mounted := false
	for _, o := range objs.ofKind("DaemonSet") {
		if o.GetName() != "migflex-agent" {
			continue
		}
		spec := as[appsv1.DaemonSet](t, o).Spec.Template.Spec
		var volume string
		for _, v := range spec.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == cm.GetName() {
				volume = v.Name
			}
		}
		c := spec.Containers[0]
		for _, m := range c.VolumeMounts {
			if m.Name == volume && volume != "" {
				mounted = true
				if !strings.Contains(strings.Join(c.Args, " "), "--sharing-config="+m.MountPath) {
					t.Errorf("the agent mounts the sharing configs at %s, but its args %v do not point there", m.MountPath, c.Args)
				}
			}
		}
	}
	if !mounted {
		t.Fatalf("the agent does not mount ConfigMap %s", cm.GetName())
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	out := map[string]*sharing.Config{}
	for name, doc := range data {
		cfg, err := sharing.Parse([]byte(doc))
		if err != nil {
			t.Errorf("config %s: %v", name, err)
			continue
		}
		out[name] = cfg
	}
	return out
}
