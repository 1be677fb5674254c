package manifests

import (
	"context"
	"crypto/tls"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/platform/metricsserver"
	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// The RBAC each rendering ships is what secure metrics need, against a real
// API server with real ServiceAccount tokens: each component, running a
// metrics server as its own ServiceAccount, may review the tokens of its
// scrapers, and serves /metrics to a token bound to migflex-metrics-reader
// (by the chart's metrics.readers, or by hand as the kustomize comment
// says), and to no other: not the components' own.
func TestMetricsRBAC(t *testing.T) {
	renderings := map[string]objects{
		"helm": helmTemplate(t, scenario{name: "metrics-readers", set: []string{"planner.enabled=true",
			"metrics.readers[0].kind=ServiceAccount", "metrics.readers[0].name=prometheus", "metrics.readers[0].namespace=monitoring"}}),
		"kustomize": kustomizeBuildTestdata(t, "simulated-planner"),
	}
	cfg := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	c := newCluster(t, cfg)
	ctx := t.Context()
	for _, ns := range []string{namespace, "monitoring"} {
		mustCreate(t, admin.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	mustCreate(t, admin.CoreV1().ServiceAccounts("monitoring"), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}})
	token := func(ns, name string) string {
		t.Helper()
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	for _, name := range []string{"helm", "kustomize"} {
		t.Run(name, func(t *testing.T) {
			for _, o := range renderings[name] {
				switch o.GetKind() {
				case "ServiceAccount", "ClusterRole", "ClusterRoleBinding":
					if err := c.apply(ctx, o, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			if name == "kustomize" {
				// What the comment on migflex-metrics-reader says to run.
				mustCreate(t, admin.RbacV1().ClusterRoleBindings(), &rbacv1.ClusterRoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: "migflex-metrics-reader-by-hand"},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "migflex-metrics-reader"},
					Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}},
				})
				defer func() {
					if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, "migflex-metrics-reader-by-hand", metav1.DeleteOptions{}); err != nil {
						t.Error(err)
					}
				}()
			}
			reader := token("monitoring", "prometheus")
			for _, component := range []string{"migflex-agent", "gpu-webhook", "migflex-planner"} {
				t.Run(component, func(t *testing.T) {
					url := serveMetricsAs(t, cfg, token(namespace, component))
					scraper := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
					scrape := func(tok string) (int, string) {
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
						req.Header.Set("Authorization", "Bearer "+tok)
						resp, err := scraper.Do(req)
						if err != nil {
							t.Fatal(err)
						}
						defer resp.Body.Close()
						b, _ := io.ReadAll(resp.Body)
						return resp.StatusCode, string(b)
					}
					// RBAC bindings reach the API server's authorizer
					// through its informer, a moment after they are made.
					var code int
					var body string
					err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
						code, body = scrape(reader)
						return code == http.StatusOK, nil
					})
					if err != nil || !strings.Contains(body, "migflex_manifests_test 1") {
						t.Errorf("the reader's token: %d %q, want 200 with the metrics", code, body)
					}
					for _, other := range []string{"migflex-agent", "gpu-webhook", "migflex-planner"} {
						if code, _ := scrape(token(namespace, other)); code != http.StatusForbidden {
							t.Errorf("%s's token: %d, want 403", other, code)
						}
					}
				})
			}
		})
	}
}

// serveMetricsAs runs a metrics server whose reviews are made with
// saToken, until the test ends, and returns its URL.
func serveMetricsAs(t *testing.T, cfg *rest.Config, saToken string) string {
	t.Helper()
	rc := rest.AnonymousClientConfig(cfg)
	rc.BearerToken = saToken
	var healthy atomic.Bool
	reg := newGauge("migflex_manifests_test")
	s, err := metricsserver.New(metricsserver.Options{
		Addr: "127.0.0.1:0", Handler: metricsserver.Handler(reg, &healthy, ""),
		Reviewer: metricsserver.NewReviewer(kubernetes.NewForConfigOrDie(rc)),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "https://" + s.Addr().String()
}

// newGauge is a registry with one gauge, name, at 1.
func newGauge(name string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "a test gauge"})
	g.Set(1)
	reg.MustRegister(g)
	return reg
}

