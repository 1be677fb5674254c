package draplugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// Dynamic mode against a real kube-apiserver: where it keeps partitionable
// devices the counters are published and the placements offered; where it
// drops them (DRAPartitionableDevices off, as in 1.35) the driver says so
// (Mode, a Warning Event on the Node), serves static mode, and leaves the
// instances that exist alone.
func TestIntegrationDynamicModeOrFallback(t *testing.T) {
	for _, gateOff := range []bool{false, true} {
		t.Run(fmt.Sprintf("DRAPartitionableDevices off: %v", gateOff), func(t *testing.T) {
			gates := "DRADeviceTaints=true,DRAPartitionableDevices=true"
			if gateOff {
				gates = "DRAPartitionableDevices=false"
			}
			cfg := testenv.Start(t, testenv.WithAPIServerFlag("feature-gates", gates))
			client := kubernetes.NewForConfigOrDie(cfg)
			ctx := context.Background()
			if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			in := dynamicNode(t)
			// An idle instance of a static layout: dynamic mode would
			// destroy it at start, static mode serves it.
			if _, err := in.CreateInstance(0, "3g.40gb", 4); err != nil {
				t.Fatal(err)
			}
			drv := startDriver(t, client, newDirs(t), Options{Mode: ModeDynamic, Instances: in})
			publishDynamic(t, drv, in)

			mode, why := drv.Mode()
			if !gateOff {
				if mode != ModeDynamic || why != "" {
					t.Fatalf("mode %s (%q), want dynamic", mode, why)
				}
				waitFor(t, "the counters and the placements", func() bool {
					devs := sliceDevices(t, client)
					counters := false
					list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
					if err != nil {
						t.Fatal(err)
					}
					for _, s := range list.Items {
						counters = counters || len(s.Spec.SharedCounters) > 0
					}
					return counters && slices.Contains(devs, "gpu-0-mig-1g10gb-19-6") && slices.Contains(devs, "gpu-0")
				})
				if got := instancesOn(t, in); len(got) != 0 {
					t.Errorf("instances in dynamic mode after start: %v; want the static one destroyed", got)
				}
				return
			}
			if mode != ModeStatic || !strings.Contains(why, "DRAPartitionableDevices") {
				t.Fatalf("mode %s (%q); want static, naming DRAPartitionableDevices", mode, why)
			}
			waitDevices(t, client, drv, "gpu-0-mig-3g40gb-9-4")
			if got := instancesOn(t, in); !slices.Equal(got, []string{"3g.40gb@4"}) {
				t.Errorf("instances after falling back: %v; want the static one kept", got)
			}
			events, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			found := slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
				return e.Reason == ReasonDynamicUnavailable && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == node &&
					strings.Contains(e.Message, "DRAPartitionableDevices")
			})
			if !found {
				t.Errorf("no Warning Event %s on the Node; events: %+v", ReasonDynamicUnavailable, events.Items)
			}
		})
	}
}
