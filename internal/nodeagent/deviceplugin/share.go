package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/domain/sharing"
)

// DefaultMPSRoot is the host directory under which each resource shared
// with MPS has its daemon's pipe directory, as in NVIDIA's chart
// (--mps-root).
const DefaultMPSRoot = "/run/nvidia/mps"

// shareInfo is what a server needs of the sharing config for the resource
// it serves.
type shareInfo struct {
	// failMany refuses a container more than one replica (NVIDIA's
	// failRequestsGreaterThanOne).
	failMany bool
	// mps is set when the resource's replicas are MPS clients.
	mps *sharing.MPS
}

// shared is a layout's devices after sharing: what each server serves,
// what it needs to allocate, and GPU feature discovery's sharing labels.
type shared struct {
	res    map[string][]Device
	info   map[string]shareInfo
	labels map[string]string
}

// share applies cfg to res, the devices Resources names for gpus: each
// shared device becomes its replicas, under the shared (maybe renamed)
// resource. A nil cfg shares nothing and adds no label, so a node without
// --sharing-config has exactly the labels it had before sharing existed.
// It fails, with nothing shared, where sharing.Expand does.
func share(gpus []mig.GPU, res map[string][]Device, cfg *sharing.Config, mpsRoot string) (shared, error) {
	if cfg == nil {
		return shared{res: res}, nil
	}
	// NVIDIA's devices lists name a MIG device "<gpu>:<mig>", its index
	// among the GPU's MIG devices; migflex's are in placement order.
	index := map[string]string{}
	memory := map[string]uint64{}
	for _, g := range gpus {
		index[g.UUID] = strconv.Itoa(g.Index)
		memory[g.UUID] = g.MemoryMiB << 20
		for i, in := range instancesOf(g) {
			index[in.UUID] = fmt.Sprintf("%d:%d", g.Index, i)
		}
	}
	byID := map[string]Device{}
	in := map[corev1.ResourceName][]sharing.Device{}
	for name, devs := range res {
		for _, d := range devs {
			byID[d.ID] = d
			sd := sharing.Device{ID: d.ID, Index: index[d.ID], MIG: d.MIG}
			if !d.MIG {
				sd.MemoryBytes = memory[d.ID]
			}
			in[corev1.ResourceName(name)] = append(in[corev1.ResourceName(name)], sd)
		}
	}
	served, err := sharing.Expand(in, cfg, sharing.Options{MPSHostRoot: mpsRoot})
	if err != nil {
		return shared{}, err
	}
	out := shared{res: map[string][]Device{}, info: map[string]shareInfo{}, labels: served.Labels}
	for name, sds := range served.Devices {
		for _, sd := range sds {
			d := byID[sd.Device]
			d.Resource = string(name)
			if sd.Shared {
				d.ID, d.Shares, d.Replica = sd.ID, sd.Device, sd.Replica
			}
			out.res[string(name)] = append(out.res[string(name)], d)
		}
	}
	for _, r := range cfg.Resources {
		if _, ok := out.res[string(r.ServedAs())]; !ok {
			continue
		}
		info := shareInfo{failMany: cfg.FailRequestsGreaterThanOne}
		if m, ok := served.MPS[r.ServedAs()]; ok {
			info.mps = &m
		}
		out.info[string(r.ServedAs())] = info
	}
	return out, nil
}

// Share serves the node's devices under a new sharing config (nil shares
// nothing): each shared device as its replicas, renamed as cfg asks, with
// GPU feature discovery's sharing labels (see Labels). When cfg cannot be
// applied to the layout served now (a devices list the node cannot
// satisfy, a rename onto a resource it serves), it returns why and the
// node keeps serving what it served, under the config it had.
func (m *Manager) Share(ctx context.Context, cfg *sharing.Config) error {
	m.shareMu.Lock()
	defer m.shareMu.Unlock()
	if m.gpus != nil {
		res, err := Resources(m.gpus, m.opts.MigStrategy)
		if err != nil {
			// The layout itself cannot be served: Serve says so; the
			// config is taken for the next layout that can.
			m.sharing = cfg
			return nil
		}
		sh, err := share(m.gpus, res, cfg, m.opts.MPSRoot)
		if err != nil {
			return fmt.Errorf("the sharing config cannot be applied to this node's devices; serving what was served: %w", err)
		}
		m.sharing = cfg
		return m.update(ctx, sh.res, sh.info)
	}
	m.sharing = cfg
	return nil
}

// sharedLabels are GPU feature discovery's sharing labels for gpus under
// the current sharing config; none without one, or when it cannot apply.
func (m *Manager) sharedLabels(gpus []mig.GPU) map[string]string {
	m.shareMu.Lock()
	cfg := m.sharing
	m.shareMu.Unlock()
	if cfg == nil {
		return nil
	}
	res, err := Resources(gpus, m.opts.MigStrategy)
	if err != nil {
		return nil
	}
	sh, err := share(gpus, res, cfg, m.opts.MPSRoot)
	if err != nil {
		return nil
	}
	return sh.labels
}

// underlying returns the devices under devs, each once, in the order of
// their first replica: two replicas of one instance are one instance to
// the container runtime.
func underlying(devs []Device) []Device {
	out := make([]Device, 0, len(devs))
	for _, d := range devs {
		id := d.Underlying()
		if slices.ContainsFunc(out, func(o Device) bool { return o.ID == id }) {
			continue
		}
		d.ID, d.Shares, d.Replica = id, "", 0
		out = append(out, d)
	}
	return out
}

// addMPS gives a container of an MPS-shared resource what NVIDIA's device
// plugin gives it: the daemon's pipe directory in its environment, and the
// host's pipe and shared-memory directories mounted where the client
// looks. The daemon itself is not migflex's (see docs/INSTALL.md).
func addMPS(resp *pluginapi.ContainerAllocateResponse, m *sharing.MPS) {
	if resp.Envs == nil {
		resp.Envs = map[string]string{}
	}
	for _, k := range slices.Sorted(maps.Keys(m.ContainerEnv)) {
		resp.Envs[k] = m.ContainerEnv[k]
	}
	resp.Mounts = append(resp.Mounts,
		&pluginapi.Mount{ContainerPath: m.PipeDir, HostPath: m.HostPipeDir},
		&pluginapi.Mount{ContainerPath: "/dev/shm", HostPath: m.HostShmDir},
	)
}
