// Package cluster runs the benchmarks' API server and fills it with the
// fleet: etcd and kube-apiserver from the project's envtest cache, started
// through controller-runtime's envtest outside `go test`, and Nodes and Pods
// created through the real API.
package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/migflex/migflex/internal/testsupport/testenv"
)

// Hang protection only; the API server starts in seconds here.
const (
	startTimeout = 2 * time.Minute
	stopTimeout  = time.Minute
)

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	env    *envtest.Environment
	// wrappers holds the scripts that start etcd and kube-apiserver.
	wrappers string
}

// Start runs etcd and kube-apiserver from assets (a directory holding etcd,
// kube-apiserver and kubectl, as `make envtest-assets` builds it) with
// envtest's flags, plus --enable-aggregator-routing=true: a webhook or
// APIService that names a Service is dialled at its endpoints, never at a
// ClusterIP, which nothing on a benchmark machine routes and which must
// never leave it. The API server's output goes to apiLog.
//
// Both processes are killed with the calling process (PR_SET_PDEATHSIG
// through util-linux setpriv): Stop never runs when a benchmark is
// interrupted or killed, and envtest starts them in their own process
// group, out of reach of a terminal's ^C.
func Start(assets string, apiLog io.Writer) (*ControlPlane, error) {
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(assets, name)); err != nil {
			return nil, fmt.Errorf("control plane binaries: %w (run `make envtest-assets`)", err)
		}
	}
	wrappers, err := os.MkdirTemp("", "migflex-bench-controlplane-")
	if err != nil {
		return nil, fmt.Errorf("control plane wrappers: %w", err)
	}
	bins, err := testenv.DieWithParent(wrappers, filepath.Join(assets, "etcd"), filepath.Join(assets, "kube-apiserver"))
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(wrappers))
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: bins[0]}
	env.ControlPlane.KubectlPath = filepath.Join(assets, "kubectl")
	api := env.ControlPlane.GetAPIServer()
	api.Path = bins[1]
	api.Out, api.Err = apiLog, apiLog
	api.Configure().Set("enable-aggregator-routing", "true")
	cfg, err := env.Start()
	if err != nil {
		// envtest may have started etcd before the API server failed.
		return nil, errors.Join(fmt.Errorf("starting etcd and kube-apiserver from %s: %w", assets, err), env.Stop(), os.RemoveAll(wrappers))
	}
	return &ControlPlane{Config: cfg, env: env, wrappers: wrappers}, nil
}

// Stop stops kube-apiserver and etcd and removes their data.
func (c *ControlPlane) Stop() error {
	if err := c.env.Stop(); err != nil {
		return fmt.Errorf("stopping the control plane: %w", err)
	}
	return os.RemoveAll(c.wrappers)
}

// WriteKubeconfig writes cfg (a certificate-authenticated configuration,
// as Start returns) as a kubeconfig file for the processes under test.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["bench"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	kc.CurrentContext = "bench"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}
