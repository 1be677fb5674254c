package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The handles the fault tests break the cluster with: stopping and
// starting one process (hack/cluster/restart.sh --stop/--start), rebooting
// a node (hack/cluster/reboot.sh), killing the agent's process, and the
// simulated GPUs' state and faults as this host sees them on the node.

// SimConfigMap is the ConfigMap of the simulator's config the overlays
// install (deployments/kustomize/overlays/simulated).
const SimConfigMap = "migflex-sim-config"

// SimStateDir is where the node's agent keeps its simulated GPUs, as this
// host sees it: the local overlay mounts the node's
// /var/lib/kubelet/migflex/sim there (agent-local.yaml).
func (n LocalNode) SimStateDir() string { return filepath.Join(n.KubeletDir, "migflex", "sim") }

// DRAPluginDir is the node's DRA kubelet plugin's directory (its socket and
// checkpoint; draplugin's default StateDir).
func (n LocalNode) DRAPluginDir() string {
	return filepath.Join(n.KubeletDir, "plugins", "gpu.migflex.io")
}

// Stop stops one of the node's processes (kubelet, containerd; apiproxy on
// the nodes after the first), or with a component of the control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) that
// one, until Start: hack/cluster/restart.sh --stop.
func (c *Cluster) Stop(ctx context.Context, component string) (string, error) {
	return c.restartScript(ctx, "--stop", component)
}

// Start starts what Stop stopped, with its own command line, and returns
// once it answers: hack/cluster/restart.sh --start.
func (c *Cluster) Start(ctx context.Context, component string) (string, error) {
	return c.restartScript(ctx, "--start", component)
}

func (c *Cluster) restartScript(ctx context.Context, mode, component string) (string, error) {
	args := []string{mode, component}
	switch component {
	case "kubelet", "containerd", "apiproxy":
		args = append(args, c.NodeName)
	}
	return runHack(ctx, "restart.sh", args...)
}

// Reboot reboots the node as far as its processes go (hack/cluster/reboot.sh):
// its kubelet stopped, every container SIGKILLed, its containerd stopped,
// during run (if any) while it is down, then containerd and the kubelet
// started again. Not node 1, which runs the control plane.
func (c *Cluster) Reboot(ctx context.Context, during ...string) (string, error) {
	return runHack(ctx, "reboot.sh", append([]string{c.NodeName}, during...)...)
}

// runHack runs a script of hack/cluster and returns its output.
func runHack(ctx context.Context, script string, args ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "cluster", script), args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("hack/cluster/%s %s: %w: %s", script, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// SimCommand is the command line of `device-plugin sim ARGS` for the
// node's simulated GPUs, run on this host by the binary make build wrote
// (bin/device-plugin, which the agent's image holds too) against the
// node's state directory: it reaches the agent's simulator through its
// inbox while one runs, and the state itself while none does (a node that
// is down, an agent that was killed). It needs the simulator's config from
// the API server once (SimConfig); later calls work while the API server
// is down.
func (c *Cluster) SimCommand(ctx context.Context, args ...string) ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "bin", "device-plugin")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w (make build writes it; hack/cluster/e2e.sh runs make build)", err)
	}
	cfg, err := c.hostSimConfig(ctx)
	if err != nil {
		return nil, err
	}
	if len(args) == 0 {
		return nil, errors.New("sim: no command")
	}
	out := []string{bin, "sim", args[0], "--sim-config", cfg, "--node-name", c.NodeName}
	return append(out, args[1:]...), nil
}

