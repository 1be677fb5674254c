package draplugin

import (
	"context"
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"

	"github.com/migflex/migflex/internal/domain/dra"
)

// DeviceStatusData is the data of a prepared device's entry in the
// ResourceClaim's status.devices: which instance (or whole GPU) it is, so
// that metrics exporters and kubectl migflex can map a pod, and every pod
// sharing the claim, to its MIG device. Start and Size are the placement;
// zero for a whole GPU, whose UUID is its ParentUUID.
type DeviceStatusData struct {
	UUID       string `json:"uuid"`
	Profile    string `json:"profile,omitempty"`
	ParentUUID string `json:"parentUUID"`
	GPUIndex   int    `json:"gpuIndex"`
	Start      int    `json:"start"`
	Size       int    `json:"size,omitempty"`
}

// statusTimeout bounds the status write of one claim.
const statusTimeout = 10 * time.Second

// writeStatus writes the devices of a prepared claim into its
// status.devices, by server-side apply as the driver (the entries are the
// driver's own; the scheduler's allocation is not touched). It is best
// effort: the pod runs without it, so a failure is logged only.
func (d *Driver) writeStatus(ctx context.Context, pc dra.PreparedClaim) {
	st := resourceapply.ResourceClaimStatus()
	for _, dev := range pc.Devices {
		data, err := json.Marshal(DeviceStatusData{UUID: dev.UUID, Profile: dev.Profile, ParentUUID: dev.GPUUUID, GPUIndex: dev.GPUIndex, Start: dev.Start, Size: dev.Size})
		if err != nil {
			d.logger.Error(err, "Encoding a device's status", "claim", pc.Namespace+"/"+pc.Name)
			return
		}
		st.WithDevices(resourceapply.AllocatedDeviceStatus().
			WithDriver(d.opts.DriverName).WithPool(d.opts.NodeName).WithDevice(dev.Name).
			WithData(runtime.RawExtension{Raw: data}))
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	cfg := resourceapply.ResourceClaim(pc.Name, pc.Namespace).WithStatus(st)
	if _, err := d.opts.KubeClient.ResourceV1().ResourceClaims(pc.Namespace).ApplyStatus(ctx, cfg, metav1.ApplyOptions{FieldManager: d.opts.DriverName, Force: true}); err != nil {
		d.logger.Error(err, "Writing the devices' status into the ResourceClaim; the pod runs without it", "claim", pc.Namespace+"/"+pc.Name)
		return
	}
	d.logger.V(2).Info("Wrote the devices' status into the ResourceClaim", "claim", pc.Namespace+"/"+pc.Name)
}
