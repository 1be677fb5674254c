package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/migflex/migflex/internal/deviceplugin"
)

// blockingPDB creates a PodDisruptionBudget that allows no disruption of
// pod.
func blockingPDB(t *testing.T, api *apiServer, pod *corev1.Pod) *policyv1.PodDisruptionBudget {
	t.Helper()
	minAvailable := intstr.FromInt32(1)
	pdb, err := api.client.PolicyV1().PodDisruptionBudgets(pod.Namespace).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: pod.Labels},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pdb
}

func httptestGet(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	if rec.Code != http.StatusOK {
		t.Errorf("GET %s: %d %s", path, rec.Code, body)
	}
	return string(body)
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// nopPlugin serves nothing.
type nopPlugin struct{}

func (nopPlugin) Run(ctx context.Context) error                                  { <-ctx.Done(); return nil }
func (nopPlugin) Update(context.Context, map[string][]deviceplugin.Device) error { return nil }
func (nopPlugin) Retain(context.Context, map[string]bool)                        {}
func (nopPlugin) Resources() []deviceplugin.ResourceStatus                       { return nil }
func (nopPlugin) Changes() <-chan struct{}                                       { return nil }
func (nopPlugin) Drain(context.Context, []string) error                          { return nil }
func (nopPlugin) Undrain([]string)                                               {}

// nopMutationCache holds nothing.
type nopMutationCache struct{}

func (nopMutationCache) GetByKey(string) (any, bool, error) { return nil, false, nil }
func (nopMutationCache) Mutation(any)                       {}
