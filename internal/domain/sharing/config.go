package sharing

import (
	corev1 "k8s.io/api/core/v1"
)

// Strategy is how a resource's devices are shared; its values are those of
// GPU feature discovery's nvidia.com/<resource>.sharing-strategy label.
type Strategy string

const (
	StrategyNone        Strategy = "none"
	StrategyTimeSlicing Strategy = "time-slicing"
	StrategyMPS         Strategy = "mps"
)

// Version is the only version of the document.
const Version = "v1"

// Limits on what a document may ask for.
const (
	// MaxReplicas bounds the devices one shared device becomes, so the
	// device list served to the kubelet stays bounded whatever a file says.
	MaxReplicas = 1024
	// MaxMPSReplicas is the most MPS clients per device for which NVIDIA's
	// share of the threads, 100/replicas percent, is not zero.
	MaxMPSReplicas = 100
	// MaxBytes bounds the document read.
	MaxBytes = 1 << 20
	// maxResourceNameLen is NVIDIA's limit on a (renamed) resource name.
	maxResourceNameLen = 63
)

// SharedSuffix is what renameByDefault appends to a resource name.
const SharedSuffix = ".shared"

// Config is a valid sharing section. The zero value (and a document without
// a sharing section) shares nothing.
type Config struct {
	// Strategy is none when no resource is shared.
	Strategy Strategy
	// FailRequestsGreaterThanOne: a container asking for more than one
	// replica is refused at allocation, since two replicas of one device
	// give no more than one does.
	FailRequestsGreaterThanOne bool
	// Resources are the shared resources in the order of the file.
	Resources []Resource
}

// Resource is one shared resource.
type Resource struct {
	// Name is the resource whose devices are shared.
	Name corev1.ResourceName
	// Rename is the resource the replicas are served as; "" when they are
	// served under Name. renameByDefault has already been applied.
	Rename corev1.ResourceName
	// Devices says which of the resource's devices are shared.
	Devices Devices
	// Replicas is how many devices each shared device becomes (>= 2).
	Replicas int
}

// ServedAs is the resource the replicas are served as.
func (r Resource) ServedAs() corev1.ResourceName {
	if r.Rename != "" {
		return r.Rename
	}
	return r.Name
}

// Devices selects devices of a resource: all of them, the first Count, or
// those in List. Exactly one is set.
type Devices struct {
	All   bool
	Count int
	// List holds GPU indices ("0"), MIG indices ("0:1", GPU and MIG device
	// as NVIDIA counts them), GPU UUIDs and MIG UUIDs.
	List []string
}

// Lookup returns the shared resource named name.
func (c *Config) Lookup(name corev1.ResourceName) (Resource, bool) {
	if c == nil {
		return Resource{}, false
	}
	for _, r := range c.Resources {
		if r.Name == name {
			return r, true
		}
	}
	return Resource{}, false
}
