package manifests

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// webhookDrainSeconds is how long the webhook drains in-flight requests
// after SIGTERM (webhook.Options.ShutdownTimeout's default).
const webhookDrainSeconds = 10

// hitlessRollout lists why a rolling update of the webhook Deployment could
// miss an admission (the webhook's failurePolicy Ignore admits a pod
// unchecked when no replica answers): an old pod going before a new one is
// ready, a terminating pod that stops serving before the API server stops
// sending to it, or, on the host network, replicas that cannot share the
// port.
func hitlessRollout(d *appsv1.Deployment, svc *corev1.Service) []string {
	var out []string
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	s := d.Spec.Strategy
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil {
		out = append(out, fmt.Sprintf("strategy %+v, want RollingUpdate", s))
	} else {
		unavailable, err1 := intstr.GetScaledValueFromIntOrPercent(orDefault(s.RollingUpdate.MaxUnavailable), replicas, false)
		surge, err2 := intstr.GetScaledValueFromIntOrPercent(orDefault(s.RollingUpdate.MaxSurge), replicas, true)
		if err1 != nil || err2 != nil || unavailable != 0 || surge < 1 {
			out = append(out, fmt.Sprintf("rolling update maxUnavailable %v maxSurge %v (%d, %d of %d replicas): want no old pod going before a new one is ready (0 unavailable, a surge of at least 1)",
				s.RollingUpdate.MaxUnavailable, s.RollingUpdate.MaxSurge, unavailable, surge, replicas))
		}
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	sleep := int64(0)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		sleep = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if sleep < 1 {
		out = append(out, fmt.Sprintf("preStop %+v: want a sleep, so a terminating pod serves while its endpoint is withdrawn", c.Lifecycle))
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	if grace < sleep+webhookDrainSeconds {
		out = append(out, fmt.Sprintf("terminationGracePeriodSeconds %d < preStop %d s + the webhook's %d s drain", grace, sleep, webhookDrainSeconds))
	}
	if pod.HostNetwork {
		if !slices.Contains(c.Args, "--reuse-port") {
			out = append(out, fmt.Sprintf("host network without --reuse-port (args %q): a new pod cannot bind the port an old one holds", c.Args))
		}
		if len(c.Ports) > 0 {
			out = append(out, fmt.Sprintf("host network with declared ports %+v: the scheduler takes them for host ports and refuses a second pod on the node", c.Ports))
		}
		port := ""
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--listen="); ok {
				_, port, _ = strings.Cut(v, ":")
			}
		}
		if svc == nil || len(svc.Spec.Ports) != 1 || strconv.Itoa(svc.Spec.Ports[0].TargetPort.IntValue()) != port {
			out = append(out, fmt.Sprintf("Service %v: want targetPort %s, the --listen port, by number", svc, port))
		}
		for what, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil || strconv.Itoa(p.HTTPGet.Port.IntValue()) != port {
				out = append(out, fmt.Sprintf("%s probe %+v: want port %s by number", what, p, port))
			}
		}
	}
	return out
}

// orDefault is a rolling update's maxSurge or maxUnavailable, or the API's
// default (25%) when unset.
func orDefault(v *intstr.IntOrString) *intstr.IntOrString {
	if v == nil {
		d := intstr.FromString("25%")
		return &d
	}
	return v
}

// TestWebhookRolloutsAreHitless: every overlay and every chart scenario
// rolls the webhook without a moment when no replica answers.
func TestWebhookRolloutsAreHitless(t *testing.T) {
	check := func(t *testing.T, objs objects) {
		d := get[appsv1.Deployment](t, objs, "Deployment", "gpu-webhook")
		var svc *corev1.Service
		if o := objs.find("Service", "gpu-webhook"); o != nil {
			svc = as[corev1.Service](t, o)
		}
		for _, p := range hitlessRollout(d, svc) {
			t.Error(p)
		}
	}
	for _, o := range overlays {
		t.Run(o, func(t *testing.T) { check(t, kustomizeBuild(t, o)) })
	}
	helmPath(t)
	for _, s := range scenarios {
		if slices.Contains(s.set, "webhook.enabled=false") {
			continue
		}
		t.Run("helm "+s.name, func(t *testing.T) { check(t, helmTemplate(t, s)) })
	}
}

// The checks above can fail: each way of breaking a rollout is caught.
func TestHitlessRolloutChecks(t *testing.T) {
	good := func() (*appsv1.Deployment, *corev1.Service) {
		two, zero, one := int32(2), intstr.FromInt32(0), intstr.FromInt32(1)
		grace := int64(30)
		d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{
			Replicas: &two,
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{
					Args:      []string{"--listen=:9443"},
					Ports:     []corev1.ContainerPort{{Name: "https", ContainerPort: 9443}},
					Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}},
				}},
			}},
		}}
		return d, &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{TargetPort: intstr.FromString("https")}}}}
	}
	if d, s := good(); len(hitlessRollout(d, s)) != 0 {
		t.Fatalf("a hitless Deployment fails: %q", hitlessRollout(d, s))
	}
	tests := map[string]struct {
		breakIt func(*appsv1.Deployment, *corev1.Service)
		want    string
	}{
		"one replica, maxSurge 0 (the local overlay before)": {func(d *appsv1.Deployment, _ *corev1.Service) {
			replicas, zero, one := int32(1), intstr.FromInt32(0), intstr.FromInt32(1)
			d.Spec.Replicas = &replicas
			d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable = &zero, &one
		}, "maxUnavailable"},
		"half unavailable": {func(d *appsv1.Deployment, _ *corev1.Service) {
			half := intstr.FromString("50%")
			d.Spec.Strategy.RollingUpdate.MaxUnavailable = &half
		}, "maxUnavailable"},
		"no surge": {func(d *appsv1.Deployment, _ *corev1.Service) {
			zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
			d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable = &zero, &one
		}, "maxUnavailable"},
		"recreate": {func(d *appsv1.Deployment, _ *corev1.Service) {
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		}, "want RollingUpdate"},
		"no preStop": {func(d *appsv1.Deployment, _ *corev1.Service) { d.Spec.Template.Spec.Containers[0].Lifecycle = nil }, "preStop"},
		"short grace": {func(d *appsv1.Deployment, _ *corev1.Service) {
			g := int64(10)
			d.Spec.Template.Spec.TerminationGracePeriodSeconds = &g
		}, "terminationGracePeriodSeconds"},
		"host network without reuse-port": {func(d *appsv1.Deployment, _ *corev1.Service) { d.Spec.Template.Spec.HostNetwork = true }, "--reuse-port"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, s := good()
			tc.breakIt(d, s)
			got := strings.Join(hitlessRollout(d, s), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("problems %q, want one about %q", got, tc.want)
			}
		})
	}
}
