package draplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// A prepared claim gone from the API server (deleted, or deleted and made
// again under its name) is unprepared; one that exists, or that cannot be
// read, stays.
func TestReleaseStale(t *testing.T) {
	_, discover := simGPUs(t)
	kept := allocated("ns", "kept", "p1", [2]string{"r", mig0})
	deleted := allocated("ns", "deleted", "p2", [2]string{"r", mig4})
	remade := allocated("ns", "remade", "p3", [2]string{"r", whole})
	client := fakeClient(kept, deleted, remade)
	d := newDirs(t)
	drv := startDriver(t, client, d, Options{StaleClaimCheck: -1})
	if err := drv.Publish(discover(), nil); err != nil {
		t.Fatal(err)
	}
	k := dialKubelet(t, d)
	for uid, r := range k.prepare(kept, deleted, remade) {
		if r.GetError() != "" {
			t.Fatalf("prepare %s: %s", uid, r.GetError())
		}
	}

	ctx := context.Background()
	claims := client.ResourceV1().ResourceClaims("ns")
	if err := claims.Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := claims.Delete(ctx, "remade", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := allocated("ns", "remade", "p3", [2]string{"r", whole})
	again.UID = types.UID("uid-remade-again")
	if _, err := claims.Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server cannot be asked about "kept" this time.
	client.PrependReactor("get", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "kept" {
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})

	released, err := drv.ReleaseStale(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"uid-deleted", "uid-remade"}, released); diff != "" {
		t.Errorf("released (-want +got):\n%s", diff)
	}
	if p := drv.Prepared(); len(p) != 1 || p[0].UID != "uid-kept" {
		t.Errorf("prepared after release: %+v", p)
	}
	for _, uid := range []string{"uid-deleted", "uid-remade"} {
		if _, err := os.Stat(filepath.Join(d.cdi, "migflex.io-gpu_"+uid+".json")); !os.IsNotExist(err) {
			t.Errorf("%s's CDI spec is still there: %v", uid, err)
		}
	}
	if released, err := drv.ReleaseStale(ctx); err != nil || len(released) != 0 {
		t.Errorf("again: %v, %v; want nothing", released, err)
	}

	// A restarted agent checks at once: "kept" is gone by then.
	drv.Stop()
	client.ReactionChain = client.ReactionChain[1:]
	if err := claims.Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	drv = startDriver(t, client, d, Options{})
	waitFor(t, "the restarted driver to release the deleted claim", func() bool { return len(drv.Prepared()) == 0 })
	if entries, _ := os.ReadDir(d.cdi); len(entries) != 0 {
		t.Errorf("CDI specs left: %v", entries)
	}
}
