package manifests

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
	"github.com/migflex/migflex/internal/platform/cli"
	"github.com/migflex/migflex/internal/webhook/certgen"
	"github.com/migflex/migflex/internal/webhook/fallback"
)

// poolsValues exercises simulated node pools, a mig-parted config and a
// fallback policy, each rendered into a ConfigMap the binaries must parse.
const poolsValues = `
backend: simulated
simulator:
  models:
  - name: H100-PCIE-70GB
    productName: Example 70 GB card
    pciDeviceID: 0x233110DE
    memoryMiB: 71680
    sms: 114
    architecture: hopper
    profiles:
    - {name: 1g.9gb, slices: 1, memorySlices: 1, memoryMiB: 8960, sms: 14, maxCount: 7, placements: [0, 1, 2, 3, 4, 5, 6]}
    - {name: 7g.70gb, slices: 7, memorySlices: 8, memoryMiB: 70912, sms: 98, maxCount: 1, placements: [0]}
  operationDelay: 250ms
  faults: [{kind: error, call: createGpuInstance, nth: 2, return: ERROR_IN_USE}]
  nodePools:
  - name: a100
    nodeSelector: {migflex.io/pool: a100}
    gpus: [{model: A100-SXM4-40GB, count: 2}]
  - name: custom
    nodeSelector: {migflex.io/pool: custom}
    gpus: [{model: H100-PCIE-70GB, count: 1}]
    nodes:
      special-node: {gpus: [{model: H200-SXM-141GB, count: 1}]}
agent:
  nodeSelector: {gpu: "yes"}
  migPartedConfig:
    version: v1
    mig-configs:
      all-disabled:
      - {devices: all, mig-enabled: false}
      all-1g.5gb:
      - {devices: all, mig-enabled: true, mig-devices: {"1g.5gb": 7}}
webhook:
  policy:
    apiVersion: migflex.io/v1alpha1
    kind: FallbackPolicy
`

// scenarios are the installations the chart is checked with: the defaults
// and every switch that changes which objects or permissions it renders.
var scenarios = []scenario{
	{name: "default"},
	{name: "simulated", set: []string{"backend=simulated"}},
	{name: "real-runtime-class", set: []string{"agent.runtimeClassName=nvidia", "agent.driverRoot=/run/nvidia/driver"}},
	{name: "cert-manager", set: []string{"certificates.mode=cert-manager"}},
	{name: "cert-manager-cluster-issuer", set: []string{"certificates.mode=cert-manager", "certificates.certManager.issuerRef.name=corp-ca", "certificates.certManager.issuerRef.kind=ClusterIssuer"}},
	{name: "evict", set: []string{"agent.busyPolicy=evict"}},
	{name: "no-publish", set: []string{"agent.publishAllocatable=false"}},
	{name: "dra", set: []string{"backend=simulated", "agent.serving=dra"}},
	{name: "dra-dynamic", set: []string{"backend=simulated", "agent.serving=dra", "agent.draMode=dynamic"}},
	{name: "dra-nodes", set: []string{"agent.draNodeSelector.migflex\\.io/serve=dra"}},
	{name: "capacity", set: []string{"webhook.mode=capacity", "webhook.onUnsatisfiable=allow"}},
	{name: "pools", values: poolsValues},
	{name: "policy", values: policyValues},
	{name: "sharing", values: sharingValues},
	{name: "host-network", set: []string{"backend=simulated", "agent.hostNetwork=true", "webhook.hostNetwork=true", "webhook.port=9443", "certificates.certgen.hostNetwork=true"}},
	{name: "webhook-only", set: []string{"agent.enabled=false"}},
	{name: "agent-only", set: []string{"webhook.enabled=false", "nodeScopePolicy.enabled=false"}},
	{name: "planner", set: []string{"backend=simulated", "planner.enabled=true"}},
	{name: "planner-dry-run", set: []string{"planner.enabled=true", "planner.dryRun=true"}},
	{name: "prometheus-rules", set: []string{"backend=simulated", "planner.enabled=true", "metrics.prometheusRule.enabled=true"}},
	{name: "monitoring", set: []string{"planner.enabled=true", "metrics.certSecretName=migflex-metrics-tls", "metrics.prometheusRule.enabled=true",
		"metrics.prometheusRule.labels.release=kube-prometheus-stack", "metrics.readers[0].kind=ServiceAccount",
		"metrics.readers[0].name=prometheus-k8s", "metrics.readers[0].namespace=monitoring",
		"metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=kube-prometheus-stack", "metrics.dashboard.enabled=true"}},
	{name: "monitoring-host-network", set: []string{"backend=simulated", "agent.hostNetwork=true", "webhook.hostNetwork=true", "webhook.port=9443",
		"certificates.certgen.hostNetwork=true", "metrics.serviceMonitor.enabled=true",
		"metrics.serviceMonitor.authorization.type=Bearer", "metrics.serviceMonitor.authorization.credentials.name=scraper-token",
		"metrics.serviceMonitor.authorization.credentials.key=token"}},
}

