package deviceplugin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/nodeagent/devnodes"
)

const (
	// EnvVisibleDevices is read by the NVIDIA container runtime.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"

	// cdiAnnotationPrefix and cdiAnnotationPlugin form CDI annotation keys
	// cdi.k8s.io/migflex_<claim>, as the CDI producer library does.
	cdiAnnotationPrefix = "cdi.k8s.io/"
	cdiAnnotationPlugin = "migflex"
	// visibleDevicesVoid tells the NVIDIA runtime hook to inject nothing:
	// with CDI the runtime does the injection, and an image's default of
	// NVIDIA_VISIBLE_DEVICES=all must not add every GPU on top.
	visibleDevicesVoid = "void"
)

// PostAllocator completes a container's Allocate response once the device
// list strategy has named its devices, like the optional capability of the
// same name in intel's device plugins. Without one the device plugin adds
// the device nodes the devices need (envvar strategy; with CDI the spec
// carries them). For a backend whose devices have no nodes (the simulated
// NVML), EnvPostAllocator makes one of its DeviceEnv, so the device plugin
// never asks which backend it serves.
type PostAllocator interface {
	PostAllocate(resp *pluginapi.ContainerAllocateResponse, devs []Device) error
}

// DeviceEnv is the optional capability of an NVML backend whose devices
// have no device nodes (the simulator's): the environment that names them
// to a container instead. ids are the devices' UUIDs in allocation order,
// profiles[i] the MIG profile of ids[i] (empty for a whole GPU). The agent
// finds it on its backend by type assertion.
type DeviceEnv interface {
	ContainerEnv(ids, profiles []string) map[string]string
}

// EnvPostAllocator is the PostAllocator of a backend with DeviceEnv: no
// device nodes, and the environment e gives.
func EnvPostAllocator(e DeviceEnv) PostAllocator { return envPostAllocator{e} }

type envPostAllocator struct{ env DeviceEnv }

func (p envPostAllocator) PostAllocate(resp *pluginapi.ContainerAllocateResponse, devs []Device) error {
	ids := make([]string, len(devs))
	profiles := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.ID
		if d.MIG {
			profiles[i] = d.Profile
		}
	}
	if resp.Envs == nil {
		resp.Envs = map[string]string{}
	}
	for k, v := range p.env.ContainerEnv(ids, profiles) {
		resp.Envs[k] = v
	}
	return nil
}

// allocator builds the container part of Allocate responses.
type allocator struct {
	strategy DeviceListStrategy
	post     PostAllocator
	cdiKind  string
}

func newAllocator(o Options) allocator {
	a := allocator{strategy: o.DeviceListStrategy, post: o.PostAllocator, cdiKind: o.CDIKind}
	if a.post == nil {
		a.post = deviceNodes{strategy: o.DeviceListStrategy, hostRoot: o.HostRoot, driverRoot: o.DriverRoot}
	}
	return a
}

// response tells the runtime how to give a container devs. Errors come from
// reading the host (the MIG capability minors) and are the host's fault, not
// the request's.
func (a allocator) response(devs []Device) (*pluginapi.ContainerAllocateResponse, error) {
	ids := make([]string, len(devs))
	for i, d := range devs {
		ids[i] = d.ID
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	switch a.strategy {
	case DeviceListEnvvar:
		resp.Envs[EnvVisibleDevices] = strings.Join(ids, ",")
	case DeviceListCDICRI:
		resp.Envs[EnvVisibleDevices] = visibleDevicesVoid
		for _, id := range ids {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: a.cdiName(id)})
		}
	case DeviceListCDIAnnotations:
		resp.Envs[EnvVisibleDevices] = visibleDevicesVoid
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = a.cdiName(id)
		}
		resp.Annotations = map[string]string{cdiAnnotationKey(ids): strings.Join(names, ",")}
	default:
		return nil, fmt.Errorf("unknown device list strategy %q", a.strategy)
	}

	if err := a.post.PostAllocate(resp, devs); err != nil {
		return nil, err
	}
	return resp, nil
}

// deviceNodes is the default PostAllocator: the device nodes of real GPUs.
type deviceNodes struct {
	strategy   DeviceListStrategy
	hostRoot   string
	driverRoot string
}

func (n deviceNodes) PostAllocate(resp *pluginapi.ContainerAllocateResponse, devs []Device) error {
	// With CDI, the spec carries the device nodes.
	if n.strategy != DeviceListEnvvar {
		return nil
	}
	specs, err := n.deviceSpecs(devs)
	if err != nil {
		return err
	}
	resp.Devices = specs
	return nil
}

// cdiName is the CDI device name of a GPU or MIG device in a spec generated
// with the NVIDIA toolkit's uuid naming: nvidia.com/gpu=MIG-<uuid>.
func (a allocator) cdiName(id string) string { return a.cdiKind + "=" + id }

// cdiAnnotationKey returns a key unique to this container's devices. Devices
// are exclusive, so the first ID identifies the allocation; a hash stands in
// when the ID does not fit the 63-character name rules.
func cdiAnnotationKey(ids []string) string {
	name := cdiAnnotationPlugin + "_" + ids[0]
	if len(name) > 63 || !validAnnotationName(name) {
		sum := sha256.Sum256([]byte(strings.Join(ids, ",")))
		name = cdiAnnotationPlugin + "_" + hex.EncodeToString(sum[:8])
	}
	return cdiAnnotationPrefix + name
}

func validAnnotationName(s string) bool {
	alnum := func(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !alnum(c) && (i == 0 || i == len(s)-1 || (c != '-' && c != '_' && c != '.')) {
			return false
		}
	}
	return s != ""
}

// deviceSpecs lists the device nodes a container needs for devs (see
// devnodes.Nodes, which the DRA driver's CDI specs use too).
func (n deviceNodes) deviceSpecs(devs []Device) ([]*pluginapi.DeviceSpec, error) {
	dn := make([]devnodes.Device, len(devs))
	for i, d := range devs {
		dn[i] = devnodes.Device{ID: d.ID, Minor: d.Minor, MIG: d.MIG, GI: d.GI, CI: d.CI}
	}
	nodes, err := devnodes.Nodes(n.hostRoot, n.driverRoot, dn)
	if err != nil {
		return nil, err
	}
	specs := make([]*pluginapi.DeviceSpec, len(nodes))
	for i, node := range nodes {
		specs[i] = &pluginapi.DeviceSpec{ContainerPath: node.Path, HostPath: node.HostPath, Permissions: "rw"}
	}
	return specs, nil
}
