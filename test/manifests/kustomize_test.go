package manifests

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

// overlays are every kustomization users apply.
var overlays = []string{"overlays/simulated", "overlays/real", "overlays/real-cert-manager", "overlays/local", "overlays/local-planner"}

// The kustomize overlays render the same objects as the chart with the
// matching values, so the two install paths cannot drift apart. The
// differences that are by design are normalised away (see normalise).
func TestKustomizeMatchesHelm(t *testing.T) {
	helmPath(t)
	kubectlPath(t)
	for _, tc := range []struct {
		overlay string
		helm    scenario
	}{
		{"overlays/simulated", scenario{name: "simulated", set: []string{"backend=simulated"}}},
		{"overlays/real", scenario{name: "real"}},
		{"overlays/real-cert-manager", scenario{name: "cert-manager", set: []string{"certificates.mode=cert-manager"}}},
		{"testdata/simulated-planner", scenarioNamed(t, "planner")},
		{"testdata/real-dra", scenario{name: "real-dra", set: []string{"agent.serving=dra"}}},
		{"testdata/real-dra-dynamic", scenario{name: "real-dra-dynamic", set: []string{"agent.serving=dra", "agent.draMode=dynamic"}}},
		{"testdata/real-planner-dry-run", scenarioNamed(t, "planner-dry-run")},
		{"testdata/simulated-planner-monitoring", scenarioNamed(t, "prometheus-rules")},
	} {
		t.Run(tc.overlay, func(t *testing.T) {
			fromHelm := normalise(helmTemplate(t, tc.helm), true)
			var built objects
			if name, ok := strings.CutPrefix(tc.overlay, "testdata/"); ok {
				built = kustomizeBuildTestdata(t, name)
			} else {
				built = kustomizeBuild(t, tc.overlay)
			}
			fromKustomize := normalise(built, false)
			if diff := cmp.Diff(fromHelm, fromKustomize); diff != "" {
				t.Errorf("helm (-) and kustomize (+) differ:\n%s", diff)
			}
		})
	}
}

// normalise keys the objects by name and removes what differs by design:
//   - Helm's release labels (instance, version, managed-by, chart) and its
//     hook and checksum annotations;
//   - the Namespace, which kustomize creates (with Pod Security labels) and
//     Helm leaves to --create-namespace;
//   - certgen: Helm runs it as two hook Jobs (the Secret before the
//     release, the CA injection after it); kustomize as one Job, which
//     waits for the configuration and deletes itself after a while
//     (ttlSecondsAfterFinished) so a later apply can run it again. The
//     post-install Job is compared with kustomize's Job.
//   - the order of env, volumes and volumeMounts, which means nothing here
//     and which kustomize's patches change.
func normalise(objs objects, helm bool) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		o = o.DeepCopy()
		if o.GetKind() == "Namespace" {
			continue
		}
		if helm && o.GetKind() == "Job" {
			if o.GetName() == "migflex-certgen-pre" {
				continue
			}
			o.SetName("migflex-certgen")
		}
		if !helm && o.GetKind() == "Job" {
			unstructured.RemoveNestedField(o.Object, "spec", "ttlSecondsAfterFinished")
		}
		cleanMeta(o.Object, "metadata")
		for _, path := range [][]string{{"spec", "template", "metadata"}} {
			if _, ok, _ := unstructured.NestedMap(o.Object, path...); ok {
				cleanMeta(o.Object, path...)
			}
		}
		if spec, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec"); ok {
			sortByKey(spec, "volumes", "name")
			for _, field := range []string{"containers", "initContainers"} {
				cs, _ := spec[field].([]any)
				for _, c := range cs {
					c := c.(map[string]any)
					sortByKey(c, "env", "name")
					sortByKey(c, "volumeMounts", "mountPath")
				}
			}
			_ = unstructured.SetNestedMap(o.Object, spec, "spec", "template", "spec")
		}
		out[key(o)] = o.Object
	}
	return out
}

var helmOnlyLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}

func cleanMeta(obj map[string]any, path ...string) {
	meta, _, _ := unstructured.NestedMap(obj, path...)
	if labels, ok := meta["labels"].(map[string]any); ok {
		for _, l := range helmOnlyLabels {
			delete(labels, l)
		}
	}
	if ann, ok := meta["annotations"].(map[string]any); ok {
		maps.DeleteFunc(ann, func(k string, _ any) bool {
			return strings.HasPrefix(k, "helm.sh/") || strings.HasPrefix(k, "checksum/")
		})
		if len(ann) == 0 {
			delete(meta, "annotations")
		}
	}
	_ = unstructured.SetNestedMap(obj, meta, path...)
}