func scenarioNamed(t testing.TB, name string) scenario {
	t.Helper()
	for _, s := range scenarios {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no scenario %q", name)
	return scenario{}
}

func TestHelmLint(t *testing.T) {
	helm := helmPath(t)
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			args := append([]string{"lint", chartDir, "--strict", "--namespace", namespace}, s.helmArgs(t)...)
			if out, err := run(t, helm, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// The values schema turns a typo or an unknown choice into an error instead
// of a silently ignored value.
func TestHelmRejectsBadValues(t *testing.T) {
	helm := helmPath(t)
	for name, tc := range map[string]struct {
		set  string
		want string
	}{
		"unknown backend":     {"backend=gpu", "value must be one of 'real', 'simulated'"},
		"unknown busy policy": {"agent.busyPolicy=kill", "busyPolicy"},
		"misspelt section":    {"webhok.mode=capacity", "webhok"},
		"misspelt key":        {"agent.busypolicy=evict", "busypolicy"},
		"unknown mode":        {"webhook.mode=fast", "mode"},
		"unknown certificate": {"certificates.mode=vault", "mode"},
		"relative state dir":  {"simulator.stateDir=sim", "stateDir"},
		"zero GPUs":           {"simulator.gpus[0].count=0", "count"},
		"misspelt monitoring": {"metrics.serviceMonitr.enabled=true", "serviceMonitr"},
		"runbooks not a URL":  {"metrics.prometheusRule.runbookBaseURL=docs/METRICS.md", "runbookBaseURL"},
		"a reader of no kind": {"metrics.readers[0].name=prometheus", "kind"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := run(t, helm, "template", "migflex", chartDir, "--kube-version", kubeVersion(t), "--set", tc.set)
			if err == nil {
				t.Fatalf("--set %s rendered:\n%s", tc.set, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("--set %s: %v\nwant an error mentioning %q", tc.set, err, tc.want)
			}
		})
	}
}

// The chart installs on the supported minors (hack/cluster/k8s/minors)
// and refuses the one before the oldest.
func TestHelmKubeVersion(t *testing.T) {
	helm := helmPath(t)
	minors := supportedMinors(t)
	for _, m := range minors {
		if _, err := run(t, helm, "template", "migflex", chartDir, "--kube-version", strings.TrimPrefix(m.release, "v")); err != nil {
			t.Errorf("rendering for %s: %v", m.release, err)
		}
	}
	older := fmt.Sprintf("1.%d.0", minors[0].n-1)
	_, err := run(t, helm, "template", "migflex", chartDir, "--kube-version", older)
	if err == nil || !strings.Contains(err.Error(), "incompatible with Kubernetes v"+older) {
		t.Fatalf("rendering for %s: %v, want the kubeVersion constraint to refuse", older, err)
	}
}

func TestHelmTemplate(t *testing.T) {
	helmPath(t)
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			objs := helmTemplate(t, s)
			for _, o := range objs {
				if ns := o.GetNamespace(); ns != "" && ns != namespace && !(o.GetKind() == "Role" || o.GetKind() == "RoleBinding") {
					t.Errorf("%s is outside the release namespace", key(o))
				}
			}
			agent := !slices.Contains(s.set, "agent.enabled=false")
			webhook := !slices.Contains(s.set, "webhook.enabled=false")
			if agent {
				checkAgent(t, s, objs)
			} else if n := len(objs.ofKind("DaemonSet")); n != 0 {
				t.Errorf("agent disabled, %d DaemonSets rendered", n)
			}
			if webhook {
				checkWebhook(t, s, objs)
			} else if objs.find("Deployment", "gpu-webhook") != nil || objs.find("MutatingWebhookConfiguration", "gpu-allocation-webhook") != nil {
				t.Error("webhook disabled, webhook objects rendered")
			}
			policy := objs.find("ValidatingAdmissionPolicy", "migflex-agent-node-scope")
			binding := objs.find("ValidatingAdmissionPolicyBinding", "migflex-agent-node-scope")
			if want := agent && !slices.Contains(s.set, "nodeScopePolicy.enabled=false"); (policy != nil) != want || (binding != nil) != want {
				t.Errorf("node-scope policy rendered %v, binding %v; want %v", policy != nil, binding != nil, want)
			}
		})
	}
}

