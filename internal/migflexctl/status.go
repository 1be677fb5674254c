package migflexctl

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/resourcename"
	"github.com/migflex/migflex/internal/domain/schedview"
	"github.com/migflex/migflex/internal/planner/plansnap"
)

// Status is what `status` reports, and its -o json|yaml form.
type Status struct {
	Nodes []NodeStatus `json:"nodes"`
	// Free counts the devices served to pods per resource across the
	// nodes shown, a shared device as its replicas under the resource
	// they are served as: free (healthy, held by no pod) of all served.
	Free []FreeCount `json:"free"`
}

// NodeStatus is one node as its agent publishes it.
type NodeStatus struct {
	Name string `json:"name"`
	// Serving is nodeinfo.LabelServing's value, device-plugin when absent.
	Serving string `json:"serving"`
	// State is nodeinfo.LabelMigConfigState's value, "" when unset.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Source is the mig.config source that decides the layout.
	Source string `json:"source"`
	// Planner: the node opted in to the planner (nodeinfo.LabelPlanner).
	Planner bool `json:"planner"`
	// ConfigWriter is the field manager that last wrote the node's
	// nvidia.com/mig.config, at ConfigWritten (from managedFields; both
	// empty when unknown).
	ConfigWriter  string     `json:"configWriter,omitempty"`
	ConfigWritten *time.Time `json:"configWritten,omitempty"`
	// PlannerHeldUntil: the planner leaves the opted-in node alone until
	// then, the planner's --manual-hold after someone else wrote its
	// nvidia.com/mig.config (plansnap's reading).
	PlannerHeldUntil *time.Time `json:"plannerHeldUntil,omitempty"`
	// Reservation is the node's reservation (migflex.io/reservation):
	// GPUs held for a pod that waits for several whole GPUs; nil when
	// there is none, or it does not parse (a problem then).
	Reservation *NodeReservation `json:"reservation,omitempty"`
	GPUs        []nodeinfo.GPU   `json:"gpus"`
	// DRAMode is nodeinfo.LabelDRAMode's value on a DRA node.
	DRAMode string `json:"draMode,omitempty"`
	// Dynamic is what a node whose slices offer placements with counters
	// (dynamic mode) can still make, from its slices and the claims
	// allocated in its pool; nil on other nodes, or when the slices were
	// not read.
	Dynamic *DynamicSupply `json:"dynamic,omitempty"`
	// Problems say what of the Node could not be read.
	Problems []string `json:"problems,omitempty"`
}

// NodeReservation is a node's reservation as its annotation says it (the
// pod, its UID, the GPUs held, since when, when they were expected free,
// the deadline), who wrote it, and where it stands on the node's layout.
type NodeReservation struct {
	nodeinfo.Reservation
	// Writer is the field manager that wrote it (the planner's is
	// migflex-planner-reservation), at Written; empty when unknown.
	Writer  string     `json:"writer,omitempty"`
	Written *time.Time `json:"written,omitempty"`
	// State is where it stands, as the node's agent decides it:
	// ReservationReady, ReservationWaiting or ReservationLapsed.
	State string `json:"state"`
	// WaitingFor say, while it waits, what keeps each GPU from being free
	// and whole.
	WaitingFor []string `json:"waitingFor,omitempty"`
}

// States of a reservation (NodeReservation.State).
const (
	// ReservationReady: every GPU it holds is free and whole (MIG off,
	// no pod): the agent offers them at once, usually to the reserved
	// pod, the first in the scheduler's queue.
	ReservationReady = "ready"
	// ReservationWaiting: the agent withholds the free devices of the
	// GPUs it holds from every pod until all of them are free and whole.
	ReservationWaiting = "waiting"
	// ReservationLapsed: its deadline passed; the agent offers the GPUs
	// to any pod again.
	ReservationLapsed = "lapsed"
)