// Every rendering serves metrics on each component's own port, with the
// kubelet's probes of the agent and the planner over HTTPS on it (the
// webhook's stay on its admission port), and, with metrics.certSecretName,
// the Secret mounted where --metrics-cert-dir points.
func TestMetricsServing(t *testing.T) {
	type rendering struct {
		name       string
		objs       objects
		certSecret bool
	}
	var renderings []rendering
	for _, s := range scenarios {
		renderings = append(renderings, rendering{"helm/" + s.name, helmTemplate(t, s), slices.Contains(s.set, "metrics.certSecretName=migflex-metrics-tls")})
	}
	for _, o := range overlays {
		renderings = append(renderings, rendering{"kustomize/" + o, kustomizeBuild(t, o), false})
	}
	if !slices.ContainsFunc(renderings, func(r rendering) bool { return r.certSecret }) {
		t.Fatal("no scenario sets metrics.certSecretName=migflex-metrics-tls")
	}
	for _, r := range renderings {
		t.Run(r.name, func(t *testing.T) {
			certSecret := r.certSecret
			var pods []corev1.PodSpec
			for _, o := range r.objs.ofKind("DaemonSet") {
				pods = append(pods, as[appsv1.DaemonSet](t, o).Spec.Template.Spec)
			}
			for _, o := range r.objs.ofKind("Deployment") {
				pods = append(pods, as[appsv1.Deployment](t, o).Spec.Template.Spec)
			}
			for _, pod := range pods {
				c := pod.Containers[0]
				addr, certDir := flagValue(c.Args, "--metrics-addr"), flagValue(c.Args, "--metrics-cert-dir")
				_, port, ok := strings.Cut(addr, ":")
				if !ok || port == "" {
					t.Errorf("%s: --metrics-addr=%q, want a port of its own", c.Command, addr)
					continue
				}
				if c.Command[0] != "/webhook" {
					for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
						if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Path != "/healthz" || strconv.Itoa(int(portOf(c, p.HTTPGet.Port.String()))) != port {
							t.Errorf("%s %s probe %+v: want HTTPS GET /healthz on the metrics port %s", c.Command, name, p, port)
						}
					}
				} else if listen := flagValue(c.Args, "--listen"); strings.TrimPrefix(listen, ":") == port {
					t.Errorf("webhook metrics on its admission port %s", listen)
				}
				if !certSecret {
					if certDir != "" {
						t.Errorf("%s: --metrics-cert-dir=%s without metrics.certSecretName", c.Command, certDir)
					}
					continue
				}
				mounted := ""
				for _, m := range c.VolumeMounts {
					if m.MountPath == certDir {
						for _, v := range pod.Volumes {
							if v.Name == m.Name && v.Secret != nil {
								mounted = v.Secret.SecretName
							}
						}
					}
				}
				if certDir == "" || mounted != "migflex-metrics-tls" {
					t.Errorf("%s: --metrics-cert-dir=%q holds Secret %q, want migflex-metrics-tls", c.Command, certDir, mounted)
				}
			}
		})
	}
}

// flagValue is the value of the last --name=value in args.
func flagValue(args []string, name string) string {
	v := ""
	for _, a := range args {
		if rest, ok := strings.CutPrefix(a, name+"="); ok {
			v = rest
		}
	}
	return v
}

