package agent

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/nodeagent/podresources"
)

// replicaSep separates a MIG device UUID from the replica number in the
// IDs NVIDIA's device plugin gives the replicas of a shared device
// ("<uuid>::<n>"); every replica is the same instance.
const replicaSep = "::"

// instanceSeries is what the per-instance metrics say of one MIG
// instance: where it is, and who holds it.
type instanceSeries struct {
	GPU, GPUUUID, GI, Profile, UUID string
	// Holders are the pods ("namespace/name") holding the instance or one
	// of its replicas, sorted; a claim no pod reserved is
	// "ResourceClaim namespace/name" (podresources.ClaimHolder).
	Holders []string
	// ReplicasInUse counts the instance's device IDs pods hold: the
	// instance itself, or each of its replicas when it is shared.
	ReplicasInUse int
}

// instancesOf lists the MIG instances of gpus that have a device UUID
// (those a pod can hold and an exporter can name) with their holders from
// inUse, which maps device IDs to pods (Agent.inUse). IDs of no instance
// of gpus (a whole GPU, another plugin's, one gone) are ignored.
func instancesOf(gpus []mig.GPU, inUse map[string][]string) []instanceSeries {
	holders := map[string]map[string]bool{}
	replicas := map[string]int{}
	for id, pods := range inUse {
		uuid, _, _ := strings.Cut(id, replicaSep)
		if holders[uuid] == nil {
			holders[uuid] = map[string]bool{}
		}
		for _, p := range pods {
			holders[uuid][p] = true
		}
		if len(pods) > 0 {
			replicas[uuid]++
		}
	}
	var out []instanceSeries
	for _, g := range gpus {
		for _, in := range g.Instances {
			if in.UUID == "" {
				continue
			}
			out = append(out, instanceSeries{
				GPU: strconv.Itoa(g.Index), GPUUUID: g.UUID, GI: strconv.FormatUint(uint64(in.GIID), 10),
				Profile: in.Profile, UUID: in.UUID,
				Holders:       slices.Sorted(maps.Keys(holders[in.UUID])),
				ReplicasInUse: replicas[in.UUID],
			})
		}
	}
	return out
}

// splitHolder turns a holder into the namespace and pod labels: a claim
// no pod reserved has its namespace and no pod.
func splitHolder(h string) (namespace, pod string) {
	if c, ok := strings.CutPrefix(h, podresources.ClaimHolder); ok {
		ns, _, _ := strings.Cut(c, "/")
		return ns, ""
	}
	ns, pod, _ := strings.Cut(h, "/")
	return ns, pod
}

var (
	instanceLabels   = []string{"node", "serving", "gpu", "gpu_uuid", "gi", "profile", "uuid"}
	instanceInfoDesc = prometheus.NewDesc("migflex_agent_instance_info",
		"1 for each MIG instance of the node and each pod holding it (one series per pod when several share it), with the pod's namespace and name; one series with both empty while no pod holds it. Join on uuid (the MIG device UUID) or on gpu_uuid and gi (dcgm-exporter's UUID and GPU_I_ID) to map any exporter's per-instance series to pods.",
		append(slices.Clone(instanceLabels), "namespace", "pod"), nil)
	instanceReplicasDesc = prometheus.NewDesc("migflex_agent_instance_replicas_in_use",
		"Device IDs of the MIG instance that pods hold: 0 or 1 for an instance served whole, up to its replicas when it is shared.",
		instanceLabels, nil)
)

// instanceCollector serves the per-instance series from the layout and
// holders the loop last learnt (set), so a scrape never shows an
// instance or a pod that was gone by then.
type instanceCollector struct {
	node, serving string

	mu    sync.Mutex
	gpus  []mig.GPU
	inUse map[string][]string
	rows  []instanceSeries
}

// setLayout records the GPUs' layout (Agent.gpus).
func (c *instanceCollector) setLayout(gpus []mig.GPU) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gpus = gpus
	c.rows = instancesOf(c.gpus, c.inUse)
}

// setInUse records which pods hold which device IDs (Agent.inUse).
func (c *instanceCollector) setInUse(inUse map[string][]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inUse = inUse
	c.rows = instancesOf(c.gpus, c.inUse)
}

func (c *instanceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- instanceInfoDesc
	ch <- instanceReplicasDesc
}

func (c *instanceCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	rows := c.rows
	c.mu.Unlock()
	for _, r := range rows {
		labels := []string{c.node, c.serving, r.GPU, r.GPUUUID, r.GI, r.Profile, r.UUID}
		ch <- prometheus.MustNewConstMetric(instanceReplicasDesc, prometheus.GaugeValue, float64(r.ReplicasInUse), labels...)
		holders := r.Holders
		if len(holders) == 0 {
			holders = []string{""}
		}
		// Two claims no pod reserved, in one namespace, are one series.
		seen := map[[2]string]bool{}
		for _, h := range holders {
			ns, pod := splitHolder(h)
			if seen[[2]string{ns, pod}] {
				continue
			}
			seen[[2]string{ns, pod}] = true
			ch <- prometheus.MustNewConstMetric(instanceInfoDesc, prometheus.GaugeValue, 1, append(slices.Clone(labels), ns, pod)...)
		}
	}
}

var makeableDesc = prometheus.NewDesc("migflex_agent_dynamic_free_devices",
	"On a node whose DRA driver serves dynamic mode: how many devices of the resource (nvidia.com/mig-<profile>, nvidia.com/gpu) the node can still make, each resource alone (the placements the GPUs' counters leave once the claims allocated or prepared on it have taken theirs); 0 where none can be made now. No series on other nodes.",
	[]string{"node", "resource"}, nil)

// makeable is a Server that can say what a dynamic node can still make
// (draserver.Server).
type makeable interface {
	Makeable() (free map[string]int64, ok bool)
}

// makeableCollector serves migflex_agent_dynamic_free_devices, read from
// the server at scrape time: no series outlives a resource the node no
// longer offers, and nothing is kept between scrapes.
type makeableCollector struct {
	srv  Server
	node string
}

func (c makeableCollector) Describe(ch chan<- *prometheus.Desc) { ch <- makeableDesc }

func (c makeableCollector) Collect(ch chan<- prometheus.Metric) {
	m, can := c.srv.(makeable)
	if !can {
		return
	}
	free, ok := m.Makeable()
	if !ok {
		return
	}
	for _, r := range slices.Sorted(maps.Keys(free)) {
		ch <- prometheus.MustNewConstMetric(makeableDesc, prometheus.GaugeValue, float64(free[r]), c.node, r)
	}
}