func checkAgent(t *testing.T, s scenario, objs objects) {
	t.Helper()
	simulated := slices.Contains(s.set, "backend=simulated") || strings.Contains(s.values, "backend: simulated")

	role := get[rbacv1.ClusterRole](t, objs, "ClusterRole", "migflex-agent")
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}}}
	publish := !slices.Contains(s.set, "agent.publishAllocatable=false")
	if publish {
		wantRules = append(wantRules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}})
	}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Errorf("agent ClusterRole rules (-want +got):\n%s", diff)
	}
	for _, o := range objs.ofKind("DaemonSet") {
		ds := as[appsv1.DaemonSet](t, o)
		if off := slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--publish-allocatable=false"); off == publish {
			t.Errorf("%s: --publish-allocatable=false in its arguments %v, want %v", ds.Name, off, !publish)
		}
	}
	events := get[rbacv1.Role](t, objs, "Role", "migflex-agent-events")
	if events.Namespace != "default" {
		t.Errorf("the Events Role is in %q; Events about Nodes go to default", events.Namespace)
	}
	evict := objs.find("ClusterRole", "migflex-agent-evict")
	if wantEvict := slices.Contains(s.set, "agent.busyPolicy=evict"); (evict != nil) != wantEvict {
		t.Errorf("pods/eviction ClusterRole rendered %v, want %v (only with busyPolicy evict)", evict != nil, wantEvict)
	} else if wantEvict {
		r := as[rbacv1.ClusterRole](t, evict)
		if diff := cmp.Diff([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}}}, r.Rules); diff != "" {
			t.Errorf("evict rules (-want +got):\n%s", diff)
		}
	}

	dss := objs.ofKind("DaemonSet")
	pools := strings.Contains(s.values, "nodePools:")
	if pools {
		if diff := cmp.Diff([]string{"DaemonSet/gpu-webhook/migflex-agent-a100", "DaemonSet/gpu-webhook/migflex-agent-custom"}, dss.keys()); diff != "" {
			t.Fatalf("one DaemonSet per pool (-want +got):\n%s", diff)
		}
	} else if draNodes := s.name == "dra-nodes"; draNodes {
		if diff := cmp.Diff([]string{"DaemonSet/gpu-webhook/migflex-agent", "DaemonSet/gpu-webhook/migflex-agent-dra"}, dss.keys()); diff != "" {
			t.Fatalf("DaemonSets (-want +got):\n%s", diff)
		}
	} else if diff := cmp.Diff([]string{"DaemonSet/gpu-webhook/migflex-agent"}, dss.keys()); diff != "" {
		t.Fatalf("DaemonSets (-want +got):\n%s", diff)
	}
	for _, o := range dss {
		ds := as[appsv1.DaemonSet](t, o)
		checkAgentPod(t, s, objs, ds, simulated)
		checkAgentServing(t, s, ds)
	}
	checkDRAObjects(t, s, objs)
}

// checkAgentServing: each DaemonSet serves one way, and a DRA agent has
// the kubelet plugin's directories and the CDI directory at the host's
// paths; the main DaemonSet leaves agent.draNodeSelector's nodes to
// migflex-agent-dra.
func checkAgentServing(t *testing.T, s scenario, ds *appsv1.DaemonSet) {
	t.Helper()
	dra := s.name == "dra" || s.name == "dra-dynamic" || ds.Name == "migflex-agent-dra"
	c := ds.Spec.Template.Spec.Containers[0]
	var servings, modes []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--serving="); ok {
			servings = append(servings, v)
		}
		if v, ok := strings.CutPrefix(a, "--dra-mode="); ok {
			modes = append(modes, v)
		}
	}
	// Static is the default, left unsaid.
	var wantModes []string
	if s.name == "dra-dynamic" {
		wantModes = []string{"dynamic"}
	}
	if diff := cmp.Diff(wantModes, modes); diff != "" {
		t.Errorf("%s --dra-mode (-want +got):\n%s", ds.Name, diff)
	}
	want := "device-plugin"
	if dra {
		want = "dra"
	}
	if diff := cmp.Diff([]string{want}, servings); diff != "" {
		t.Errorf("%s --serving (-want +got):\n%s", ds.Name, diff)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for name, path := range map[string]string{"kubelet-plugins": "/var/lib/kubelet/plugins", "plugins-registry": "/var/lib/kubelet/plugins_registry", "cdi": "/var/run/cdi"} {
		if got := mounts[name] != "" && mounts[name] == hostPaths[name] && hostPaths[name] == path; got != dra {
			t.Errorf("%s: %s mounted at %q from host %q; want at %s exactly when serving through DRA (%v)", ds.Name, name, mounts[name], hostPaths[name], path, dra)
		}
	}
	if dra != slices.Contains(c.Args, "--cdi-dir=/var/run/cdi") {
		t.Errorf("%s args %q: --cdi-dir only and always under DRA", ds.Name, c.Args)
	}
	if s.name != "dra-nodes" {
		return
	}
	if ds.Name == "migflex-agent-dra" {
		if ds.Spec.Template.Spec.NodeSelector["migflex.io/serve"] != "dra" {
			t.Errorf("%s nodeSelector %v lacks agent.draNodeSelector", ds.Name, ds.Spec.Template.Spec.NodeSelector)
		}
		return
	}
	aff := ds.Spec.Template.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("%s: no required node affinity", ds.Name)
	}
	for _, term := range aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if !slices.ContainsFunc(term.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
			return e.Key == "migflex.io/serve" && e.Operator == corev1.NodeSelectorOpNotIn && slices.Equal(e.Values, []string{"dra"})
		}) {
			t.Errorf("%s: affinity term %v takes agent.draNodeSelector's nodes too", ds.Name, term)
		}
	}
}