func sortByKey(m map[string]any, field, key string) {
	list, ok := m[field].([]any)
	if !ok {
		return
	}
	sort.SliceStable(list, func(i, j int) bool {
		a, _ := list[i].(map[string]any)[key].(string)
		b, _ := list[j].(map[string]any)[key].(string)
		return a < b
	})
}

// The local overlay is what the end-to-end suite installs on the harness
// cluster: no registry, no kube-proxy, no cluster DNS, and nothing may leave
// the machine.
func TestLocalOverlay(t *testing.T) {
	objs := kustomizeBuild(t, "overlays/local")
	var pods []*corev1.PodTemplateSpec
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet":
			pods = append(pods, &as[appsv1.DaemonSet](t, o).Spec.Template)
		case "Deployment":
			pods = append(pods, &as[appsv1.Deployment](t, o).Spec.Template)
		case "Job":
			pods = append(pods, &as[batchv1.Job](t, o).Spec.Template)
		}
	}
	if len(pods) != 4 {
		t.Fatalf("%d pod templates among %v, want the agent's two pools, the webhook and certgen", len(pods), objs.keys())
	}
	for _, p := range pods {
		name := p.Labels["app"]
		// Every one of them talks to the API server.
		if !p.Spec.HostNetwork {
			t.Errorf("%s: not on the host network; ClusterIPs are not routed here", name)
		}
		for _, c := range p.Spec.Containers {
			if c.Image != "lc.local/migflex:e2e" || c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("%s/%s: image %s pull %s, want lc.local/migflex:e2e, Never", name, c.Name, c.Image, c.ImagePullPolicy)
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			if env["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
				t.Errorf("%s/%s: API server env %v, want 127.0.0.1:6443", name, c.Name, env)
			}
		}
	}

	d := get[appsv1.Deployment](t, objs, "Deployment", "gpu-webhook")
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--listen=:9443") {
		t.Errorf("webhook args %q: want it on 9443, a port free on the host", c.Args)
	}
	// Its metrics, like the agent's, on the host's loopback only.
	if !slices.Contains(c.Args, "--metrics-addr=127.0.0.1:9125") {
		t.Errorf("webhook args %q: want its metrics on 127.0.0.1:9125", c.Args)
	}
	// Two replicas on the one node, sharing the port (TestWebhookRolloutsAreHitless
	// checks how): node 1, the control-plane host, whose loopback the
	// suite reads their metrics on.
	if *d.Spec.Replicas != 2 {
		t.Errorf("webhook replicas %d, want 2", *d.Spec.Replicas)
	}
	if sel := d.Spec.Template.Spec.NodeSelector; len(sel) != 1 || sel["node-role.kubernetes.io/control-plane"] != "" {
		t.Errorf("webhook nodeSelector %v, want the control-plane node's role label", sel)
	}

	ds := get[appsv1.DaemonSet](t, objs, "DaemonSet", "migflex-agent")
	checkLocalDRAPool(t, ds, get[appsv1.DaemonSet](t, objs, "DaemonSet", "migflex-agent-dra"))
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", "migflex-sim-config")
	cfg, err := sim.ParseConfig([]byte(cm.Data["config.yaml"]), "/etc/migflex/sim", "node")
	if err != nil {
		t.Fatal(err)
	}
	var hostState string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "sim-state" && v.HostPath != nil {
			hostState = v.HostPath.Path
		}
	}
	mounted := slices.ContainsFunc(ds.Spec.Template.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "sim-state" && m.MountPath == cfg.StateDir
	})
	// down.sh removes /var/lib/kubelet with the cluster, so no simulated
	// layout leaks from one run into the next.
	if !strings.HasPrefix(hostState, "/var/lib/kubelet/") || !mounted {
		t.Errorf("simulator state on host %q (mounted at stateDir %s: %v), want a hostPath under /var/lib/kubelet", hostState, cfg.StateDir, mounted)
	}
	if env := envOf(ds.Spec.Template.Spec.Containers[0]); env["MIGFLEX_AGENT_NVML_BACKEND"] != "simulated" {
		t.Errorf("agent env %v", env)
	}

	// On the host network, the agent's :9123 would be every interface of
	// the machine: /metrics and /healthz stay on its loopback. The kubelet
	// probes from the host, so the probes name 127.0.0.1 (their default
	// host, the pod IP, is the node's address here, where nothing listens).
	agent := ds.Spec.Template.Spec.Containers[0]
	var addrs []string
	for _, a := range agent.Args {
		if strings.HasPrefix(a, "--metrics-addr=") {
			addrs = append(addrs, a)
		}
	}
	if _, set := envOf(agent)["MIGFLEX_AGENT_METRICS_ADDR"]; set || !slices.Equal(addrs, []string{"--metrics-addr=127.0.0.1:9123"}) {
		t.Errorf("agent metrics address: args %q, env %v; want only --metrics-addr=127.0.0.1:9123", addrs, envOf(agent))
	}
	for name, p := range map[string]*corev1.Probe{"liveness": agent.LivenessProbe, "readiness": agent.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Path != "/healthz" || portOf(agent, p.HTTPGet.Port.String()) != 9123 {
			t.Errorf("agent %s probe %+v: want GET 127.0.0.1:9123/healthz", name, p)
		}
	}
}