// With metrics.serviceMonitor.enabled each component has a headless
// Service whose endpoints are its pods alone, at their metrics port, and a
// ServiceMonitor that selects that Service alone and scrapes it over HTTPS
// with a bearer token: Prometheus's own (a token file), or the Secret of
// metrics.serviceMonitor.authorization. The Prometheus Operator's CRDs
// validate the fields (TestManifestsAcceptedByAPIServer).
func TestServiceMonitors(t *testing.T) {
	if objs := helmTemplate(t, scenarioNamed(t, "planner")); len(objs.ofKind("ServiceMonitor")) != 0 {
		t.Error("ServiceMonitors without metrics.serviceMonitor.enabled")
	}
	for _, name := range []string{"monitoring", "monitoring-host-network"} {
		t.Run(name, func(t *testing.T) {
			s := scenarioNamed(t, name)
			objs := helmTemplate(t, s)
			pods := map[string]corev1.PodTemplateSpec{}
			for _, o := range objs.ofKind("DaemonSet") {
				pods[o.GetName()] = as[appsv1.DaemonSet](t, o).Spec.Template
			}
			for _, o := range objs.ofKind("Deployment") {
				pods[o.GetName()] = as[appsv1.Deployment](t, o).Spec.Template
			}
			var services []*corev1.Service
			for _, o := range objs.ofKind("Service") {
				services = append(services, as[corev1.Service](t, o))
			}
			monitors := objs.ofKind("ServiceMonitor")
			if len(monitors) != len(pods) {
				t.Errorf("%d ServiceMonitors for %d components %v", len(monitors), len(pods), slices.Collect(maps.Keys(pods)))
			}
			for _, m := range monitors {
				component := m.GetName()
				pod, ok := pods[component]
				if !ok {
					t.Errorf("ServiceMonitor %s names no component", component)
					continue
				}
				sel, _, _ := unstructured.NestedStringMap(m.Object, "spec", "selector", "matchLabels")
				var matched []*corev1.Service
				for _, svc := range services {
					if labels.SelectorFromSet(sel).Matches(labels.Set(svc.Labels)) {
						matched = append(matched, svc)
					}
				}
				if len(matched) != 1 {
					t.Errorf("%s selects %d Services, want its own one", component, len(matched))
					continue
				}
				svc := matched[0]
				if svc.Spec.ClusterIP != corev1.ClusterIPNone {
					t.Errorf("Service %s is not headless", svc.Name)
				}
				for other, p := range pods {
					if got := labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)); got != (other == component) {
						t.Errorf("Service %s selects %s's pods: %v", svc.Name, other, got)
					}
				}
				addr := flagValue(pod.Spec.Containers[0].Args, "--metrics-addr")
				if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || ":"+svc.Spec.Ports[0].TargetPort.String() != addr {
					t.Errorf("Service %s ports %+v, want metrics to the container's %s", svc.Name, svc.Spec.Ports, addr)
				}
				eps, _, _ := unstructured.NestedSlice(m.Object, "spec", "endpoints")
				if len(eps) != 1 {
					t.Fatalf("%s endpoints %v", component, eps)
				}
				ep := eps[0].(map[string]any)
				if ep["port"] != "metrics" || ep["scheme"] != "https" || ep["path"] != "/metrics" {
					t.Errorf("%s endpoint %v, want HTTPS /metrics at port metrics", component, ep)
				}
				_, secretToken := ep["authorization"]
				if want := slices.Contains(s.set, "metrics.serviceMonitor.authorization.type=Bearer"); secretToken != want || (ep["bearerTokenFile"] != nil) == want {
					t.Errorf("%s endpoint %v: authorization %v, bearerTokenFile %v", component, ep, secretToken, ep["bearerTokenFile"])
				}
				if tls, _ := ep["tlsConfig"].(map[string]any); tls["insecureSkipVerify"] != true {
					t.Errorf("%s tlsConfig %v, want the default insecureSkipVerify for the self-signed certificates", component, tls)
				}
				if slices.Contains(s.set, "metrics.serviceMonitor.labels.release=kube-prometheus-stack") && m.GetLabels()["release"] != "kube-prometheus-stack" {
					t.Errorf("%s labels %v lack metrics.serviceMonitor.labels", component, m.GetLabels())
				}
			}
		})
	}
}