// Sim runs `device-plugin sim ARGS` for the node (SimCommand) and returns
// its output.
func (c *Cluster) Sim(ctx context.Context, args ...string) (string, error) {
	argv, err := c.SimCommand(ctx, args...)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("sim %s on node %s: %w: %s", strings.Join(args, " "), c.NodeName, err, out.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// simConfigs caches each node's host-side simulator config file, by node
// name: written once, while the API server answers.
var simConfigs = map[string]string{}

// hostSimConfig writes the installed simulator config (the ConfigMap the
// agent mounts) with its stateDir set to where this host sees the node's,
// and returns its path.
func (c *Cluster) hostSimConfig(ctx context.Context) (string, error) {
	if p, ok := simConfigs[c.NodeName]; ok {
		return p, nil
	}
	cm, err := c.Client.CoreV1().ConfigMaps(MigflexNamespace).Get(ctx, SimConfigMap, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("the simulator's config: %w", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		return "", fmt.Errorf("ConfigMap %s config.yaml: %w", SimConfigMap, err)
	}
	cfg["stateDir"] = c.Local().SimStateDir()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "migflex-sim-"+c.NodeName+"-*.yaml")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return "", err
	}
	simConfigs[c.NodeName] = f.Name()
	return f.Name(), nil
}

// SimFault is one fault of the node's running simulator, as its faults.json
// lists it (docs/MODELS.md, Faults).
type SimFault struct {
	Fault struct {
		Name string `json:"name"`
		Kind string `json:"kind"`
		Call string `json:"call"`
	} `json:"fault"`
	Calls   int `json:"calls"`
	Fired   int `json:"fired"`
	Hanging int `json:"hanging"`
	// XidsSent counts the Xids a storm raised so far.
	XidsSent int  `json:"xidsSent"`
	Done     bool `json:"done"`
}

// SimFaults reads the faults of the node's simulator, by name.
func (n LocalNode) SimFaults() (map[string]SimFault, error) {
	b, err := os.ReadFile(filepath.Join(n.SimStateDir(), "faults.json"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]SimFault{}, nil
	}
	if err != nil {
		return nil, err
	}
	var f struct {
		Faults []SimFault `json:"faults"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(n.SimStateDir(), "faults.json"), err)
	}
	out := map[string]SimFault{}
	for _, x := range f.Faults {
		out[x.Fault.Name] = x
	}
	return out, nil
}

// WaitForSimFault waits until the node's simulator's fault name has fired
// and, with hanging, holds a call now: the moment a test injects its next
// fault at.
func (c *Cluster) WaitForSimFault(ctx context.Context, name string, hanging bool) (SimFault, error) {
	var got SimFault
	err := WaitFor(ctx, fmt.Sprintf("simulator fault %s on node %s to fire (hanging %v)", name, c.NodeName, hanging), Timeout, func(context.Context) (bool, error) {
		fs, err := c.Local().SimFaults()
		if err != nil {
			return false, err
		}
		got = fs[name]
		return got.Fired > 0 && (!hanging || got.Hanging > 0), nil
	})
	if err != nil {
		return got, fmt.Errorf("%w; it has %+v", err, got)
	}
	return got, nil
}

// SimInstance is one MIG device of the simulated GPUs' state: where it is
// and what it is, which a fault must not change under a pod.
type SimInstance struct {
	GPU       int
	GI, CI    uint32
	ProfileID uint32
	Start     int
	UUID      string
}

// SimGPU is one simulated GPU of the node's state.
type SimGPU struct {
	UUID       string
	MigEnabled bool
	// GIs counts its GPU instances, with a compute instance or not.
	GIs int
	// Devices are its MIG devices (compute instances), by UUID.
	Devices map[string]SimInstance
}

// SimState reads the node's simulated GPUs (state.json in its state
// directory, written atomically by the simulator).
func (n LocalNode) SimState() ([]SimGPU, error) {
	p := filepath.Join(n.SimStateDir(), "state.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var st struct {
		GPUs []struct {
			UUID       string `json:"uuid"`
			MigEnabled bool   `json:"migEnabled"`
			Instances  []struct {
				ID        uint32 `json:"id"`
				ProfileID uint32 `json:"profileID"`
				Start     int    `json:"start"`
				CIs       []struct {
					ID   uint32 `json:"id"`
					UUID string `json:"uuid"`
				} `json:"computeInstances"`
			} `json:"instances"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var out []SimGPU
	for i, g := range st.GPUs {
		sg := SimGPU{UUID: g.UUID, MigEnabled: g.MigEnabled, GIs: len(g.Instances), Devices: map[string]SimInstance{}}
		for _, gi := range g.Instances {
			for _, ci := range gi.CIs {
				sg.Devices[ci.UUID] = SimInstance{GPU: i, GI: gi.ID, CI: ci.ID, ProfileID: gi.ProfileID, Start: gi.Start, UUID: ci.UUID}
			}
		}
		out = append(out, sg)
	}
	return out, nil
}

// KillAgent sends sig to every process of the node's agent container (the
// agent and nothing else: it runs alone in its container), as the kernel's
// OOM killer or a crash would end it, and returns the pod it killed. The
// kubelet restarts the container.
func (c *Cluster) KillAgent(ctx context.Context, sig syscall.Signal) (string, error) {
	pod, err := c.AgentPod(ctx)
	if err != nil {
		return "", err
	}
	pids, err := podPIDs(string(pod.UID))
	if err != nil {
		return "", err
	}
	var killed []string
	for _, pid := range pids {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmdline), "/device-plugin\x00") {
			continue // the pod's pause process, or gone
		}
		if err := syscall.Kill(pid, sig); err != nil {
			return "", fmt.Errorf("kill -%d %d (the agent of node %s): %w", sig, pid, c.NodeName, err)
		}
		killed = append(killed, strconv.Itoa(pid))
	}
	if len(killed) == 0 {
		return "", fmt.Errorf("no /device-plugin process in the cgroups of pod %s (UID %s) on this host", pod.Name, pod.UID)
	}
	return fmt.Sprintf("pod %s, PIDs %s", pod.Name, strings.Join(killed, " ")), nil
}

// podPIDs are the processes in the cgroups of the pod with uid, as the
// kubelet names them (pod<uid> with the cgroupfs driver, pod<uid with
// underscores> with systemd's).
func podPIDs(uid string) ([]int, error) {
	marks := []string{"pod" + uid + "/", "pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/"}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, marks[0]) || strings.Contains(line, marks[1]) {
				out = append(out, pid)
				break
			}
		}
	}
	return out, nil
}
