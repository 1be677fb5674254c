package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Names of the objects deployments/kustomize installs (the seeds' names).
const (
	MigflexNamespace = "gpu-webhook"
	AgentDaemonSet   = "migflex-agent"
	// AgentDRADaemonSet serves the nodes labelled DRANodeLabel through DRA
	// (the local overlay's dra-pool, the chart's agent.draNodeSelector).
	AgentDRADaemonSet = "migflex-agent-dra"
	AgentContainer    = "agent"
	WebhookName       = "gpu-webhook"
	CertgenJob        = "migflex-certgen"
	WebhookConfig     = "gpu-allocation-webhook"
	// LocalOverlay is the kustomize overlay for this repository's local
	// cluster, relative to the repository root.
	LocalOverlay = "deployments/kustomize/overlays/local"
)

// RepoRoot is the root of the migflex module: the first directory upwards
// from the working directory (go test runs in the package's) whose go.mod
// declares it.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && slices.Contains(strings.Split(string(b), "\n"), "module github.com/migflex/migflex") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the github.com/migflex/migflex module")
		}
		dir = parent
	}
}

// InstallMigflex applies the kustomize overlay at dir (kubectl apply -k, as
// a user installs migflex) and waits until it works: the certgen Job has
// completed, the agent DaemonSets and the webhook Deployment are rolled
// out, and the API server gets answers from the webhook. Applying again
// over an installed migflex changes nothing and returns as soon as it is
// ready.
func (c *Cluster) InstallMigflex(ctx context.Context, dir string) error {
	if out, err := c.Kubectl(ctx, "apply", "-k", dir); err != nil {
		return fmt.Errorf("installing %s: %w\n%s", dir, err, out)
	}
	if err := c.WaitForJobComplete(ctx, MigflexNamespace, CertgenJob); err != nil {
		return err
	}
	if err := c.WaitForAgentRollouts(ctx, MigflexNamespace); err != nil {
		return err
	}
	if err := c.WaitForDeploymentRollout(ctx, MigflexNamespace, WebhookName); err != nil {
		return err
	}
	return c.WaitForWebhookAnswers(ctx)
}

// WaitForAgentRollouts waits for the agent DaemonSet in namespace, and for
// the DRA pool's (AgentDRADaemonSet) when the cluster has a node labelled
// for it: without one that DaemonSet has no pod to roll out.
func (c *Cluster) WaitForAgentRollouts(ctx context.Context, namespace string) error {
	if err := c.WaitForDaemonSetRollout(ctx, namespace, AgentDaemonSet); err != nil {
		return err
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: DRANodeLabel + "=" + DRANodeLabelValue})
	if err != nil {
		return err
	}
	if len(nodes.Items) == 0 {
		return nil
	}
	return c.WaitForDaemonSetRollout(ctx, namespace, AgentDRADaemonSet)
}

// WaitForJobComplete waits until the Job has completed. A Job that fails
// (or was deleted by its TTL before this looked) ends the wait with the
// logs of its pods.
func (c *Cluster) WaitForJobComplete(ctx context.Context, namespace, name string) error {
	var job *batchv1.Job
	err := WaitFor(ctx, fmt.Sprintf("job %s/%s to complete", namespace, name), Timeout, func(ctx context.Context) (bool, error) {
		j, err := c.Client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		job = j
		for _, cond := range j.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				continue
			}
			switch cond.Type {
			case batchv1.JobComplete:
				return true, nil
			case batchv1.JobFailed:
				return false, fmt.Errorf("job failed: %s: %s", cond.Reason, cond.Message)
			}
		}
		return false, nil
	})
	if err != nil && job != nil {
		return fmt.Errorf("%w; status %+v; pod logs:\n%s", err, job.Status, c.logsOf(ctx, namespace, "job-name="+name))
	}
	return err
}

