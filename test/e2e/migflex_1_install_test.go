//go:build e2e

package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/test/e2e/framework"
)

// TestMigflexInstalled installs migflex from its own manifests
// (deployments/kustomize/overlays/local, simulated GPUs) and checks that
// every part is live: the certificate was injected, the agent reports the
// simulated GPUs on the Node, the real kubelet has the devices the agent
// registered, and the API server gets answers from the webhook (the
// install waits for that). On the other nodes, each agent reports the GPUs
// the overlay gives that node, served as its pool says.
func TestMigflexInstalled(t *testing.T) {
	migflex(t)
	ctx := t.Context()

	whc, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, framework.WebhookConfig, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range whc.Webhooks {
		if len(w.ClientConfig.CABundle) == 0 {
			t.Errorf("webhook %s has no caBundle: certgen did not inject it", w.Name)
		}
	}

	// Whatever layout the node has (none on a fresh cluster), the agent
	// reports it, and the kubelet's allocatable follows its devices.
	var layout []framework.LayoutGPU
	node, err := cluster.WaitForNode(ctx, "the agent's layout and the kubelet's allocatable to agree", timeout, func(n *corev1.Node) error {
		l, err := framework.NodeLayout(n)
		if err != nil {
			return err
		}
		layout = l
		return checkAllocatable(n, counts(framework.LayoutDevices(l)))
	})
	if err != nil {
		t.Fatal(err)
	}
	uuids := map[string]bool{}
	for i, g := range layout {
		if g.Index != i || g.Model != simModel || !strings.HasPrefix(g.UUID, "GPU-") || uuids[g.UUID] {
			t.Errorf("GPU %d in the layout: %+v, want index %d, a simulated %s with a GPU- UUID of its own", i, g, i, simModel)
		}
		uuids[g.UUID] = true
	}
	if len(layout) != simGPUs {
		t.Fatalf("layout %+v, want %d simulated %s (the local overlay's sim-config)", layout, simGPUs, simModel)
	}
	for k, want := range map[string]string{labelGPUProduct: simModel, labelGPUCount: strconv.Itoa(simGPUs), labelMigCapable: "true", labelMigStrategy: "mixed"} {
		if got := node.Labels[k]; got != want {
			t.Errorf("label %s=%q, want %q", k, got, want)
		}
	}

	// The kubelet's own device list (pod-resources), beyond the Node status.
	got, err := framework.KubeletDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(framework.LayoutDevices(layout), got); diff != "" {
		t.Errorf("kubelet devices (pod-resources) vs the agent's layout (-layout +kubelet):\n%s", diff)
	}

	// The agent runs the simulated backend, whose state `sim show` reads
	// from inside the agent's container.
	out, err := cluster.ExecInAgent(ctx, "/device-plugin", "sim", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range layout {
		if !strings.Contains(out, g.UUID) || !strings.Contains(out, simModel) {
			t.Errorf("sim show in the agent does not list GPU %d %s (%s):\n%s", g.Index, g.UUID, simModel, out)
		}
	}

	var others []simNode
	if len(cluster.Nodes) > 1 {
		others = append(others, draNode(t))
	}
	if len(cluster.Nodes) > 2 {
		others = append(others, b200Node(t))
	}
	for _, n := range others {
		serving := "device-plugin"
		if n.dra {
			serving = "dra"
		}
		node := n.waitServing(t, serving)
		l, err := framework.NodeLayout(node)
		if err != nil {
			t.Fatal(err)
		}
		var models []string
		for _, g := range l {
			models = append(models, g.Model)
		}
		if len(l) != n.gpus || strings.Count(strings.Join(models, " "), n.model) != n.gpus {
			t.Errorf("node %s: GPUs %v, want %d %s (the local overlay's sim-config)", n.NodeName, models, n.gpus, n.model)
		}
		if node.Labels[labelGPUProduct] != n.model {
			t.Errorf("node %s: label %s=%q, want %s", n.NodeName, labelGPUProduct, node.Labels[labelGPUProduct], n.model)
		}
	}
}
