//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/test/e2e/framework"
)

const (
	// labelSharingConfig is NVIDIA's config manager's label, which picks
	// a node's config among the --sharing-config directory's.
	labelSharingConfig = "nvidia.com/device-plugin.config"
	sharingConfigMap   = "migflex-sharing-e2e"
	sharingMount       = "/etc/migflex/sharing"
	resource1g         = "nvidia.com/mig-1g.10gb"
)

// sharingConfigs are the test's NVIDIA device plugin configs, as a user
// writes them for NVIDIA's plugin.
var sharingConfigs = map[string]string{
	"default": "version: v1\n",
	"ts-1g": `version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/mig-1g.10gb
      replicas: 2
`,
}

// TestSharingTimeSliced: node 1 shares its one 1g.10gb instance between
// two pods, time-sliced with two replicas, as NVIDIA's device plugin does:
// the agent reads an NVIDIA config from a mounted ConfigMap, picked by the
// node's nvidia.com/device-plugin.config label; the kubelet gets replicas
// <uuid>::0 and <uuid>::1, the Node GPU feature discovery's sharing
// labels, both pods, left as asked by the webhook, run at once with the
// instance's UUID in their environment, the layout annotation names both
// as its users and counts both replicas in use, as kubectl migflex status
// does, and a reader of the kubelet's pod-resources API that maps device
// IDs to GPUs as dcgm-exporter does finds each pod's MIG UUID.
func TestSharingTimeSliced(t *testing.T) {
	migflex(t)
	ctx := t.Context()
	// One 1g.10gb on the whole node, so the two pods can only share it.
	_, layout := applyLayouts(t, gpuLayouts{0: {"1g.10gb", "3g.40gb"}, 1: {"7g.80gb"}})
	uuids := uuidsOf(layout, "1g.10gb")
	if len(uuids) != 1 {
		t.Fatalf("layout has 1g.10gb devices %v, want one", uuids)
	}
	shared := uuids[0]

	enableSharing(t, "ts-1g")
	node, err := cluster.WaitForNode(ctx, "two replicas of the 1g.10gb in the allocatable, with GFD's sharing labels", timeout, func(n *corev1.Node) error {
		q := n.Status.Allocatable[corev1.ResourceName(resource1g)]
		if got := q.Value(); got != 2 {
			return fmt.Errorf("allocatable %s %d", resource1g, got)
		}
		if r, s := n.Labels[resource1g+".replicas"], n.Labels[resource1g+".sharing-strategy"]; r != "2" || s != "time-slicing" {
			return fmt.Errorf("labels replicas=%q sharing-strategy=%q", r, s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := node.Labels["nvidia.com/mig-3g.40gb.sharing-strategy"]; s != "none" {
		t.Errorf("nvidia.com/mig-3g.40gb.sharing-strategy=%q, want none for a resource the config does not share", s)
	}
	held, err := framework.KubeletDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{shared + "::0", shared + "::1"}; !slices.Equal(held[resource1g], want) {
		t.Errorf("the kubelet holds %s %v, want the replicas %v", resource1g, held[resource1g], want)
	}

	ns := cluster.Namespace(t)
	pods := []string{"share-a", "share-b"}
	for _, name := range pods {
		// Through the webhook: it counts the replicas the allocatable
		// shows and leaves the request as asked.
		cluster.CreatePod(t, gpuPod(ns, name, resource1g, 1, "sleep", "3600"))
	}
	for _, name := range pods {
		p, err := cluster.WaitForPodPhase(ctx, ns, name, corev1.PodRunning)
		if err != nil {
			t.Fatal(err)
		}
		if rw, ok := p.Annotations[annotationFallback]; ok {
			t.Errorf("pod %s was rewritten (%s) while a replica of %s was free", name, rw, resource1g)
		}
		out, err := cluster.Kubectl(ctx, "exec", "-n", ns, name, "--", "/testbox", "env")
		if err != nil {
			t.Fatalf("env of pod %s: %v\n%s", name, err, out)
		}
		if got := envOf(out)["NVIDIA_VISIBLE_DEVICES"]; got != shared {
			t.Errorf("pod %s has NVIDIA_VISIBLE_DEVICES=%q, want the shared instance %s", name, got, shared)
		}
	}

	// What an exporter reading the kubelet's pod-resources API finds.
	all, err := cluster.Local().KubeletAllPodDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, name := range pods {
		devs := all[ns+"/"+name][resource1g]
		if len(devs) != 1 {
			t.Fatalf("the kubelet says pod %s holds %v, want one %s", name, all[ns+"/"+name], resource1g)
		}
		ids = append(ids, devs[0])
	}
	if ids[0] == ids[1] {
		t.Errorf("both pods hold device %s, want a replica each", ids[0])
	}
	byDevice := podsByGPUDevice(all)
	if got, want := byDevice[shared], []string{ns + "/share-a", ns + "/share-b"}; !slices.Equal(got, want) {
		t.Errorf("pods mapped to %s from the pod-resources device IDs %v: %v, want %v", shared, ids, got, want)
	}

	// The layout annotation names both pods as the instance's users, and
	// counts its replicas as the allocatable does: both in use.
	if _, err := cluster.WaitForNode(ctx, "both pods as the shared instance's users, its two replicas in use", timeout, func(n *corev1.Node) error {
		in := instanceOf(n, shared)
		if want := []string{ns + "/share-a", ns + "/share-b"}; !slices.Equal(in.UsedBy, want) {
			return fmt.Errorf("usedBy %v", in.UsedBy)
		}
		if want := (nodeinfo.Shared{Resource: resource1g, Replicas: 2, InUse: 2}); in.Shared == nil || *in.Shared != want {
			return fmt.Errorf("shared %+v, want %+v", in.Shared, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// kubectl migflex counts the replicas as the allocatable does: two,
	// none free.
	code, out, errOut := migflexPlugin(t, "status", cluster.NodeName, "-o", "json")
	if code != 0 {
		t.Fatalf("status -o json: exit %d: %s", code, errOut)
	}
	var st pluginStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	counted := false
	for _, c := range st.Free {
		if c.Resource == resource1g {
			counted = c.Free == 0 && c.Total == 2
		}
	}
	if !counted {
		t.Errorf("kubectl migflex status counts %+v, want %s 0 free of 2 replicas", st.Free, resource1g)
	}
}

// podsByGPUDevice maps pods to the GPU or MIG device each holds, from the
// kubelet's pod-resources List (all, as KubeletAllPodDevices gives it),
// the way dcgm-exporter's pod mapper reads it (NVIDIA/dcgm-exporter,
// internal/pkg/transformation/kubernetes.go): only nvidia.com/gpu and
// nvidia.com/mig-* resources, and a shared device's replica ID
// "<id>::<n>" counts for device <id>, the part before the separator.
func podsByGPUDevice(all map[string]map[string][]string) map[string][]string {
	out := map[string][]string{}
	for pod, byRes := range all {
		for res, ids := range byRes {
			if res != "nvidia.com/gpu" && !strings.HasPrefix(res, "nvidia.com/mig-") {
				continue
			}
			for _, id := range ids {
				dev, _, _ := strings.Cut(id, "::")
				if !slices.Contains(out[dev], pod) {
					out[dev] = append(out[dev], pod)
				}
			}
		}
	}
	for _, pods := range out {
		slices.Sort(pods)
	}
	return out
}

// instanceOf is the instance with this UUID in the node's layout
// annotation.
func instanceOf(n *corev1.Node, uuid string) nodeinfo.Instance {
	l, err := nodeinfo.ParseLayout(n.Annotations[nodeinfo.AnnotationLayout])
	if err != nil {
		return nodeinfo.Instance{UsedBy: []string{"unreadable: " + err.Error()}}
	}
	for _, g := range l {
		for _, in := range g.Instances {
			if in.UUID == uuid {
				return in
			}
		}
	}
	return nodeinfo.Instance{}
}

// enableSharing labels node 1 with config, gives the device-plugin agent
// DaemonSet the test's configs (a ConfigMap mounted at --sharing-config)
// and waits for its rollout; cleanup undoes it all and waits until node
// 1 serves whole devices again.
func enableSharing(t *testing.T, config string) {
	t.Helper()
	ctx := t.Context()
	cms := cluster.Client.CoreV1().ConfigMaps(framework.MigflexNamespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: sharingConfigMap}, Data: sharingConfigs}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setSharingLabel(t, config)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
		defer cancel()
		setSharingLabel(t, "")
		if err := setSharingMount(ctx, false); err != nil {
			t.Errorf("removing --sharing-config from the agent: %v", err)
		}
		if err := cms.Delete(ctx, sharingConfigMap, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ConfigMap %s: %v", sharingConfigMap, err)
		}
		if _, err := cluster.WaitForNode(ctx, "node 1 without sharing labels", timeout, func(n *corev1.Node) error {
			for k := range n.Labels {
				if strings.HasSuffix(k, ".replicas") || strings.HasSuffix(k, ".sharing-strategy") {
					return fmt.Errorf("label %s", k)
				}
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	})
	if err := setSharingMount(ctx, true); err != nil {
		t.Fatal(err)
	}
}

// setSharingMount adds (or removes) --sharing-config and its ConfigMap
// to the device-plugin agent DaemonSet and waits for the rollout.
func setSharingMount(ctx context.Context, on bool) error {
	dss := cluster.Client.AppsV1().DaemonSets(framework.MigflexNamespace)
	ds, err := dss.Get(ctx, framework.AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		return err
	}
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--sharing-config=") })
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "sharing-config" })
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "sharing-config" })
	if on {
		c.Args = append(c.Args, "--sharing-config="+sharingMount)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "sharing-config", MountPath: sharingMount, ReadOnly: true})
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "sharing-config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: sharingConfigMap}},
		}})
	}
	if _, err := dss.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return cluster.WaitForDaemonSetRollout(ctx, framework.MigflexNamespace, framework.AgentDaemonSet)
}

// setSharingLabel sets node 1's nvidia.com/device-plugin.config label; ""
// removes it.
func setSharingLabel(t *testing.T, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := []byte(`{"metadata":{"labels":{"` + labelSharingConfig + `":` + v + `}}}`)
	// Not t.Context(): this also runs in cleanup.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cluster.Client.CoreV1().Nodes().Patch(ctx, cluster.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling node %s %s=%s: %v", cluster.NodeName, labelSharingConfig, value, err)
	}
}