// WaitForDaemonSetRollout waits, like kubectl rollout status, until every
// scheduled pod of the DaemonSet runs its current template and is available.
func (c *Cluster) WaitForDaemonSetRollout(ctx context.Context, namespace, name string) error {
	var last *appsv1.DaemonSet
	err := WaitFor(ctx, fmt.Sprintf("daemonset %s/%s to roll out", namespace, name), Timeout, func(ctx context.Context) (bool, error) {
		ds, err := c.Client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = ds
		s := ds.Status
		return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled > 0 &&
			s.UpdatedNumberScheduled == s.DesiredNumberScheduled &&
			s.NumberAvailable == s.DesiredNumberScheduled && s.NumberUnavailable == 0, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w; status %+v; pods: %s", err, last.Status, c.podSummary(ctx, namespace, labels.Set(last.Spec.Selector.MatchLabels).String()))
	}
	return err
}

// WaitForDeploymentRollout waits, like kubectl rollout status, until every
// replica runs the current template, is available, and no old one is left.
func (c *Cluster) WaitForDeploymentRollout(ctx context.Context, namespace, name string) error {
	var last *appsv1.Deployment
	err := WaitFor(ctx, fmt.Sprintf("deployment %s/%s to roll out", namespace, name), Timeout, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = d
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want &&
			s.AvailableReplicas == want && s.Replicas == want, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w; status %+v; pods: %s", err, last.Status, c.podSummary(ctx, namespace, "app="+name))
	}
	return err
}

// WaitForWebhookAnswers waits until the API server reaches the fallback
// webhook. Its failurePolicy is Ignore, so a webhook the API server cannot
// reach would let pods through silently: the probe is a server-side dry
// run of a MIG pod with an invalid fallback-policy annotation, which only
// the webhook denies. Dry runs store nothing and the webhook has no side
// effects.
func (c *Cluster) WaitForWebhookAnswers(ctx context.Context) error {
	pod := c.TestboxPod(metav1.NamespaceDefault, "migflex-webhook-probe", "env")
	pod.Spec.NodeName = ""
	pod.Annotations = map[string]string{"migflex.io/fallback-policy": "not-a-policy"}
	one := resource.MustParse("1")
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"nvidia.com/mig-1g.10gb": one},
		Limits:   corev1.ResourceList{"nvidia.com/mig-1g.10gb": one},
	}
	var last error
	err := WaitFor(ctx, "the API server to get answers from the fallback webhook", Timeout, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		last = err
		return err != nil && strings.Contains(err.Error(), "denied the request"), nil
	})
	if err != nil {
		return fmt.Errorf("%w; last dry run: %v; webhook pods: %s", err, last, c.podSummary(ctx, MigflexNamespace, "app="+WebhookName))
	}
	return nil
}

// AgentPod returns the running agent pod on the node, of whichever agent
// DaemonSet serves it.
func (c *Cluster) AgentPod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := c.Client.CoreV1().Pods(MigflexNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app=" + AgentDaemonSet,
		FieldSelector: "spec.nodeName=" + c.NodeName + ",status.phase=Running",
	})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no running agent pod on node %s", c.NodeName)
}

// podSummary is one line per pod matching selector: phase and container
// states, for error messages.
func (c *Cluster) podSummary(ctx context.Context, namespace, selector string) string {
	pods, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	if len(pods.Items) == 0 {
		return "none"
	}
	var b strings.Builder
	for i := range pods.Items {
		p := &pods.Items[i]
		fmt.Fprintf(&b, "\n  %s %s %s", p.Name, p.Status.Phase, containerStates(p))
	}
	return b.String()
}

// logsOf returns the logs of every pod matching selector.
func (c *Cluster) logsOf(ctx context.Context, namespace, selector string) string {
	pods, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i := range pods.Items {
		logs, err := c.PodLogs(ctx, namespace, pods.Items[i].Name, "")
		if err != nil {
			logs = err.Error()
		}
		fmt.Fprintf(&b, "--- %s %s\n%s\n", pods.Items[i].Name, containerStates(&pods.Items[i]), logs)
	}
	return b.String()
}