// checkDRAObjects: the DRA permissions and the DeviceClasses come with
// DRA serving only; the classes are internal/domain/dra's generated file.
func checkDRAObjects(t *testing.T, s scenario, objs objects) {
	t.Helper()
	dra := s.name == "dra" || s.name == "dra-dynamic" || s.name == "dra-nodes"
	role := objs.find("ClusterRole", "migflex-agent-dra")
	classes := objs.ofKind("DeviceClass")
	if !dra && (objs.find("ValidatingAdmissionPolicy", "migflex-agent-slice-scope") != nil || objs.find("ValidatingAdmissionPolicyBinding", "migflex-agent-slice-scope") != nil) {
		t.Error("the slice-scope policy is rendered without DRA serving")
	}
	if (role != nil) != dra || (len(classes) > 0) != dra {
		t.Fatalf("DRA ClusterRole rendered %v, %d DeviceClasses; want both exactly when serving through DRA (%v)", role != nil, len(classes), dra)
	}
	if !dra {
		return
	}
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, ResourceNames: []string{"gpu.migflex.io"}, Verbs: []string{"associated-node:patch", "associated-node:update"}},
	}
	if diff := cmp.Diff(wantRules, as[rbacv1.ClusterRole](t, role).Rules); diff != "" {
		t.Errorf("DRA ClusterRole rules (-want +got):\n%s", diff)
	}
	if objs.find("ClusterRoleBinding", "migflex-agent-dra") == nil {
		t.Error("the DRA ClusterRole is not bound")
	}
	// The policy that limits those writes to the node's own slices
	// (TestAgentSliceScopePolicy) comes with them.
	if objs.find("ValidatingAdmissionPolicy", "migflex-agent-slice-scope") == nil || objs.find("ValidatingAdmissionPolicyBinding", "migflex-agent-slice-scope") == nil {
		t.Error("DRA permissions rendered without the slice-scope policy and its binding")
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deployments/dra/deviceclasses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := decode(t, data)
	if diff := cmp.Diff(want.keys(), classes.keys()); diff != "" {
		t.Errorf("the chart's DeviceClasses (+) are not deployments/dra/deviceclasses.yaml's (-):\n%s", diff)
	}
	for _, w := range want {
		got := classes.find("DeviceClass", w.GetName())
		if got == nil {
			continue
		}
		if diff := cmp.Diff(w.Object["spec"], got.Object["spec"]); diff != "" {
			t.Errorf("DeviceClass %s (-generated +chart):\n%s", w.GetName(), diff)
		}
	}
}