// nodeReservation reads a node's reservation against its layout, as the
// agent weighs it (internal/nodeagent/agent's withheld): ready once
// every GPU it holds is on the node, held by no pod and whole. nil, and
// a problem, when the annotation does not parse.
func nodeReservation(n *corev1.Node, gpus []nodeinfo.GPU, now time.Time) (*NodeReservation, error) {
	v, ok := n.Annotations[nodeinfo.AnnotationReservation]
	if !ok {
		return nil, nil
	}
	r, err := nodeinfo.ParseReservation(v)
	if err != nil {
		return nil, fmt.Errorf("%w: the agent ignores it and withholds nothing", err)
	}
	out := &NodeReservation{Reservation: r, State: ReservationReady}
	if owner, at := plansnap.AnnotationOwner(n, nodeinfo.AnnotationReservation); owner != "" {
		out.Writer = owner
		if !at.IsZero() {
			at = at.UTC()
			out.Written = &at
		}
	}
	if !r.Active(now) {
		out.State = ReservationLapsed
		return out, nil
	}
	for _, idx := range r.GPUs {
		i := slices.IndexFunc(gpus, func(g nodeinfo.GPU) bool { return g.Index == idx })
		if i < 0 {
			out.WaitingFor = append(out.WaitingFor, fmt.Sprintf("GPU %d: not on the node", idx))
			continue
		}
		g := gpus[i]
		var why []string
		users := slices.Clone(g.UsedBy)
		for _, in := range g.Instances {
			users = append(users, in.UsedBy...)
		}
		if len(users) > 0 {
			slices.Sort(users)
			why = append(why, "held by "+strings.Join(slices.Compact(users), ", "))
		}
		switch {
		case len(g.Instances) > 0:
			why = append(why, fmt.Sprintf("MIG %s with %d instances", g.MigMode, len(g.Instances)))
		case g.MigMode != nodeinfo.MigModeDisabled && g.MigMode != nodeinfo.MigModeNA:
			why = append(why, "MIG "+g.MigMode)
		}
		if len(why) > 0 {
			out.WaitingFor = append(out.WaitingFor, fmt.Sprintf("GPU %d: %s", idx, strings.Join(why, "; ")))
		}
	}
	if len(out.WaitingFor) > 0 {
		out.State = ReservationWaiting
	}
	return out, nil
}

// DynamicSupply is a dynamic node's supply: its GPUs, free, partly used or
// full, and how many instances of each profile could be made now.
type DynamicSupply struct {
	// CanMake is, per resource, the most instances the GPUs' counters
	// still let the scheduler allocate at once (each profile alone: two
	// profiles draw on the same memory slices); Allocated the devices
	// of the resource allocated to claims.
	CanMake []ProfileSupply `json:"canMake"`
	GPUs    []DynamicGPU    `json:"gpus"`
}

// ProfileSupply is one resource of a dynamic node.
type ProfileSupply struct {
	// Profile is the MIG profile; "" for whole GPUs.
	Profile   string `json:"profile,omitempty"`
	Resource  string `json:"resource"`
	Free      int64  `json:"free"`
	Allocated int64  `json:"allocated"`
}

// DynamicGPU is one GPU of a dynamic node, by its UUID.
type DynamicGPU struct {
	UUID string `json:"uuid"`
	// State is free, partly used or full.
	State string `json:"state"`
	// Allocated are the devices allocated to claims, "profile at
	// start:size" ("whole GPU" for the GPU itself).
	Allocated []string `json:"allocated,omitempty"`
}

// dynamicSupply reads a node's pool; nil when it is not dynamic.
func dynamicSupply(node string, sl []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) *DynamicSupply {
	p := schedview.NewPool(node, sl, claims)
	if !p.Dynamic {
		return nil
	}
	out := &DynamicSupply{}
	free, used := p.FreeByProfile(), p.AllocatedByProfile()
	for _, profile := range slices.Sorted(maps.Keys(union(free, used))) {
		res := resourcename.GPU
		if profile != "" {
			res = resourcename.MIG(profile)
		}
		out.CanMake = append(out.CanMake, ProfileSupply{Profile: profile, Resource: string(res), Free: free[profile], Allocated: used[profile]})
	}
	slices.SortFunc(out.CanMake, func(a, b ProfileSupply) int { return cmp.Compare(a.Resource, b.Resource) })
	for _, g := range p.GPUs {
		dg := DynamicGPU{UUID: g.UUID, State: g.State()}
		for _, u := range g.Used {
			if u.Profile == "" {
				dg.Allocated = append(dg.Allocated, "whole GPU")
				continue
			}
			dg.Allocated = append(dg.Allocated, fmt.Sprintf("%s at %d:%d", u.Profile, u.Start, u.Size))
		}
		out.GPUs = append(out.GPUs, dg)
	}
	return out
}

