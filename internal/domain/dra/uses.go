package dra

import (
	"cmp"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PreparedClaim is a claim the kubelet plugin prepared on this node, as its
// checkpoint keeps it: enough to unprepare it after a restart, to answer
// the kubelet's repeated Prepare the same way, and to tell the busy check
// who holds which device.
type PreparedClaim struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are the pods the claim was reserved for when it was prepared
	// ("namespace/name"). A claim several pods share is prepared once, for
	// the first of them, so this may name none of those that hold it
	// later: Uses prefers the API's reservedFor while the API has the
	// claim.
	Pods    []string         `json:"pods,omitempty"`
	Devices []PreparedDevice `json:"devices"`
}

// PreparedDevice is one device of a prepared claim, as it was when the
// claim was prepared.
type PreparedDevice struct {
	Device
	// Requests are the claim's requests the device was allocated for.
	Requests []string `json:"requests"`
	// CDIDeviceIDs are what Prepare returned for it.
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
	// Created is true for a MIG instance Prepare created (dynamic mode):
	// Unprepare destroys it.
	Created bool `json:"created,omitempty"`
}

// Use is one device a pod, or a claim no pod has reserved yet, holds.
type Use struct {
	// DeviceUUID is the device's UUID, the ID the agent's busy check
	// keys devices by (the same as on the device-plugin path).
	DeviceUUID string
	// Device is its name in the ResourceSlice.
	Device string
	// Holder is the pod ("namespace/name"), or "ResourceClaim
	// namespace/name" for an allocated claim no pod has reserved.
	Holder string
	// Claim is the claim ("namespace/name") that holds the device.
	Claim string
}

// Sources are the three views of who holds a device, each covering a
// window the others miss.
type Sources struct {
	// Claims are ResourceClaims from the API. A device is held from the
	// moment the scheduler writes the allocation, before the pod is bound
	// or the kubelet has heard of it.
	Claims []resourceapi.ResourceClaim
	// PodResources is the kubelet's pod-resources List answer: what it
	// prepared for each running pod's containers (DynamicResources).
	PodResources *podresourcesv1.ListPodResourcesResponse
	// Prepared is the plugin's checkpoint: what it prepared, including
	// for pods the API server no longer shows.
	Prepared []PreparedClaim
}

// Uses lists which of devs are held, by whom, through this driver's pool:
// the DRA part of the agent's busy check. A device of another driver or
// pool is ignored, as is a device name that is not in devs (a device gone
// already), except for a prepared claim, whose device is then reported by
// the UUID it had when it was prepared. The result is sorted by holder and
// device and has no duplicates.
func Uses(devs []Device, driver, pool string, src Sources) []Use {
	byName := ByName(devs)
	seen := map[Use]bool{}
	var out []Use
	add := func(name, uuid, holder, claim string) {
		if d, ok := byName[name]; ok {
			uuid = d.UUID
		}
		if uuid == "" {
			return
		}
		u := Use{DeviceUUID: uuid, Device: name, Holder: holder, Claim: claim}
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}

	// reserved are the holders of each allocated API claim, by UID: its
	// pods, or the claim itself while no pod has reserved it.
	reserved := map[string][]string{}
	for _, c := range src.Claims {
		if c.Status.Allocation == nil {
			continue
		}
		claim := c.Namespace + "/" + c.Name
		var holders []string
		for _, r := range c.Status.ReservedFor {
			if r.APIGroup == "" && r.Resource == "pods" {
				holders = append(holders, c.Namespace+"/"+r.Name)
			}
		}
		if len(holders) == 0 {
			holders = []string{"ResourceClaim " + claim}
		}
		reserved[string(c.UID)] = holders
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != driver || r.Pool != pool {
				continue
			}
			for _, h := range holders {
				add(r.Device, "", h, claim)
			}
		}
	}

	for _, p := range src.PodResources.GetPodResources() {
		pod := p.GetNamespace() + "/" + p.GetName()
		for _, ctr := range p.GetContainers() {
			for _, dr := range ctr.GetDynamicResources() {
				claim := dr.GetClaimNamespace() + "/" + dr.GetClaimName()
				for _, cr := range dr.GetClaimResources() {
					if cr.GetDriverName() == driver && cr.GetPoolName() == pool {
						add(cr.GetDeviceName(), "", pod, claim)
					}
				}
			}
		}
	}

	for _, c := range src.Prepared {
		claim := c.Namespace + "/" + c.Name
		// A claim several pods share is prepared once, when the first is
		// reserved (the kubelet prepares it for the first of its pods on
		// the node, and not again for the others): while the API has the
		// claim its reservedFor names who holds it now, not the
		// checkpoint, which would name a pod gone after the first one
		// ends. The device is still reported by its recorded UUID.
		holders, ok := reserved[c.UID]
		if !ok {
			holders = c.Pods
		}
		if len(holders) == 0 {
			holders = []string{"ResourceClaim " + claim}
		}
		for _, d := range c.Devices {
			for _, h := range holders {
				add(d.Name, d.UUID, h, claim)
			}
		}
	}

	slices.SortFunc(out, func(a, b Use) int {
		return cmp.Or(cmp.Compare(a.Holder, b.Holder), cmp.Compare(a.Device, b.Device), cmp.Compare(a.DeviceUUID, b.DeviceUUID), cmp.Compare(a.Claim, b.Claim))
	})
	return out
}
