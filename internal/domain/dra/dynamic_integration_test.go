package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/migflex/migflex/internal/domain/gpumodel"
	"github.com/migflex/migflex/internal/domain/mig"
	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// apiSlices is a pool as the ResourceSlice controller writes it: one
// object per slice, all at one generation, each counting the pool's
// slices.
func apiSlices(node string, res resourceslice.DriverResources) []resourceapi.ResourceSlice {
	pool := res.Pools[node]
	out := make([]resourceapi.ResourceSlice, len(pool.Slices))
	for i, s := range pool.Slices {
		out[i] = resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", node, DriverName, i)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         DriverName,
				NodeName:       ptr.To(node),
				Pool:           resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		}
	}
	return out
}

// startPartitionable starts a control plane that keeps partitionable
// devices: from 1.36 as the API server runs by default, with no feature
// gate or runtime-config set (resource.k8s.io/v1 is on by default,
// DRAPartitionableDevices beta and on); on an older one, found from its
// version, a second one with DRAPartitionableDevices (and DRADeviceTaints)
// turned on, where they are alpha, so the test runs on every minor the
// envtest assets may be linked to.
func startPartitionable(t *testing.T) *rest.Config {
	t.Helper()
	cfg := testenv.Start(t)
	v, err := kubernetes.NewForConfigOrDie(cfg).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil {
		t.Fatalf("server version %+v: %v", v, err)
	}
	if v.Major == "1" && minor < 36 {
		t.Logf("kube-apiserver %s: DRAPartitionableDevices is alpha and off there; starting one with it on", v.GitVersion)
		cfg = testenv.Start(t, testenv.WithAPIServerFlag("feature-gates", "DRADeviceTaints=true,DRAPartitionableDevices=true"))
	}
	return cfg
}

