package fleet

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPU resources of the fleet.
const (
	MIG1g5   corev1.ResourceName = "nvidia.com/mig-1g.5gb"
	MIG2g10  corev1.ResourceName = "nvidia.com/mig-2g.10gb"
	MIG3g20  corev1.ResourceName = "nvidia.com/mig-3g.20gb"
	MIG1g10  corev1.ResourceName = "nvidia.com/mig-1g.10gb"
	MIG2g20  corev1.ResourceName = "nvidia.com/mig-2g.20gb"
	MIG3g40  corev1.ResourceName = "nvidia.com/mig-3g.40gb"
	MIG4g40  corev1.ResourceName = "nvidia.com/mig-4g.40gb"
	MIG7g80  corev1.ResourceName = "nvidia.com/mig-7g.80gb"
	WholeGPU corev1.ResourceName = "nvidia.com/gpu"
)

// Labels the fleet sets besides the well-known ones.
const (
	LabelPool       = "node-pool"
	LabelGPUProduct = "nvidia.com/gpu.product"
	LabelGPUCount   = "nvidia.com/gpu.count"
	LabelStrategy   = "nvidia.com/mig.strategy"
)

// Kind is one kind of node in the fleet: its machine, GPUs and how its
// GPUs are partitioned, which is what its Allocatable shows.
type Kind struct {
	Name         string
	InstanceType string
	// Product is the nvidia.com/gpu.product label; empty on CPU nodes.
	Product string
	// GPUs are the physical GPUs; Devices the GPU resources they give.
	GPUs    int
	Devices map[corev1.ResourceName]int64
}

// Kinds in the order of their share of the fleet; kindOf maps a node index
// to one of them, 5 % per bucket of 20.
var Kinds = []Kind{
	// 25 %: every H100 cut into seven 1g.10gb (inference pools).
	{Name: "h100-small", InstanceType: "p5.48xlarge", Product: "NVIDIA-H100-80GB-HBM3", GPUs: 8,
		Devices: map[corev1.ResourceName]int64{MIG1g10: 56}},
	// 20 %: 3g.40gb + 2g.20gb + 2x 1g.10gb per H100.
	{Name: "h100-mixed", InstanceType: "p5.48xlarge", Product: "NVIDIA-H100-80GB-HBM3", GPUs: 8,
		Devices: map[corev1.ResourceName]int64{MIG3g40: 8, MIG2g20: 8, MIG1g10: 16}},
	// 10 %: 4g.40gb + 3g.40gb per H100.
	{Name: "h100-large", InstanceType: "p5.48xlarge", Product: "NVIDIA-H100-80GB-HBM3", GPUs: 8,
		Devices: map[corev1.ResourceName]int64{MIG4g40: 8, MIG3g40: 8}},
	// 15 %: 3g.20gb + 2g.10gb + 2x 1g.5gb per A100-40GB.
	{Name: "a100-40gb", InstanceType: "p4d.24xlarge", Product: "NVIDIA-A100-SXM4-40GB", GPUs: 8,
		Devices: map[corev1.ResourceName]int64{MIG3g20: 8, MIG2g10: 8, MIG1g5: 16}},
	// 10 %: whole V100s, no MIG.
	{Name: "v100", InstanceType: "p3.16xlarge", Product: "Tesla-V100-SXM2-16GB", GPUs: 8,
		Devices: map[corev1.ResourceName]int64{WholeGPU: 8}},
	// 20 %: CPU only.
	{Name: "cpu", InstanceType: "m5.8xlarge"},
}

// kindBuckets maps i%20 to an index into Kinds.
var kindBuckets = [20]int{0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 5, 5}

// KindOf is the kind of node i.
func KindOf(i int) Kind { return Kinds[kindBuckets[i%len(kindBuckets)]] }

// Every cordonEvery-th node is cordoned and every taintEvery-th carries a
// NoSchedule maintenance taint no benchmark pod tolerates.
const (
	cordonEvery = 50
	taintEvery  = 37
	zones       = 3
	// images is how many container images each Node reports. The kubelet
	// reports up to 50 (--node-status-max-images); fewer keeps the Node
	// objects, and so the baseline's lists, on the light side.
	images = 10
)

// NodeName is the name of node i.
func NodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// Pool is the node-pool label of node i: two pools per kind.
func Pool(i int) string { return fmt.Sprintf("%s-%d", KindOf(i).Name, (i/len(kindBuckets))%2) }

// Node is node i as a kubelet would register it, without its status.
func Node(i int) *corev1.Node {
	k := KindOf(i)
	name := NodeName(i)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			corev1.LabelHostname:           name,
			corev1.LabelOSStable:           "linux",
			corev1.LabelArchStable:         "amd64",
			corev1.LabelInstanceTypeStable: k.InstanceType,
			corev1.LabelTopologyRegion:     "us-east-1",
			corev1.LabelTopologyZone:       fmt.Sprintf("us-east-1%c", 'a'+i%zones),
			LabelPool:                      Pool(i),
		},
	}}
	if k.Product != "" {
		n.Labels[LabelGPUProduct] = k.Product
		n.Labels[LabelGPUCount] = strconv.Itoa(k.GPUs)
		n.Labels[LabelStrategy] = "mixed"
	}
	n.Spec.PodCIDR = fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)
	n.Spec.ProviderID = "aws:///us-east-1/i-" + fmt.Sprintf("%017x", i)
	if i%cordonEvery == cordonEvery-1 {
		n.Spec.Unschedulable = true
	}
	if i%taintEvery == taintEvery-1 {
		n.Spec.Taints = []corev1.Taint{{Key: "maintenance", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	}
	return n
}

// Status is the status of node i as its kubelet and device plugin report
// it: Allocatable with the GPU devices, conditions, addresses, node info
// and some images.
func Status(i int) corev1.NodeStatus {
	k := KindOf(i)
	q := resource.MustParse
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:              q("95"),
		corev1.ResourceMemory:           q("1000Gi"),
		corev1.ResourcePods:             q("110"),
		corev1.ResourceEphemeralStorage: q("900Gi"),
	}
	for r, v := range k.Devices {
		alloc[r] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	capacity := alloc.DeepCopy()
	capacity[corev1.ResourceCPU] = q("96")
	capacity[corev1.ResourceMemory] = q("1024Gi")

	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: "kubelet reports " + reason,
			LastHeartbeatTime: now, LastTransitionTime: now}
	}
	st := corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: alloc,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)},
			{Type: corev1.NodeHostName, Address: NodeName(i)},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID:               fmt.Sprintf("%032x", i),
			SystemUUID:              fmt.Sprintf("ec2%05d-0000-0000-0000-000000000000", i),
			BootID:                  fmt.Sprintf("%08x-0000-0000-0000-000000000000", i),
			KernelVersion:           "6.1.0-27-amd64",
			OSImage:                 "Debian GNU/Linux 12 (bookworm)",
			ContainerRuntimeVersion: "containerd://2.0.5",
			KubeletVersion:          "v1.34.4",
			OperatingSystem:         "linux",
			Architecture:            "amd64",
		},
	}
	for j := range images {
		st.Images = append(st.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/team-%d/app-%d@sha256:%064x", j%4, j, j), fmt.Sprintf("registry.example.com/team-%d/app-%d:v1.%d", j%4, j, j)},
			SizeBytes: int64(200+50*j) << 20,
		})
	}
	return st
}