func union(a, b map[string]int64) map[string]int64 {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// FreeCount is one resource's devices across the cluster.
type FreeCount struct {
	Resource string `json:"resource"`
	Free     int    `json:"free"`
	Total    int    `json:"total"`
}

// isMigflexNode tells whether a node carries anything migflex's agent
// publishes: nodes without are left out of an unfiltered status.
func isMigflexNode(n *corev1.Node) bool {
	_, layout := n.Annotations[nodeinfo.AnnotationLayout]
	_, state := n.Labels[nodeinfo.LabelMigConfigState]
	_, serving := n.Labels[nodeinfo.LabelServing]
	return layout || state || serving
}

// nodeStatus reads one Node; hold is how the planner reads its
// nvidia.com/mig.config's writer (its field manager and manual hold, at
// the time of the reading).
func nodeStatus(n *corev1.Node, hold plansnap.Options) NodeStatus {
	ns := NodeStatus{
		Name:    n.Name,
		Serving: cmp.Or(n.Labels[nodeinfo.LabelServing], nodeinfo.ServingDevicePlugin),
		State:   n.Labels[nodeinfo.LabelMigConfigState],
		Reason:  n.Annotations[nodeinfo.AnnotationReason],
		Source:  nodeinfo.Deciding(n.Labels, n.Annotations).String(),
		Planner: n.Labels[nodeinfo.LabelPlanner] == nodeinfo.PlannerEnabled,
	}
	if _, ok := n.Annotations[nodeinfo.AnnotationMigConfig]; ok {
		owner, at := plansnap.AnnotationOwner(n, nodeinfo.AnnotationMigConfig)
		ns.ConfigWriter = owner
		if !at.IsZero() {
			at = at.UTC()
			ns.ConfigWritten = &at
		}
		if until, held := hold.HeldUntil(owner, at); held && ns.Planner {
			until = until.UTC()
			ns.PlannerHeldUntil = &until
		}
	}
	if v, ok := n.Annotations[nodeinfo.AnnotationLayout]; ok {
		gpus, err := nodeinfo.ParseLayout(v)
		if err != nil {
			ns.Problems = append(ns.Problems, err.Error())
		}
		ns.GPUs = gpus
	} else {
		ns.Problems = append(ns.Problems, "no "+nodeinfo.AnnotationLayout+" annotation: the agent has not reported this node's GPUs")
	}
	resv, err := nodeReservation(n, ns.GPUs, hold.Now)
	if err != nil {
		ns.Problems = append(ns.Problems, err.Error())
	}
	ns.Reservation = resv
	return ns
}

// servedDevice is one device a node serves, as the scheduler counts it:
// res is the resource it is served as, total the devices it counts for
// in the allocatable (a shared device's replicas, else 1) and inUse those
// pods hold.
type servedDevice struct {
	res          corev1.ResourceName
	health       string
	usedBy       []string
	total, inUse int64
}

// devices calls f for each device a node serves: each MIG instance with a
// device and each whole GPU with MIG off.
func devices(gpus []nodeinfo.GPU, f func(servedDevice)) {
	each := func(res corev1.ResourceName, health string, usedBy []string, s *nodeinfo.Shared) {
		d := servedDevice{health: health, usedBy: usedBy}
		d.res, d.total, d.inUse = nodeinfo.Devices(res, usedBy, s)
		f(d)
	}
	for _, g := range gpus {
		if len(g.Instances) == 0 && g.MigMode != nodeinfo.MigModeEnabled {
			if g.Health != "" && g.Health != nodeinfo.HealthNotServed {
				each(resourcename.GPU, g.Health, g.UsedBy, g.Shared)
			}
			continue
		}
		for _, in := range g.Instances {
			if in.UUID == "" || in.Health == nodeinfo.HealthNotServed {
				continue
			}
			each(resourcename.MIG(in.Profile), in.Health, in.UsedBy, in.Shared)
		}
	}
}

// freeCounts totals the devices of nodes per resource: on a dynamic node
// what its GPUs' counters let be made (free) and that plus what is
// allocated (total), not its instances, which are all a claim's.
func freeCounts(nodes []NodeStatus) []FreeCount {
	byRes := map[corev1.ResourceName]*FreeCount{}
	for _, n := range nodes {
		if n.Dynamic != nil {
			for _, c := range n.Dynamic.CanMake {
				res := corev1.ResourceName(c.Resource)
				if byRes[res] == nil {
					byRes[res] = &FreeCount{Resource: c.Resource}
				}
				byRes[res].Free += int(c.Free)
				byRes[res].Total += int(c.Free + c.Allocated)
			}
			continue
		}
		devices(n.GPUs, func(d servedDevice) {
			c := byRes[d.res]
			if c == nil {
				c = &FreeCount{Resource: string(d.res)}
				byRes[d.res] = c
			}
			c.Total += int(d.total)
			if d.health == nodeinfo.HealthHealthy {
				c.Free += int(d.total - d.inUse)
			}
		})
	}
	out := make([]FreeCount, 0, len(byRes))
	for _, c := range byRes {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b FreeCount) int { return cmp.Compare(a.Resource, b.Resource) })
	return out
}

