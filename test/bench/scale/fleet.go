package scale

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
)

// The fleet: opted-in nodes of eight H100s each, whose agent reports
// success, with a layout and pods on it that leave the planner work:
//
//   - kind "small" (half the nodes): GPUs 0-6 in seven 1g.10gb, the first
//     two in use, so a 3g.40gb fits at slice 4 after a reshape; GPU 7 in
//     seven free 1g.10gb, which can become anything.
//   - kind "mixed" (three in ten): 3g.40gb (in use) + four free 1g.10gb.
//   - kind "whole" (one in five): 7g.80gb, in use.
//
// No node offers a 4g.40gb, so the webhook's reshape-first check decides
// those pods.
const (
	model = "H100-SXM5-80GB"
	gpus  = 8
)

// Pod resources of the mix.
var (
	mig3g = resourcename.MIG("3g.40gb")
	mig4g = resourcename.MIG("4g.40gb")
	mig7g = resourcename.MIG("7g.80gb")
)

type kind int

const (
	kindSmall kind = iota
	kindMixed
	kindWhole
)

// kindOf spreads the kinds over the fleet, one in ten at a time.
func kindOf(i int) kind {
	switch i % 10 {
	case 0, 1, 2, 3, 4:
		return kindSmall
	case 5, 6, 7:
		return kindMixed
	}
	return kindWhole
}

// NodeName is the name of node i.
func NodeName(i int) string { return fmt.Sprintf("gpu-%05d", i) }

// gpusOf is node i's GPUs as the agent's backend reads them, and the pods
// holding devices (device UUID -> pods); generation changes the pods'
// names, as agents reporting new pods would.
func gpusOf(i, generation int) ([]mig.GPU, map[string][]string, error) {
	m, ok := gpumodel.Lookup(model)
	if !ok {
		return nil, nil, fmt.Errorf("no built-in GPU model %s", model)
	}
	profiles := m.MIGProfiles()
	inUse := map[string][]string{}
	out := make([]mig.GPU, 0, gpus)
	for g := range gpus {
		gpu := mig.GPU{Index: g, UUID: fmt.Sprintf("GPU-%05d-%d", i, g), Model: model, MigCapable: true, MigEnabled: true, MigPending: true,
			MemoryMiB: 81559, Minor: g, Profiles: profiles}
		add := func(profile string, start, size int, busy bool) {
			id := uint32(len(gpu.Instances) + 1)
			in := mig.Instance{Profile: profile, Start: start, Size: size, GIID: id, CIID: 0, HasCI: true,
				UUID: fmt.Sprintf("MIG-%05d-%d-%d", i, g, start)}
			gpu.Instances = append(gpu.Instances, in)
			if busy {
				inUse[in.UUID] = []string{fmt.Sprintf("running/gen%d-%s-%d-%d", generation, NodeName(i), g, start)}
			}
		}
		switch kindOf(i) {
		case kindSmall:
			for s := range 7 {
				add("1g.10gb", s, 1, g < 7 && s < 2)
			}
		case kindMixed:
			add("3g.40gb", 0, 4, true)
			for s := 4; s < 8; s++ {
				add("1g.10gb", s, 1, false)
			}
		case kindWhole:
			add("7g.80gb", 0, 8, true)
		}
		out = append(out, gpu)
	}
	return out, inUse, nil
}

// Annotations are node i's layout and profiles annotations, as its agent
// writes them (the nodeinfo encoders the agent uses).
func Annotations(i, generation int) (map[string]string, corev1.ResourceList, error) {
	gs, inUse, err := gpusOf(i, generation)
	if err != nil {
		return nil, nil, err
	}
	served := map[string]bool{}
	devices := corev1.ResourceList{}
	for _, g := range gs {
		for _, in := range g.Instances {
			served[in.UUID] = true
			r := resourcename.MIG(in.Profile)
			q := devices[r]
			q.Add(*resource.NewQuantity(1, resource.DecimalSI))
			devices[r] = q
		}
	}
	layout, err := nodeinfo.EncodeLayout(gs, served, inUse, nil)
	if err != nil {
		return nil, nil, err
	}
	profiles, err := nodeinfo.EncodeProfiles(gs)
	if err != nil {
		return nil, nil, err
	}
	return map[string]string{nodeinfo.AnnotationLayout: layout, nodeinfo.AnnotationProfiles: profiles}, devices, nil
}

// Node is node i, opted in to the planner, as its kubelet registers it
// and its agent labels and annotates it.
func Node(i int) (*corev1.Node, error) {
	ann, _, err := Annotations(i, 0)
	if err != nil {
		return nil, err
	}
	name := NodeName(i)
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			corev1.LabelHostname:         name,
			corev1.LabelOSStable:         "linux",
			corev1.LabelArchStable:       "amd64",
			corev1.LabelTopologyZone:     fmt.Sprintf("zone-%c", 'a'+i%3),
			nodeinfo.LabelPlanner:        nodeinfo.PlannerEnabled,
			nodeinfo.LabelMigConfigState: nodeinfo.StateSuccess,
			"nvidia.com/gpu.product":     "NVIDIA-H100-80GB-HBM3",
		},
		Annotations: ann,
	}}, nil
}

// Status is node i's status: Ready, with its MIG devices allocatable.
func Status(i int) (corev1.NodeStatus, error) {
	_, devices, err := Annotations(i, 0)
	if err != nil {
		return corev1.NodeStatus{}, err
	}
	q := resource.MustParse
	alloc := corev1.ResourceList{corev1.ResourceCPU: q("190"), corev1.ResourceMemory: q("2000Gi"), corev1.ResourcePods: q("110")}
	for r, v := range devices {
		alloc[r] = v
	}
	now := metav1.Now()
	st := corev1.NodeStatus{
		Capacity: alloc, Allocatable: alloc, Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}},
		NodeInfo: corev1.NodeSystemInfo{KernelVersion: "6.1.0-27-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://2.0.5",
			KubeletVersion: "v1.37.0", OperatingSystem: "linux", Architecture: "amd64"},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256)}},
	}
	// The kubelet reports the node's images (up to 50); ten, as
	// test/bench/fleet does.
	for j := range 10 {
		st.Images = append(st.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/team-%d/app-%d@sha256:%064x", j%4, j, j), fmt.Sprintf("registry.example.com/team-%d/app-%d:v1.%d", j%4, j, j)},
			SizeBytes: int64(200+50*j) << 20,
		})
	}
	return st, nil
}

// PodResource is the resource pod j asks for: half 3g.40gb, three in ten
// 4g.40gb (no node has one: reshape-first decides), one in five 7g.80gb
// (only busy ones exist).
func PodResource(j int) corev1.ResourceName {
	switch j % 10 {
	case 0, 1, 2, 3, 4:
		return mig3g
	case 5, 6, 7:
		return mig4g
	}
	return mig7g
}

// Pod is pending pod j of the mix, asking for one device.
func Pod(j int) *corev1.Pod {
	r := PodResource(j)
	one := *resource.NewQuantity(1, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pending-%04d", j), Namespace: Namespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: "registry.example.com/train:v1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{r: one}, Limits: corev1.ResourceList{r: one}},
		}}},
	}
}

// Namespace holds the pending pods.
const Namespace = "scale"