func checkAgentPod(t *testing.T, s scenario, objs objects, ds *appsv1.DaemonSet, simulated bool) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	if pod.ServiceAccountName != "migflex-agent" || pod.PriorityClassName != "system-node-critical" {
		t.Errorf("%s: serviceAccountName %q priorityClassName %q", ds.Name, pod.ServiceAccountName, pod.PriorityClassName)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers", ds.Name, len(pod.Containers))
	}
	c := pod.Containers[0]
	if diff := cmp.Diff([]string{"/device-plugin"}, c.Command); diff != "" {
		t.Errorf("%s command (-want +got):\n%s", ds.Name, diff)
	}
	nodeName := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "MIGFLEX_AGENT_NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	})
	if nodeName < 0 {
		t.Errorf("%s: no MIGFLEX_AGENT_NODE_NAME from the downward API's spec.nodeName", ds.Name)
	}
	// The kubelet's directories, never its socket files: the kubelet
	// re-creates kubelet.sock on restart, and a file mount would keep
	// pointing at the deleted one.
	hostPaths := map[string]corev1.HostPathVolumeSource{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = *v.HostPath
			if strings.HasSuffix(v.HostPath.Path, ".sock") {
				t.Errorf("%s mounts the socket file %s", ds.Name, v.HostPath.Path)
			}
		}
	}
	dir := corev1.HostPathDirectory
	for name, path := range map[string]string{"device-plugins": "/var/lib/kubelet/device-plugins", "pod-resources": "/var/lib/kubelet/pod-resources"} {
		if diff := cmp.Diff(corev1.HostPathVolumeSource{Path: path, Type: &dir}, hostPaths[name]); diff != "" {
			t.Errorf("%s volume %s (-want +got):\n%s", ds.Name, name, diff)
		}
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--device-plugin-dir=/var/lib/kubelet/device-plugins", "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"} {
		if !strings.Contains(args, want) {
			t.Errorf("%s args %q lack %s", ds.Name, c.Args, want)
		}
	}
	if slices.Contains(s.set, "agent.busyPolicy=evict") != strings.Contains(args, "--busy-policy=evict") {
		t.Errorf("%s args %q disagree with busyPolicy", ds.Name, c.Args)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: root filesystem not read-only", ds.Name)
	}
	// The image runs as a non-root user (the webhook's); the agent needs
	// root for the kubelet's directories whichever the backend.
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("%s: runAsUser %v, want 0", ds.Name, sc)
	}

	if !simulated {
		if sc == nil || sc.Privileged == nil || !*sc.Privileged {
			t.Errorf("%s: real backend not privileged: MIG partitioning needs it", ds.Name)
		}
		if env := envOf(c); env["MIGFLEX_AGENT_NVML_BACKEND"] != "real" {
			t.Errorf("%s env %v: want MIGFLEX_AGENT_NVML_BACKEND=real", ds.Name, env)
		}
		for _, env := range []string{"NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"} {
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == env && e.Value == "all" }) {
				t.Errorf("%s: no %s=all for the NVIDIA runtime", ds.Name, env)
			}
		}
		if pod.Affinity == nil || pod.Affinity.NodeAffinity == nil {
			t.Errorf("%s: real backend without the GPU-node affinity", ds.Name)
		}
		if slices.Contains(s.set, "agent.runtimeClassName=nvidia") {
			if pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" {
				t.Errorf("%s: runtimeClassName %v", ds.Name, pod.RuntimeClassName)
			}
			if !strings.Contains(args, "--driver-root=/run/nvidia/driver") {
				t.Errorf("%s args %q lack --driver-root", ds.Name, c.Args)
			}
		}
		return
	}

	if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: simulated backend should run without privilege or capabilities, got %+v", ds.Name, sc)
	}
	// Environment, so `device-plugin sim` run in the pod finds them too.
	if env := envOf(c); env["MIGFLEX_AGENT_NVML_BACKEND"] != "simulated" || env["MIGFLEX_AGENT_SIM_CONFIG"] != "/etc/migflex/sim/config.yaml" {
		t.Errorf("%s env %v: want MIGFLEX_AGENT_NVML_BACKEND=simulated and MIGFLEX_AGENT_SIM_CONFIG", ds.Name, env)
	}
	// The simulator config the agent reads must parse, and keep its state
	// on a hostPath so a layout survives agent restarts.
	var cmName string
	for _, v := range pod.Volumes {
		if v.Name == "sim-config" && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", cmName)
	cfg, err := sim.ParseConfig([]byte(cm.Data["config.yaml"]), "/etc/migflex/sim", "some-node")
	if err != nil {
		t.Fatalf("%s: the simulator rejects ConfigMap %s: %v\n%s", ds.Name, cmName, err, cm.Data["config.yaml"])
	}
	// Faults only where the values list them: off by default.
	wantFaults := 0
	if strings.Contains(s.values, "faults:") {
		wantFaults = 1
	}
	if len(cfg.Faults) != wantFaults {
		t.Errorf("%s: simulator faults %+v, want %d: only those of simulator.faults", ds.Name, cfg.Faults, wantFaults)
	}
	state := hostPaths["sim-state"]
	if state.Path == "" || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "sim-state" && m.MountPath == cfg.StateDir
	}) {
		t.Errorf("%s: stateDir %s is not a mounted hostPath (volume %+v, mounts %+v)", ds.Name, cfg.StateDir, state, c.VolumeMounts)
	}
	if strings.Contains(s.values, "nodePools:") {
		pool := ds.Spec.Template.Labels["migflex.io/agent-pool"]
		wantSel := map[string]string{"gpu": "yes", "migflex.io/pool": pool}
		if diff := cmp.Diff(wantSel, pod.NodeSelector); diff != "" {
			t.Errorf("%s nodeSelector (-want +got):\n%s", ds.Name, diff)
		}
		if ds.Spec.Selector.MatchLabels["migflex.io/agent-pool"] != pool {
			t.Errorf("%s selector %v does not tell the pools apart", ds.Name, ds.Spec.Selector.MatchLabels)
		}
		want := map[string]string{"a100": "A100-SXM4-40GB", "custom": "H100-PCIE-70GB"}[pool]
		if len(cfg.GPUs) != 1 || cfg.GPUs[0].Model != want || cfg.OperationDelay.String() != "250ms" {
			t.Errorf("%s simulates %+v (delay %s), want the pool's %s with 250ms", ds.Name, cfg.GPUs, cfg.OperationDelay, want)
		}
		if pool == "custom" {
			special, err := sim.ParseConfig([]byte(cm.Data["config.yaml"]), "/etc/migflex/sim", "special-node")
			if err != nil || len(special.GPUs) != 1 || special.GPUs[0].Model != "H200-SXM-141GB" {
				t.Errorf("per-node override in a pool: %+v, %v", special.GPUs, err)
			}
		}
		if !strings.Contains(args, "--config-file=/etc/migflex/mig-parted/config.yaml") {
			t.Errorf("%s args %q lack the mig-parted config", ds.Name, c.Args)
		}
	}
}