// The API server's own validation (see startPartitionable) accepts
// the pool of an 8-GPU node of every built-in model, and of a node that
// mixes MIG, MIG off and a GPU without MIG, and stores the counters and
// what each device consumes instead of dropping them as it does for a
// field whose gate is off. The refusals at the end show the limits this
// package keeps to are the server's.
func TestIntegrationDynamicSlicesPassTheAPI(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(startPartitionable(t))
	ctx := context.Background()

	create := func(t *testing.T, node string, res resourceslice.DriverResources) {
		t.Helper()
		for _, s := range apiSlices(node, res) {
			got, err := client.ResourceV1().ResourceSlices().Create(ctx, &s, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("slice %s: %v", s.Name, err)
			}
			if len(got.Spec.SharedCounters) != len(s.Spec.SharedCounters) || len(got.Spec.Devices) != len(s.Spec.Devices) {
				t.Fatalf("slice %s stored with %d counter sets and %d devices, sent %d and %d", s.Name,
					len(got.Spec.SharedCounters), len(got.Spec.Devices), len(s.Spec.SharedCounters), len(s.Spec.Devices))
			}
			for i, d := range got.Spec.Devices {
				if len(d.ConsumesCounters) != len(s.Spec.Devices[i].ConsumesCounters) {
					t.Fatalf("slice %s: device %s stored consuming %v, sent %v (is DRAPartitionableDevices off?)", s.Name, d.Name, d.ConsumesCounters, s.Spec.Devices[i].ConsumesCounters)
				}
			}
		}
	}
	nodeOf := func(model string) string { return strings.ToLower(model) }

	for _, m := range gpumodel.Builtin() {
		t.Run(m.Name, func(t *testing.T) {
			var gpus []mig.GPU
			for i := range 8 {
				gpus = append(gpus, gpu(t, i, m.Name))
			}
			offers, err := Offers(gpus)
			if err != nil {
				t.Fatal(err)
			}
			node := nodeOf(m.Name)
			res, err := DynamicResources(node, offers, nil, UnhealthyTaint)
			if err != nil {
				t.Fatal(err)
			}
			create(t, node, res)
			devices := 0
			for _, o := range offers {
				devices += len(o.Devices)
			}
			t.Logf("%d devices in %d slices", devices, len(res.Pools[node].Slices))
		})
	}

	t.Run("mixed node, one GPU tainted", func(t *testing.T) {
		noMIG := mig.GPU{Index: 2, Minor: 2, UUID: "GPU-2", Model: "NVIDIA L4", MemoryMiB: 23034}
		offers, err := Offers([]mig.GPU{gpu(t, 0, "H100-SXM5-80GB"), wholeGPU(t, 1, "H100-SXM5-80GB"), noMIG, gpu(t, 3, "A30-24GB")})
		if err != nil {
			t.Fatal(err)
		}
		res, err := DynamicResources("mixed", offers, map[string]Fault{"GPU-3": {Xid: 79}}, UnhealthyTaint)
		if err != nil {
			t.Fatal(err)
		}
		create(t, "mixed", res)
	})

	// What the API refuses, so the acceptance above means something.
	offers, err := Offers([]mig.GPU{gpu(t, 0, "H200-SXM-141GB"), gpu(t, 1, "H200-SXM-141GB"), gpu(t, 2, "H200-SXM-141GB")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := DynamicResources("refused", offers, nil, UnhealthyTaint)
	if err != nil {
		t.Fatal(err)
	}
	good := apiSlices("refused", res)
	var all []resourceapi.Device
	for _, s := range good[1:] {
		all = append(all, s.Spec.Devices...)
	}
	refusals := []struct {
		name  string
		spec  func(s *resourceapi.ResourceSliceSpec)
		wants string
	}{
		{"counters and devices in one slice", func(s *resourceapi.ResourceSliceSpec) {
			s.SharedCounters, s.Devices = good[0].Spec.SharedCounters, good[1].Spec.Devices
		}, "only one of"},
		{"65 devices consuming counters", func(s *resourceapi.ResourceSliceSpec) {
			s.Devices = all[:resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures+1]
		}, "Too many"},
		{"nine counter sets", func(s *resourceapi.ResourceSliceSpec) {
			for i := range 9 {
				cs := good[0].Spec.SharedCounters[0]
				cs.Name = CounterSetName(10 + i)
				s.SharedCounters = append(s.SharedCounters, cs)
			}
		}, "Too many"},
	}
	for _, r := range refusals {
		t.Run("refused: "+r.name, func(t *testing.T) {
			s := good[0]
			s.Name = "refused-" + strings.ReplaceAll(r.name, " ", "-")
			s.Spec.SharedCounters, s.Spec.Devices = nil, nil
			r.spec(&s.Spec)
			_, err := client.ResourceV1().ResourceSlices().Create(ctx, &s, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), r.wants) {
				t.Errorf("err = %v, want one saying %q", err, r.wants)
			}
		})
	}
}

// poolState is what the API server holds of a node's pool: its slices in
// name order (the order the scheduler walks them in).
type poolState struct {
	slices []resourceapi.ResourceSlice
}

func listPool(ctx context.Context, client kubernetes.Interface, node string) (poolState, error) {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + node})
	if err != nil {
		return poolState{}, err
	}
	items := list.Items
	slices.SortFunc(items, func(a, b resourceapi.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
	return poolState{slices: items}, nil
}

// complete reports whether the pool is whole at one generation, and which.
func (p poolState) complete() (int64, bool) {
	if len(p.slices) == 0 {
		return 0, false
	}
	gen := p.slices[0].Spec.Pool.Generation
	for _, s := range p.slices {
		if s.Spec.Pool.Generation != gen || s.Spec.Pool.ResourceSliceCount != int64(len(p.slices)) {
			return 0, false
		}
	}
	return gen, true
}

// Through the ResourceSlice controller, as the kubelet plugin helper
// publishes: the pool reaches the API server whole, at one generation,
// its slices named in the order given (counters first, then the devices
// in offer order), and a GPU turning unhealthy rewrites the one slice
// that holds its devices, in place. On an API server with DRAPartitionableDevices off
// (1.35's default) the controller reports the dropped fields as a
// DroppedFieldsError naming the gate: how an agent can tell that dynamic
// mode cannot be served there.
func TestIntegrationDynamicPoolThroughTheSliceController(t *testing.T) {
	for _, gateOff := range []bool{false, true} {
		t.Run(fmt.Sprintf("DRAPartitionableDevices off: %v", gateOff), func(t *testing.T) {
			var cfg *rest.Config
			if gateOff {
				cfg = testenv.Start(t, testenv.WithAPIServerFlag("feature-gates", "DRAPartitionableDevices=false"))
			} else {
				cfg = startPartitionable(t)
			}
			client := kubernetes.NewForConfigOrDie(cfg)
			ctx := t.Context()
			const node = "ctl"
			if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var gpus []mig.GPU
			for i := range 8 {
				gpus = append(gpus, gpu(t, i, "H200-SXM-141GB"))
			}
			offers, err := Offers(gpus)
			if err != nil {
				t.Fatal(err)
			}
			res, err := DynamicResources(node, offers, nil, UnhealthyTaint)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var errs []error
			ctl, err := resourceslice.StartController(ctx, resourceslice.Options{
				DriverName: DriverName, KubeClient: client,
				Owner:     &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node},
				Resources: &res,
				ErrorHandler: func(_ context.Context, err error, _ string) {
					mu.Lock()
					defer mu.Unlock()
					errs = append(errs, err)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ctl.Stop)

			if gateOff {
				err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
					mu.Lock()
					defer mu.Unlock()
					for _, err := range errs {
						var dropped *resourceslice.DroppedFieldsError
						if errors.As(err, &dropped) && slices.Contains(dropped.DisabledFeatures(), "DRAPartitionableDevices") {
							return true, nil
						}
					}
					return false, nil
				})
				if err != nil {
					t.Fatalf("no DroppedFieldsError naming DRAPartitionableDevices; errors: %v", errs)
				}
				return
			}

			want := res.Pools[node].Slices
			// waitPool waits for the whole pool with done true of it.
			waitPool := func(what string, done func(poolState) bool) poolState {
				t.Helper()
				var p poolState
				err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					var err error
					if p, err = listPool(ctx, client, node); err != nil {
						return false, nil
					}
					_, ok := p.complete()
					return ok && len(p.slices) == len(want) && done(p), nil
				})
				if err != nil {
					mu.Lock()
					defer mu.Unlock()
					t.Fatalf("%s: never seen; %d slices; controller errors: %v", what, len(p.slices), errs)
				}
				return p
			}
			tainted := func(p poolState) int {
				n := 0
				for _, s := range p.slices {
					for _, d := range s.Spec.Devices {
						if len(d.Taints) > 0 {
							n++
						}
					}
				}
				return n
			}
			check := func(p poolState) {
				t.Helper()
				var names, wantNames []string
				for i, s := range p.slices {
					if len(s.Spec.SharedCounters) != len(want[i].SharedCounters) || len(s.Spec.Devices) != len(want[i].Devices) {
						t.Errorf("slice %d (%s): %d counter sets and %d devices, want %d and %d", i, s.Name,
							len(s.Spec.SharedCounters), len(s.Spec.Devices), len(want[i].SharedCounters), len(want[i].Devices))
					}
					for _, d := range s.Spec.Devices {
						names = append(names, d.Name)
					}
				}
				for _, o := range offers {
					for _, d := range o.Devices {
						wantNames = append(wantNames, d.Name)
					}
				}
				if !slices.Equal(names, wantNames) {
					t.Errorf("devices in slice-name order differ from the offers' order:\n got %v\nwant %v", names, wantNames)
				}
			}
			before := waitPool("the pool", func(poolState) bool { return true })
			check(before)
			gen, _ := before.complete()

			// GPU 3 turns unhealthy: its devices, all in one slice, are
			// tainted in one update of that slice, at the same generation.
			res, err = DynamicResources(node, offers, map[string]Fault{gpus[3].UUID: {Xid: 79}}, UnhealthyTaint)
			if err != nil {
				t.Fatal(err)
			}
			want = res.Pools[node].Slices
			ctl.Update(&res)
			after := waitPool("GPU 3's devices tainted", func(p poolState) bool { return tainted(p) == len(offers[3].Devices) })
			check(after)
			if g, _ := after.complete(); g != gen {
				t.Errorf("generation %d after one GPU's taints, was %d", g, gen)
			}
			changed := 0
			for i := range after.slices {
				if after.slices[i].ResourceVersion != before.slices[i].ResourceVersion {
					changed++
				}
			}
			if changed != 1 {
				t.Errorf("%d slices rewritten for one GPU's taints, want 1", changed)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(errs) > 0 {
				t.Errorf("controller errors: %v", errs)
			}
		})
	}
}
