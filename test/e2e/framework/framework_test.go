package framework

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestWaitForPodPhase: the wait returns the pod in a phase it asks for,
// and fails at once, saying why, on a pod in a final phase it did not ask
// for (the kubelet's UnexpectedAdmissionError leaves a pod Failed for good):
// it does not wait out Timeout on a pod that will never run.
func TestWaitForPodPhase(t *testing.T) {
	for _, tc := range []struct {
		name    string
		phase   corev1.PodPhase
		want    []corev1.PodPhase
		wantErr string
	}{
		{"running", corev1.PodRunning, []corev1.PodPhase{corev1.PodRunning}, ""},
		{"failed, asked", corev1.PodFailed, []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}, ""},
		{"rejected by the kubelet", corev1.PodFailed, []corev1.PodPhase{corev1.PodRunning}, `is Failed, which it cannot leave, not [Running]: reason "UnexpectedAdmissionError"`},
		{"succeeded, running asked", corev1.PodSucceeded, []corev1.PodPhase{corev1.PodRunning}, "is Succeeded, which it cannot leave"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
				Status: corev1.PodStatus{Phase: tc.phase, Reason: "UnexpectedAdmissionError"}}
			c := &Cluster{Client: fake.NewClientset(pod)}
			got, err := c.WaitForPodPhase(context.Background(), "ns", "p", tc.want...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("WaitForPodPhase: %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("WaitForPodPhase: %v, want an error containing %q", err, tc.wantErr)
			case got == nil || got.Status.Phase != tc.phase:
				t.Fatalf("WaitForPodPhase returned pod %v, want it in phase %s", got, tc.phase)
			}
		})
	}
}

// TestWaitForKeepsTheFinding: a wait that times out reports the last
// finding, not the deadline cutting the last call short (client-go's rate
// limiter refuses a call it cannot serve before the deadline).
func TestWaitForKeepsTheFinding(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := WaitFor(ctx, "the node", Timeout, func(context.Context) (bool, error) {
		calls++
		if calls == 1 {
			return false, errors.New(`state "pending"`)
		}
		cancel() // the wait ends at this poll, its call cut short
		return false, errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
	})
	if err == nil || !strings.Contains(err.Error(), `last error: state "pending"`) {
		t.Fatalf("WaitFor: %v, want the finding before the deadline", err)
	}
}