func checkWebhook(t *testing.T, s scenario, objs objects) {
	t.Helper()
	capacity := slices.Contains(s.set, "webhook.mode=capacity")
	certManager := slices.Contains(s.set, "certificates.mode=cert-manager")

	// The seed FAQ's names.
	d := get[appsv1.Deployment](t, objs, "Deployment", "gpu-webhook")
	if d.Namespace != "gpu-webhook" || d.Labels["app"] != "gpu-webhook" || d.Spec.Template.Labels["app"] != "gpu-webhook" {
		t.Errorf("Deployment %s/%s labels %v, pod labels %v: the FAQ's `kubectl logs -n gpu-webhook -l app=gpu-webhook` must find it",
			d.Namespace, d.Name, d.Labels, d.Spec.Template.Labels)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("webhook pod securityContext %+v: must run as a non-root user", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("webhook container securityContext %+v: read-only root, no privilege escalation", sc)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("webhook probes: readiness %+v liveness %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("webhook resources %+v", c.Resources)
	}
	args := strings.Join(c.Args, " ")
	wantMode := "--mode=existence"
	if capacity {
		wantMode = "--mode=capacity"
	}
	if !strings.Contains(args, wantMode) {
		t.Errorf("webhook args %q lack %s", c.Args, wantMode)
	}
	var secret string
	for _, v := range pod.Volumes {
		if v.Name == "certs" && v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	if secret != "gpu-webhook-tls" {
		t.Errorf("webhook mounts Secret %q, want gpu-webhook-tls", secret)
	}
	if strings.Contains(s.values, "FallbackPolicy") {
		cm := get[corev1.ConfigMap](t, objs, "ConfigMap", "gpu-webhook-policy")
		if _, err := fallback.ParsePolicy([]byte(cm.Data["policy.yaml"])); err != nil {
			t.Errorf("the webhook rejects the rendered FallbackPolicy: %v\n%s", err, cm.Data["policy.yaml"])
		}
		if !strings.Contains(args, "--config=/etc/webhook/policy/policy.yaml") {
			t.Errorf("webhook args %q lack --config", c.Args)
		}
	}

	pdb := get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", "gpu-webhook")
	if pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels["app"] != "gpu-webhook" {
		t.Errorf("PDB selector %v", pdb.Spec.Selector)
	}
	svc := get[corev1.Service](t, objs, "Service", "gpu-webhook")
	// On the host network the port is not declared (see hitlessRollout):
	// the Service names its number.
	wantTarget := intstr.FromString("https")
	if slices.Contains(s.set, "webhook.hostNetwork=true") {
		wantTarget = intstr.FromInt32(9443)
	}
	if svc.Spec.Selector["app"] != "gpu-webhook" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort != wantTarget {
		t.Errorf("Service %+v", svc.Spec)
	}

	// Informers list and watch; nothing gets one object.
	role := get[rbacv1.ClusterRole](t, objs, "ClusterRole", "gpu-webhook")
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices", "deviceclasses"}, Verbs: []string{"list", "watch"}},
	}
	if capacity {
		want = append(want,
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"list", "watch"}})
	}
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("webhook ClusterRole: list and watch, pods and claims only in capacity mode (-want +got):\n%s", diff)
	}

	mwc := get[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "gpu-allocation-webhook")
	checkWebhookConfiguration(t, mwc)

	if certManager {
		checkCertManager(t, s, objs, mwc)
		if n := len(objs.ofKind("Job")); n != 0 {
			t.Errorf("cert-manager mode renders %d certgen Jobs", n)
		}
		return
	}
	if objs.find("Certificate", "gpu-webhook") != nil {
		t.Error("certgen mode renders a cert-manager Certificate")
	}
	if _, ok := mwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Error("certgen mode asks cert-manager to inject the CA")
	}
	pre := get[batchv1.Job](t, objs, "Job", "migflex-certgen-pre")
	post := get[batchv1.Job](t, objs, "Job", "migflex-certgen-post")
	if pre.Annotations["helm.sh/hook"] != "pre-install,pre-upgrade" || post.Annotations["helm.sh/hook"] != "post-install,post-upgrade" {
		t.Errorf("certgen hooks: pre %q post %q", pre.Annotations["helm.sh/hook"], post.Annotations["helm.sh/hook"])
	}
	preOpts := certgenOptions(t, pre)
	postOpts := certgenOptions(t, post)
	if preOpts.WebhookConfigName != "" {
		t.Errorf("the pre-install Job patches %q, which does not exist yet", preOpts.WebhookConfigName)
	}
	if postOpts.WebhookConfigName != mwc.Name || postOpts.SecretName != secret || postOpts.ServiceName != svc.Name ||
		preOpts.SecretName != secret || preOpts.ServiceName != svc.Name {
		t.Errorf("certgen options pre %+v post %+v do not name the webhook's Secret %s, Service %s and configuration %s",
			preOpts, postOpts, secret, svc.Name, mwc.Name)
	}
	// Every hook the Jobs need exists while they run: their RBAC is a hook
	// of all four phases, created before them (lower weight).
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} {
		o := objs.find(kind, "migflex-certgen")
		if o == nil {
			t.Errorf("no certgen %s", kind)
			continue
		}
		a := o.GetAnnotations()
		if a["helm.sh/hook"] != "pre-install,pre-upgrade,post-install,post-upgrade" || a["helm.sh/hook-weight"] != "-10" {
			t.Errorf("certgen %s hook annotations %v", kind, a)
		}
	}
}

