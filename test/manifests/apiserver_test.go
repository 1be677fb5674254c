package manifests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/migflex/migflex/internal/testsupport/testenv"
	"github.com/migflex/migflex/test/apiwarn"
)

// fieldManager names these tests in managedFields.
const fieldManager = "migflex-manifests-test"

// cluster is a client for a testenv API server that maps kinds to
// resources.
type cluster struct {
	cfg    *rest.Config
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newCluster(t testing.TB, cfg *rest.Config) *cluster {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{
		cfg:    cfg,
		dyn:    dynamic.NewForConfigOrDie(cfg),
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
	}
}

// apply server-side-applies o, for real or as a dry run.
func (c *cluster) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	gvk := o.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s: %w", key(o), err)
	}
	var ri dynamic.ResourceInterface = c.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = c.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	// Server-side apply rejects fields the schema does not declare, so a
	// misspelt field fails here rather than vanishing.
	if _, err := ri.Apply(ctx, o.GetName(), o, opts); err != nil {
		return fmt.Errorf("%s: %w", key(o), err)
	}
	return nil
}

// Every object of every rendering is accepted by a real kube-apiserver
// (envtest's: the default minor of hack/cluster/k8s/minors), as `kubectl
// apply --server-side --dry-run=server` would send it, and draws no
// warning that an API or field it uses is deprecated; namespaces are
// created for real first, since a dry run into a missing namespace is
// refused.
func TestManifestsAcceptedByAPIServer(t *testing.T) {
	// Render first: a missing helm or kubectl skips before the control
	// plane starts.
	type rendering struct {
		name string
		objs objects
	}
	var renderings []rendering
	for _, s := range scenarios {
		renderings = append(renderings, rendering{"helm/" + s.name, helmTemplate(t, s)})
	}
	for _, o := range overlays {
		renderings = append(renderings, rendering{"kustomize/" + o, kustomizeBuild(t, o)})
	}
	for _, o := range testOverlays {
		renderings = append(renderings, rendering{"kustomize/testdata/" + o, kustomizeBuildTestdata(t, o)})
	}

	cfg := testenv.Start(t)
	warnings := &apiwarn.Collector{Source: "apply"}
	cfg.WarningHandlerWithContext = warnings
	c := newCluster(t, cfg)
	ctx := t.Context()
	installCertManagerStubs(t, cfg)
	installPrometheusOperatorCRDs(t, cfg)
	// An established CRD reaches discovery a moment later.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		c.mapper.Reset()
		for _, gk := range []schema.GroupKind{{Group: "cert-manager.io", Kind: "Certificate"}, {Group: "cert-manager.io", Kind: "Issuer"},
			{Group: "monitoring.coreos.com", Kind: "PrometheusRule"}, {Group: "monitoring.coreos.com", Kind: "ServiceMonitor"}} {
			if _, err := c.mapper.RESTMapping(gk); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the CRDs never reached discovery: %v", err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": namespace},
	}}
	if err := c.apply(ctx, ns, false); err != nil {
		t.Fatal(err)
	}

	for _, r := range renderings {
		t.Run(r.name, func(t *testing.T) {
			if len(r.objs) == 0 {
				t.Fatal("nothing rendered")
			}
			for _, o := range r.objs {
				dryRun := o.GetKind() != "Namespace"
				warnings.Take()
				if err := c.apply(ctx, o, dryRun); err != nil {
					t.Errorf("the API server refuses it: %v", err)
				}
				for _, w := range apiwarn.Deprecations(warnings.Take()) {
					t.Errorf("%s: the API server calls it deprecated: %s", key(o), w.Message)
				}
			}
		})
	}

	// The check above can fail: the API server's own deprecation warning
	// (a node selector on beta.kubernetes.io/arch, deprecated since 1.14)
	// reaches the handler and is recognised.
	t.Run("a deprecated field is caught", func(t *testing.T) {
		o := renderings[0].objs.find("Deployment", "gpu-webhook").DeepCopy()
		if err := unstructured.SetNestedStringMap(o.Object, map[string]string{"beta.kubernetes.io/arch": "amd64"},
			"spec", "template", "spec", "nodeSelector"); err != nil {
			t.Fatal(err)
		}
		warnings.Take()
		if err := c.apply(ctx, o, true); err != nil {
			t.Fatal(err)
		}
		if got := warnings.Take(); len(apiwarn.Deprecations(got)) != 1 {
			t.Fatalf("warnings %v, want one deprecation for beta.kubernetes.io/arch", got)
		}
	})

	// The check above can fail: a field the schema lacks is refused.
	t.Run("a misspelt field is refused", func(t *testing.T) {
		o := renderings[0].objs.find("Deployment", "gpu-webhook").DeepCopy()
		if err := unstructured.SetNestedField(o.Object, int64(2), "spec", "replica"); err != nil {
			t.Fatal(err)
		}
		err := c.apply(ctx, o, true)
		if err == nil || !strings.Contains(err.Error(), "replica") {
			t.Fatalf("apply with spec.replica: %v, want it refused", err)
		}
	})
	// ...and so is one of a PrometheusRule: the CRDs are the real ones.
	t.Run("a misspelt field of a rule is refused", func(t *testing.T) {
		o := helmTemplate(t, scenarioNamed(t, "prometheus-rules")).find("PrometheusRule", "migflex").DeepCopy()
		groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
		groups[0].(map[string]any)["rules"].([]any)[0].(map[string]any)["fro"] = "5m"
		if err := unstructured.SetNestedSlice(o.Object, groups, "spec", "groups"); err != nil {
			t.Fatal(err)
		}
		err := c.apply(ctx, o, true)
		if err == nil || !strings.Contains(err.Error(), "fro") {
			t.Fatalf("apply with a rule's fro: %v, want it refused", err)
		}
	})
}

// installPrometheusOperatorCRDs creates the Prometheus Operator's
// CustomResourceDefinitions the chart's objects use, the released ones
// (testdata/crds), and waits until they are established.
func installPrometheusOperatorCRDs(t *testing.T, cfg *rest.Config) {
	t.Helper()
	client := apiextensionsclient.NewForConfigOrDie(cfg)
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "test/manifests/testdata/crds/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in testdata/crds: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := sigsyaml.UnmarshalStrict(data, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		createCRD(t, client, crd)
	}
}

// installCertManagerStubs creates CustomResourceDefinitions for the two
// cert-manager kinds the charts use, accepting any content: cert-manager's
// own CRDs are not available offline, so the dry run checks only that the
// objects are well formed and of those kinds. The Certificate's fields are
// checked in TestHelmTemplate.
func installCertManagerStubs(t *testing.T, cfg *rest.Config) {
	t.Helper()
	client := apiextensionsclient.NewForConfigOrDie(cfg)
	preserve := true
	for _, kind := range []string{"Certificate", "Issuer"} {
		plural := strings.ToLower(kind) + "s"
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".cert-manager.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "cert-manager.io",
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
				Scope: apiextensionsv1.NamespaceScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: &preserve,
					}},
				}},
			},
		}
		createCRD(t, client, crd)
	}
}

// createCRD creates crd (unless it exists) and waits until it is
// established.
func createCRD(t *testing.T, client apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(t.Context(), crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not established: %v", crd.Name, err)
	}
}