// checkLocalDRAPool checks the local overlay's two agent pools: the DRA
// pool's DaemonSet (dra-pool/) is the device-plugin pool's but for what the
// chart's agent.draNodeSelector changes (name, the selector's and the pod's
// label, the node selector, --serving=dra with the CDI directory and the
// DRA mounts), and the device-plugin pool leaves the DRA pool's nodes out,
// so an agent change reaches both pools or fails here.
func checkLocalDRAPool(t *testing.T, dp, dra *appsv1.DaemonSet) {
	t.Helper()
	const key, value = "migflex.io/serve", "dra"
	terms := dp.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	excluded := len(terms) > 0
	for _, term := range terms {
		excluded = excluded && slices.ContainsFunc(term.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
			return e.Key == key && e.Operator == corev1.NodeSelectorOpNotIn && slices.Equal(e.Values, []string{value})
		})
	}
	if !excluded {
		t.Errorf("migflex-agent's node affinity %v does not leave the %s=%s nodes out", terms, key, value)
	}

	want := dp.DeepCopy()
	want.Name = "migflex-agent-dra"
	want.Labels["migflex.io/agent-serving"] = "dra"
	want.Spec.Selector.MatchLabels["migflex.io/agent-serving"] = "dra"
	spec := &want.Spec.Template
	spec.Labels["migflex.io/agent-serving"] = "dra"
	spec.Spec.NodeSelector = map[string]string{key: value}
	for i := range spec.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		term := &spec.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[i]
		term.MatchExpressions = slices.DeleteFunc(term.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool { return e.Key == key })
	}
	c := &spec.Spec.Containers[0]
	i := slices.Index(c.Args, "--serving=device-plugin")
	if i < 0 {
		t.Fatalf("migflex-agent args %q lack --serving=device-plugin", c.Args)
	}
	c.Args[i] = "--serving=dra"
	c.Args = slices.Insert(c.Args, i+1, "--cdi-dir=/var/run/cdi")
	dir, dirOrCreate := corev1.HostPathDirectory, corev1.HostPathDirectoryOrCreate
	for _, v := range []struct {
		name, path string
		typ        *corev1.HostPathType
	}{{"kubelet-plugins", "/var/lib/kubelet/plugins", &dirOrCreate}, {"plugins-registry", "/var/lib/kubelet/plugins_registry", &dir}, {"cdi", "/var/run/cdi", &dirOrCreate}} {
		spec.Spec.Volumes = append(spec.Spec.Volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: v.path, Type: v.typ}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.name, MountPath: v.path})
	}
	got := dra.DeepCopy()
	for _, ds := range []*appsv1.DaemonSet{want, got} {
		slices.SortFunc(ds.Spec.Template.Spec.Volumes, func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
		m := ds.Spec.Template.Spec.Containers[0].VolumeMounts
		slices.SortFunc(m, func(a, b corev1.VolumeMount) int { return strings.Compare(a.Name, b.Name) })
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("migflex-agent-dra against migflex-agent with the DRA pool's changes (-want +got):\n%s", diff)
	}
}

// portOf resolves a probe's port, a number or a container port's name.
func portOf(c corev1.Container, port string) int32 {
	for _, p := range c.Ports {
		if p.Name == port {
			return p.ContainerPort
		}
	}
	n, _ := strconv.Atoi(port)
	return int32(n)
}
