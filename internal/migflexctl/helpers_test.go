package migflexctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/planner/simmodels"
)

const h100 = "H100-SXM5-80GB"

var now = time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)

// gpu is an H100 with instances "1g.10gb@3:1", "=ns/pod" for one in use,
// "!" after the placement for an unhealthy one.
func gpu(index int, instances ...string) nodeinfo.GPU {
	g := nodeinfo.GPU{Index: index, UUID: fmt.Sprintf("GPU-aaaaaaaa-bbbb-cccc-dddd-%012d", index), Model: h100, MigMode: nodeinfo.MigModeEnabled}
	for _, s := range instances {
		s, user, _ := strings.Cut(s, "=")
		in := nodeinfo.Instance{Health: nodeinfo.HealthHealthy}
		if t, ok := strings.CutSuffix(s, "!"); ok {
			s, in.Health = t, nodeinfo.HealthUnhealthy
		}
		name, at, _ := strings.Cut(s, "@")
		in.Profile = name
		fmt.Sscanf(at, "%d:%d", &in.Placement.Start, &in.Placement.Size)
		in.GI = uint32(len(g.Instances) + 1)
		in.UUID = fmt.Sprintf("MIG-%d%07d-0000-5000-8000-000000000000", index, in.Placement.Start)
		if user != "" {
			in.UsedBy = []string{user}
		}
		g.Instances = append(g.Instances, in)
	}
	return g
}

// wholeGPU is an H100 with MIG off, held by users.
func wholeGPU(index int, users ...string) nodeinfo.GPU {
	return nodeinfo.GPU{Index: index, UUID: fmt.Sprintf("GPU-aaaaaaaa-bbbb-cccc-dddd-%012d", index), Model: h100,
		MigMode: nodeinfo.MigModeDisabled, Health: nodeinfo.HealthHealthy, UsedBy: users}
}

// node is a Node as an agent publishes it, in state, with gpus.
func node(t *testing.T, name, state string, gpus ...nodeinfo.GPU) *corev1.Node {
	t.Helper()
	m, _ := simmodels.Get(h100)
	profiles, err := json.Marshal([]nodeinfo.Model{nodeinfo.NewModel(h100, m.Profiles)})
	if err != nil {
		t.Fatal(err)
	}
	layout, err := json.Marshal(gpus)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{nodeinfo.LabelMigConfigState: state, corev1.LabelHostname: name},
		Annotations: map[string]string{
			nodeinfo.AnnotationProfiles: string(profiles),
			nodeinfo.AnnotationLayout:   string(layout),
		},
	}}
}

// pendingPod is a pod the scheduler found no node for, asking for n of res.
func pendingPod(name string, res corev1.ResourceName, n int64) *corev1.Pod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{res: q}, Limits: corev1.ResourceList{res: q},
		}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		}}},
	}
}

// run runs the plugin on a fake cluster of objs with args and returns
// its exit code, standard output and standard error.
func run(t *testing.T, client kubernetes.Interface, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &App{
		In: strings.NewReader(stdin), Out: &out, Err: &errOut,
		Getenv:     func(string) string { return "" },
		Connect:    func(Globals) (kubernetes.Interface, string, error) { return client, "ns", nil },
		IsTerminal: func(io.Writer) bool { return false },
		Now:        func() time.Time { return now },
	}
	code := app.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

func fakeClient(objs ...runtime.Object) *fake.Clientset { return fake.NewClientset(objs...) }

// checkWidth fails for a line of text wider than 80 columns.
func checkWidth(t *testing.T, text string) {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if n := len([]rune(l)); n > width {
			t.Errorf("line of %d columns, more than %d:\n%s", n, width, l)
		}
	}
}