func checkWebhookConfiguration(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("%d webhooks", len(mwc.Webhooks))
	}
	wh := mwc.Webhooks[0]
	ref := wh.ClientConfig.Service
	if ref == nil || ref.Namespace != namespace || ref.Name != "gpu-webhook" || ref.Path == nil || *ref.Path != "/mutate" {
		t.Errorf("clientConfig %+v", wh.ClientConfig)
	}
	if len(wh.ClientConfig.CABundle) != 0 {
		t.Error("a caBundle in the template would overwrite the injected one on every upgrade")
	}
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore ||
		wh.TimeoutSeconds == nil || *wh.TimeoutSeconds != 5 ||
		wh.SideEffects == nil || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone ||
		!slices.Equal(wh.AdmissionReviewVersions, []string{"v1"}) ||
		wh.ReinvocationPolicy == nil || *wh.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Errorf("webhook settings: failurePolicy %v timeout %v sideEffects %v versions %v reinvocation %v",
			wh.FailurePolicy, wh.TimeoutSeconds, wh.SideEffects, wh.AdmissionReviewVersions, wh.ReinvocationPolicy)
	}
	wantRules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: ptr(admissionregistrationv1.NamespacedScope)},
	}}
	if diff := cmp.Diff(wantRules, wh.Rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	ns := wh.NamespaceSelector
	if ns == nil || !slices.ContainsFunc(ns.MatchExpressions, func(e metav1.LabelSelectorRequirement) bool {
		return e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" && slices.Contains(e.Values, namespace) && slices.Contains(e.Values, "kube-system")
	}) {
		t.Errorf("namespaceSelector %+v must exclude %s and kube-system", ns, namespace)
	}
	optOut := func(e metav1.LabelSelectorRequirement) bool {
		return e.Key == "migflex.io/fallback" && e.Operator == "NotIn" && slices.Equal(e.Values, []string{"disabled"})
	}
	if ns == nil || !slices.ContainsFunc(ns.MatchExpressions, optOut) {
		t.Errorf("namespaceSelector %+v lacks the migflex.io/fallback=disabled opt-out", ns)
	}
	if wh.ObjectSelector == nil || !slices.ContainsFunc(wh.ObjectSelector.MatchExpressions, optOut) {
		t.Errorf("objectSelector %+v lacks the migflex.io/fallback=disabled opt-out", wh.ObjectSelector)
	}
	if len(wh.MatchConditions) != 1 {
		t.Errorf("matchConditions %+v, want the NVIDIA-resources condition", wh.MatchConditions)
	}
}

func checkCertManager(t *testing.T, s scenario, objs objects, mwc *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	cert := objs.find("Certificate", "gpu-webhook")
	if cert == nil {
		t.Fatal("cert-manager mode without a Certificate")
	}
	if got, want := mwc.Annotations["cert-manager.io/inject-ca-from"], cert.GetNamespace()+"/"+cert.GetName(); got != want {
		t.Errorf("inject-ca-from %q, want the Certificate %s", got, want)
	}
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	if secret != "gpu-webhook-tls" {
		t.Errorf("Certificate secretName %q", secret)
	}
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if !slices.Contains(dns, "gpu-webhook.gpu-webhook.svc") {
		t.Errorf("Certificate dnsNames %v lack the name the API server dials", dns)
	}
	issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	issuerKind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
	if slices.Contains(s.set, "certificates.certManager.issuerRef.name=corp-ca") {
		if issuerName != "corp-ca" || issuerKind != "ClusterIssuer" || objs.find("Issuer", "gpu-webhook-selfsigned") != nil {
			t.Errorf("issuerRef %s/%s; a given issuer must be used, and no Issuer made", issuerKind, issuerName)
		}
		return
	}
	if issuerName != "gpu-webhook-selfsigned" || issuerKind != "Issuer" || objs.find("Issuer", "gpu-webhook-selfsigned") == nil {
		t.Errorf("issuerRef %s/%s, want the chart's self-signed Issuer", issuerKind, issuerName)
	}
}

