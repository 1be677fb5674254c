package planner

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/dra"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// labelNode adds labels to a Node, as an administrator (or the agent, for
// the serving label) would.
func (e *env) labelNode(name string, labels map[string]string) {
	e.t.Helper()
	n := e.getNode(name)
	for k, v := range labels {
		n.Labels[k] = v
	}
	if _, err := e.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{FieldManager: "admin"}); err != nil {
		e.t.Fatal(err)
	}
}

// claimPod creates a pod whose only GPU is a ResourceClaim from template,
// pinned to a pool by a node selector, and marks it unschedulable.
func (e *env) claimPod(name, template, pool string) *corev1.Pod {
	e.t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{"pool": pool},
			Containers:     []corev1.Container{{Name: "c", Image: "example.com/x:1", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
		},
	}
	created, err := e.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	created.Status.Phase = corev1.PodPending
	created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.Now()}}
	updated, err := e.client.CoreV1().Pods("default").UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return updated
}

func (e *env) claimTemplate(name string, class string, exprs ...string) {
	e.t.Helper()
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	for _, x := range exprs {
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: x}})
	}
	t := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}}}
	if _, err := e.client.ResourceV1().ResourceClaimTemplates("default").Create(context.Background(), t, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// dra1gSlice publishes a DRA node's seven 1g.10gb devices, as its agent
// does: no 3g.40gb among them.
func (e *env) dra1gSlice(node string) {
	e.t.Helper()
	var devs []resourceapi.Device
	for i := range 7 {
		devs = append(devs, dra.APIDevice(dra.Device{Name: fmt.Sprintf("gpu-0-mig-1g10gb-19-%d", i), UUID: fmt.Sprintf("MIG-0-%d", i),
			MIG: true, Profile: "1g.10gb", ProfileID: 19, GPUUUID: "GPU-0", Model: h100, Start: i, Size: 1, MemoryMB: 9856}))
	}
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.migflex.io"},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: devs}}
	if _, err := e.client.ResourceV1().ResourceSlices().Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// The planner reshapes a DRA node for a pod whose ResourceClaim selects a
// profile the node's slice lacks, and keeps a pod asking for a resource
// no DeviceClass of ours serves off DRA nodes.
func TestControllerDRA(t *testing.T) {
	e := startEnv(t)
	classes, err := dra.DeviceClasses([]string{"1g.10gb", "3g.40gb"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range classes {
		if _, err := e.client.ResourceV1().DeviceClasses().Create(context.Background(), &classes[i], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Each case has a pool of a DRA node and a device-plugin node, both
	// opted in with seven free 1g.10gb; the DRA node's name sorts first.
	pool := func(p string) (string, string) {
		d, dp := p+"-a-dra", p+"-b-dp"
		e.node(d, simGPU(0, all1g...))
		e.labelNode(d, map[string]string{"pool": p, nodeinfo.LabelServing: nodeinfo.ServingDRA})
		e.dra1gSlice(d)
		e.node(dp, simGPU(0, all1g...))
		e.labelNode(dp, map[string]string{"pool": p, nodeinfo.LabelServing: nodeinfo.ServingDevicePlugin})
		return d, dp
	}
	config := func(name string) string { return e.getNode(name).Annotations[nodeinfo.AnnotationMigConfig] }

	t.Run("a claim selecting 3g.40gb by CEL reshapes the DRA node", func(t *testing.T) {
		d, dp := pool("claim")
		e.claimTemplate("by-cel", dra.ClassMIG, `device.attributes["gpu.migflex.io"].profile == "3g.40gb"`)
		e.start(t)
		pod := e.claimPod("claim-3g", "by-cel", "claim")
		n := e.waitNode(d, "the planner's mig.config", func(n *corev1.Node) bool { return n.Annotations[nodeinfo.AnnotationMigConfig] != "" })
		if !strings.Contains(n.Annotations[nodeinfo.AnnotationMigConfig], `"3g.40gb": 1`) {
			t.Errorf("mig.config %q, want a 3g.40gb", n.Annotations[nodeinfo.AnnotationMigConfig])
		}
		e.waitEvent(pod, ReasonPlanned, "will run on node "+d+": GPU 0 repartitioned 7x1g.10gb ->", "3g.40gb")
		if got := config(dp); got != "" {
			t.Errorf("the device-plugin node, which cannot serve the claim, got mig.config %q", got)
		}
	})

	t.Run("a resource no class serves stays off DRA nodes", func(t *testing.T) {
		d, dp := pool("ext")
		e.start(t)
		pod := e.pendingPodOn("ext-7g", mig7g, map[string]string{"pool": "ext"})
		e.waitNode(dp, "the planner's mig.config with 7g.80gb", func(n *corev1.Node) bool {
			return strings.Contains(n.Annotations[nodeinfo.AnnotationMigConfig], `"7g.80gb": 1`)
		})
		e.waitEvent(pod, ReasonPlanned, "will run on node "+dp)
		if got := config(d); got != "" {
			t.Errorf("the DRA node, where no class serves nvidia.com/mig-7g.80gb, got mig.config %q", got)
		}
	})

	t.Run("a claim the planner cannot read is said so and left alone", func(t *testing.T) {
		d, _ := pool("unread")
		e.claimTemplate("by-memory", dra.ClassMIG, `device.capacity["gpu.migflex.io"].memory.compareTo(quantity("40Gi")) >= 0`)
		e.start(t)
		pod := e.claimPod("unread-mem", "by-memory", "unread")
		e.waitEvent(pod, ReasonClaimUnread, "claim gpu request gpu: selector `device.capacity[\"gpu.migflex.io\"].memory.compareTo(quantity(\"40Gi\")) >= 0` is not of the forms migflex reads")
		if got := config(d); got != "" {
			t.Errorf("mig.config %q for a claim the planner cannot read", got)
		}
	})

	// Issue 35: a selector the API server accepts and the scheduler finds
	// no device for, without an error (a string compared with an int is
	// false): the Event says so, with the selector.
	t.Run("a profile compared with an int is said false on every device", func(t *testing.T) {
		d, _ := pool("int")
		e.claimTemplate("int-profile", dra.ClassMIG, `device.attributes["gpu.migflex.io"].profile == 3`)
		e.start(t)
		pod := e.claimPod("unread-int", "int-profile", "int")
		e.waitEvent(pod, ReasonClaimUnread, "claim gpu request gpu: `device.attributes[\"gpu.migflex.io\"].profile == 3`: profile == 3 is false on every device")
		if got := config(d); got != "" {
			t.Errorf("mig.config %q for a claim the planner cannot read", got)
		}
	})
}