// BuildStatus is the status of nodes (all of them when names is empty,
// those migflex's agent reports on; else the named ones, in that order);
// hold is how the planner reads a human's edit of a node's
// nvidia.com/mig.config; dra, when not nil, are the DRA objects (slices
// and claims) a dynamic node's supply is read from.
func BuildStatus(all []corev1.Node, names []string, hold plansnap.Options, dra *DRAObjects) (Status, error) {
	var picked []*corev1.Node
	if len(names) == 0 {
		for i := range all {
			if isMigflexNode(&all[i]) {
				picked = append(picked, &all[i])
			}
		}
		slices.SortFunc(picked, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	} else {
		for _, name := range names {
			i := slices.IndexFunc(all, func(n corev1.Node) bool { return n.Name == name })
			if i < 0 {
				return Status{}, fmt.Errorf("node %q not found", name)
			}
			picked = append(picked, &all[i])
		}
	}
	st := Status{Nodes: make([]NodeStatus, 0, len(picked))}
	var sl []*resourceapi.ResourceSlice
	var claims []*resourceapi.ResourceClaim
	if dra != nil {
		for i := range dra.Slices {
			sl = append(sl, &dra.Slices[i])
		}
		for i := range dra.Claims {
			claims = append(claims, &dra.Claims[i])
		}
	}
	for _, n := range picked {
		ns := nodeStatus(n, hold)
		if ns.Serving == nodeinfo.ServingDRA {
			ns.DRAMode = n.Labels[nodeinfo.LabelDRAMode]
			ns.Dynamic = dynamicSupply(n.Name, sl, claims)
		}
		st.Nodes = append(st.Nodes, ns)
	}
	st.Free = freeCounts(st.Nodes)
	return st, nil
}

// needsLook tells whether a status deserves ExitAttention: a config that
// failed, or a device that is unhealthy.
func (st Status) needsLook() bool {
	for _, n := range st.Nodes {
		if n.State == nodeinfo.StateFailed || len(n.Problems) > 0 {
			return true
		}
		bad := false
		devices(n.GPUs, func(d servedDevice) {
			bad = bad || d.health == nodeinfo.HealthUnhealthy
		})
		if bad {
			return true
		}
	}
	return false
}

func statusCommand() command {
	manualHold := plansnap.DefaultManualHold
	return command{
		name: "status", args: "[NODE...]", outputs: []string{"wide", "json", "yaml"},
		flags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&manualHold, "manual-hold", plansnap.DefaultManualHold, "the planner's --manual-hold, to say until when it leaves a node alone after a hand edit")
		},
		run: func(ctx context.Context, r *runner, args []string) int {
			client, _, err := r.kube()
			if err != nil {
				return r.fail(err)
			}
			list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return r.fail(fmt.Errorf("listing nodes: %w", err))
			}
			dra, err := readSupply(ctx, client, list.Items)
			if apierrors.IsForbidden(err) {
				// Status of the Nodes still says most; a dynamic node's
				// supply needs the slices and claims.
				fmt.Fprintf(r.Err, "warning: %v: a dynamic DRA node's supply is not shown\n", err)
				dra, err = nil, nil
			}
			if err != nil {
				return r.fail(err)
			}
			st, err := BuildStatus(list.Items, args, plansnap.Options{FieldManager: plansnap.DefaultFieldManager, ManualHold: manualHold, Now: r.Now()}, dra)
			if err != nil {
				return r.fail(err)
			}
			switch r.g.Output {
			case "json", "yaml":
				if err := printData(r.Out, r.g.Output, st); err != nil {
					return r.fail(err)
				}
			default:
				renderStatus(r.Out, st, r.style, r.g.Output == "wide", manualHold)
			}
			if st.needsLook() {
				return ExitAttention
			}
			return ExitOK
		},
	}
}

