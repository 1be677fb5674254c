package agent

import (
	"context"
	"fmt"
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

	"github.com/migflex/migflex/internal/domain/mig"
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

// nopServer serves nothing.
type nopServer struct{}

func (nopServer) Run(ctx context.Context) error          { <-ctx.Done(); return nil }
func (nopServer) Serve(context.Context, []mig.GPU) error { return nil }
func (nopServer) Servable([]mig.GPU) error               { return nil }
func (nopServer) Drain(context.Context, []string) error  { return nil }
func (nopServer) Undrain([]string)                       {}
func (nopServer) Served() map[string]map[string]bool     { return nil }
func (nopServer) Visible(context.Context, *corev1.Node) (string, []string, error) {
	return "", nil, nil
}
func (nopServer) Publisher() (string, string, string) { return "", "", "" }
func (nopServer) Labels([]mig.GPU) map[string]string  { return nil }
func (nopServer) Changes() <-chan struct{}            { return nil }
func (nopServer) Visibility() <-chan struct{}         { return nil }

var _ Server = nopServer{}

// oneProfile is a Server.Servable that, like the device plugin under
// --mig-strategy=single, serves at most one MIG profile on the node.
func oneProfile(gpus []mig.GPU) error {
	profiles := map[string]bool{}
	for _, g := range gpus {
		for _, in := range g.Instances {
			if in.HasCI {
				profiles[in.Profile] = true
			}
		}
	}
	if len(profiles) > 1 {
		return fmt.Errorf("the layout cannot be served under --mig-strategy=single: %d profiles", len(profiles))
	}
	return nil
}

// serveAny is a Server.Servable that serves every layout.
func serveAny([]mig.GPU) error { return nil }

// nopMutationCache holds nothing.
type nopMutationCache struct{}

func (nopMutationCache) GetByKey(string) (any, bool, error) { return nil, false, nil }
func (nopMutationCache) Mutation(any)                       {}