func ptr[T any](v T) *T { return &v }

// certgenOptions parses a certgen Job's arguments with the flags `webhook
// certgen` registers, so a misspelt flag or a bad duration fails here and
// not in a cluster. $(POD_NAMESPACE) is what the kubelet substitutes.
func certgenOptions(t *testing.T, job *batchv1.Job) certgen.Options {
	t.Helper()
	c := job.Spec.Template.Spec.Containers[0]
	if diff := cmp.Diff([]string{"/webhook", "certgen"}, c.Command); diff != "" {
		t.Errorf("%s command (-want +got):\n%s", job.Name, diff)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}) {
		t.Errorf("%s: no POD_NAMESPACE from the downward API for --namespace=$(POD_NAMESPACE)", job.Name)
	}
	var o certgen.Options
	f := cli.New("certgen", "certgen")
	f.SetOutput(io.Discard)
	certgen.RegisterFlags(f, &o)
	if err := f.Parse(c.Args, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatalf("%s args %q: %v", job.Name, c.Args, err)
	}
	if o.Namespace != "$(POD_NAMESPACE)" {
		t.Errorf("%s --namespace=%q, want $(POD_NAMESPACE)", job.Name, o.Namespace)
	}
	return o
}

// envOf is a container's literal environment.
func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// The chart works in any namespace, but the documentation's and the seeds'
// FAQ commands name gpu-webhook: NOTES.txt says so when the release is
// elsewhere. helm template leaves NOTES.txt out, so a copy of the chart
// renders the notes' template (migflex.notes) into a ConfigMap.
func TestHelmNotesWarnAboutTheNamespace(t *testing.T) {
	helm := helmPath(t)
	chart := filepath.Join(t.TempDir(), "migflex")
	if err := os.CopyFS(chart, os.DirFS(filepath.Join(repoRoot(t), chartDir))); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(chart, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(notes)) != `{{- include "migflex.notes" . }}` {
		t.Fatalf("NOTES.txt is %q, want only the migflex.notes template, which this test renders", notes)
	}
	probe := `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "notes"}, "data": {"notes": {{ include "migflex.notes" . | toJson }}}}`
	if err := os.WriteFile(filepath.Join(chart, "templates", "notes-probe.yaml"), []byte(probe), 0o600); err != nil {
		t.Fatal(err)
	}
	render := func(ns string) string {
		out, err := run(t, helm, "template", "migflex", chart, "--namespace", ns, "--kube-version", kubeVersion(t), "--show-only", "templates/notes-probe.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return as[corev1.ConfigMap](t, decode(t, out)[0]).Data["notes"]
	}
	const warning = "WARNING: migflex is installed in namespace"
	if got := render(namespace); strings.Contains(got, warning) || !strings.Contains(got, "kubectl logs -n gpu-webhook -l app=gpu-webhook") {
		t.Errorf("notes in %s:\n%s\nwant no namespace warning", namespace, got)
	}
	got := render("gpu")
	for _, want := range []string{warning + " gpu, not gpu-webhook", "-n gpu", "kubectl logs -n gpu -l app=gpu-webhook"} {
		if !strings.Contains(got, want) {
			t.Errorf("notes in namespace gpu:\n%s\nwant %q", got, want)
		}
	}
}

// The image is built for amd64 and arm64 (the Dockerfile): every pod the
// chart makes, in every scenario, may run on a node of either and on no
// other, each of its required node-affinity terms saying so, unless the
// values replace that workload's affinity.
func TestHelmPodsRequireTheImagesArchitectures(t *testing.T) {
	want := corev1.NodeSelectorRequirement{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64", "arm64"}}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			pods := 0
			for _, o := range helmTemplate(t, s) {
				var spec *corev1.PodSpec
				switch o.GetKind() {
				case "DaemonSet":
					spec = &as[appsv1.DaemonSet](t, o).Spec.Template.Spec
				case "Deployment":
					spec = &as[appsv1.Deployment](t, o).Spec.Template.Spec
				case "Job":
					spec = &as[batchv1.Job](t, o).Spec.Template.Spec
				default:
					continue
				}
				pods++
				if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
					t.Errorf("%s: no required node affinity", key(o))
					continue
				}
				for i, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
					if !slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
						return cmp.Equal(r, want)
					}) {
						t.Errorf("%s: node-affinity term %d %v lacks %v", key(o), i, term.MatchExpressions, want)
					}
				}
			}
			if pods == 0 {
				t.Fatal("rendered no pod templates")
			}
		})
	}
}