// renderStatus prints st for people, in 80 columns unless wide;
// manualHold is the planner's, to say what holds a node.
func renderStatus(w io.Writer, st Status, s style, wide bool, manualHold time.Duration) {
	if len(st.Nodes) == 0 {
		fmt.Fprintln(w, "No node reports migflex's layout: is the agent running (kubectl get ds -A)?")
		return
	}
	for i, n := range st.Nodes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		renderNode(w, n, s, wide, manualHold)
	}
	fmt.Fprintln(w)
	renderFree(w, st.Free)
}

func renderNode(w io.Writer, n NodeStatus, s style, wide bool, manualHold time.Duration) {
	serving := n.Serving
	if n.DRAMode != "" {
		serving += " (" + n.DRAMode + ")"
	}
	head := fmt.Sprintf("NODE %s  serving %s  config %s", n.Name, serving, s.state(cmp.Or(n.State, "none")))
	switch {
	case n.PlannerHeldUntil != nil:
		head += "  planner: opted in, held"
	case n.Planner:
		head += "  planner: opted in"
	}
	fmt.Fprintln(w, head)
	source := n.Source
	if n.ConfigWriter != "" {
		// The writer is nvidia.com/mig.config's, which need not be the
		// deciding source.
		what := ", " + nodeinfo.AnnotationMigConfig
		if strings.HasSuffix(source, " "+nodeinfo.AnnotationMigConfig) {
			what = ","
		}
		source += what + " last written by " + n.ConfigWriter
		if n.ConfigWritten != nil {
			source += " at " + n.ConfigWritten.Format(time.RFC3339)
		}
	}
	for _, l := range wrap("  source: ", source) {
		fmt.Fprintln(w, l)
	}
	if n.PlannerHeldUntil != nil {
		held := fmt.Sprintf("held until %s: %s changed it less than %s (--manual-hold) ago, and the planner leaves a node alone that long after a change not its own",
			n.PlannerHeldUntil.Format(time.RFC3339), n.ConfigWriter, manualHold)
		for _, l := range wrap("  planner: ", held) {
			fmt.Fprintln(w, l)
		}
	}
	if n.Reason != "" {
		for _, l := range wrap("  reason: ", n.Reason) {
			fmt.Fprintln(w, l)
		}
	}
	for _, p := range n.Problems {
		for _, l := range wrap("  problem: ", p) {
			fmt.Fprintln(w, l)
		}
	}
	if r := n.Reservation; r != nil {
		for _, line := range describeNodeReservation(r) {
			for _, l := range wrap("  reserved: ", line) {
				fmt.Fprintln(w, l)
			}
		}
	}
	if n.Dynamic != nil {
		for _, l := range wrap("  dynamic: ", canMake(n.Dynamic)) {
			fmt.Fprintln(w, l)
		}
	}
	for _, g := range n.GPUs {
		line := fmt.Sprintf("  GPU %d  %s  MIG %s", g.Index, g.Model, g.MigMode)
		if r := n.Reservation; r != nil && r.State != ReservationLapsed && r.Holds(g.Index) {
			line += "  reserved"
		}
		if n.Dynamic != nil {
			if i := slices.IndexFunc(n.Dynamic.GPUs, func(d DynamicGPU) bool { return d.UUID == g.UUID }); i >= 0 {
				line += "  " + n.Dynamic.GPUs[i].State
			}
		}
		if wide {
			line += "  " + g.UUID
		}
		fmt.Fprintln(w, line)
		whole := len(g.Instances) == 0 && g.MigMode != nodeinfo.MigModeEnabled
		if len(g.Instances) == 0 && !whole {
			fmt.Fprintln(w, "    no instances")
			continue
		}
		podWidth := podColumn(g, whole)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		// The header's HEALTH is painted too: tabwriter counts the
		// escapes of the cells below it.
		fmt.Fprintf(tw, "    PROFILE\tAT\t%s\tDEVICE\tPOD\n", s.paint(ansiDefault, "HEALTH"))
		if whole {
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\n", "whole GPU", "-", s.health(cmp.Or(g.Health, nodeinfo.HealthNotServed)), shortID(g.UUID, wide),
				users(resourcename.GPU, g.UsedBy, g.Shared, podWidth, wide))
		}
		for _, in := range g.Instances {
			fmt.Fprintf(tw, "    %s\t%d:%d\t%s\t%s\t%s\n", in.Profile, in.Placement.Start, in.Placement.Size,
				s.health(in.Health), shortID(in.UUID, wide), users(resourcename.MIG(in.Profile), in.UsedBy, in.Shared, podWidth, wide))
		}
		_ = tw.Flush()
	}
}

// describeNodeReservation says a node's reservation in two lines: what is
// held, for whom, since and until when, and where it stands.
func describeNodeReservation(r *NodeReservation) []string {
	head := fmt.Sprintf("%s for pod %s since %s, until %s", gpuList(r.GPUs), r.Pod,
		r.Since.UTC().Format(time.RFC3339), r.Deadline.UTC().Format(time.RFC3339))
	if !r.Ready.IsZero() {
		head += " (expected free at " + r.Ready.UTC().Format(time.RFC3339) + ")"
	}
	if r.Writer != "" {
		head += ", written by " + r.Writer
	}
	var state string
	switch r.State {
	case ReservationLapsed:
		state = "lapsed: its deadline passed, the GPUs are offered to any pod again"
	case ReservationReady:
		state = "ready: its GPUs are all free and whole, offered at once"
	default:
		state = "waiting, the free devices withheld: " + strings.Join(r.WaitingFor, "; ")
	}
	return []string{head, state}
}

// gpuList is "GPU 1" or "GPUs 1, 2", as nodeinfo.Reservation says them.
func gpuList(idx []int) string {
	what := "GPU"
	if len(idx) > 1 {
		what = "GPUs"
	}
	gpus := make([]string, len(idx))
	for i, g := range idx {
		gpus[i] = fmt.Sprint(g)
	}
	return what + " " + strings.Join(gpus, ", ")
}

// canMake says what a dynamic node can still make.
func canMake(d *DynamicSupply) string {
	var parts []string
	for _, c := range d.CanMake {
		if c.Free > 0 {
			parts = append(parts, fmt.Sprintf("%s x%d", cmp.Or(c.Profile, "whole GPU"), c.Free))
		}
	}
	if len(parts) == 0 {
		return "instances are made at Prepare; no more can be made now"
	}
	return "instances are made at Prepare; can make now (each alone): " + strings.Join(parts, ", ")
}

// podColumn is how wide the POD column of g's table may be in 80
// columns: what the indent, the other columns (as wide as their widest
// cell) and the gaps between them leave, at least 16.
func podColumn(g nodeinfo.GPU, whole bool) int {
	profile, at, health := len("PROFILE"), len("AT"), len("HEALTH")
	if whole {
		profile, health = max(profile, len("whole GPU")), max(health, len(g.Health))
	}
	for _, in := range g.Instances {
		profile = max(profile, len(in.Profile))
		at = max(at, len(fmt.Sprintf("%d:%d", in.Placement.Start, in.Placement.Size)))
		health = max(health, len(in.Health))
	}
	const indent, gap, device = 4, 2, 13
	return max(16, width-indent-profile-at-health-device-4*gap)
}

// users is the POD cell of a device served as res: the pods holding it
// (podList), and for a shared device its replicas in use and the resource
// they are served as when it is renamed ("1/2 replicas: ns/a").
func users(res corev1.ResourceName, pods []string, sh *nodeinfo.Shared, n int, wide bool) string {
	if sh == nil {
		return podList(pods, n, wide)
	}
	served, total, inUse := nodeinfo.Devices(res, pods, sh)
	head := fmt.Sprintf("%d/%d replicas", inUse, total)
	if served != res {
		head += " of " + string(served)
	}
	list := "-"
	if len(pods) > 0 {
		list = strings.Join(pods, ",")
	}
	if wide {
		return head + ": " + list
	}
	return clip(head+": "+list, max(n, len(head)+8))
}

// podList is the pods holding a device, "-" for none, cut to n columns
// unless wide.
func podList(pods []string, n int, wide bool) string {
	if len(pods) == 0 {
		return "-"
	}
	s := strings.Join(pods, ",")
	if wide {
		return s
	}
	return clip(s, n)
}

func renderFree(w io.Writer, free []FreeCount) {
	if len(free) == 0 {
		fmt.Fprintln(w, "No device is served to pods.")
		return
	}
	fmt.Fprintln(w, "FREE DEVICES (all nodes shown)")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  RESOURCE\tFREE\tTOTAL")
	for _, c := range free {
		fmt.Fprintf(tw, "  %s\t%d\t%d\n", c.Resource, c.Free, c.Total)
	}
	_ = tw.Flush()
}
