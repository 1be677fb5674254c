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
}

// Start runs etcd and kube-apiserver from assets (a directory holding etcd,
// kube-apiserver and kubectl, as `make envtest-assets` builds it) with
// envtest's flags. The API server's output goes to apiLog.
func Start(assets string, apiLog io.Writer) (*ControlPlane, error) {
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(assets, name)); err != nil {
			return nil, fmt.Errorf("control plane binaries: %w (run `make envtest-assets`)", err)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(assets, "etcd")}
	env.ControlPlane.KubectlPath = filepath.Join(assets, "kubectl")
	api := env.ControlPlane.GetAPIServer()
	api.Path = filepath.Join(assets, "kube-apiserver")
	api.Out, api.Err = apiLog, apiLog
	cfg, err := env.Start()
	if err != nil {
		// envtest may have started etcd before the API server failed.
		return nil, errors.Join(fmt.Errorf("starting etcd and kube-apiserver from %s: %w", assets, err), env.Stop())
	}
	return &ControlPlane{Config: cfg, env: env}, nil
}

// Stop stops kube-apiserver and etcd and removes their data.
func (c *ControlPlane) Stop() error {
	if err := c.env.Stop(); err != nil {
		return fmt.Errorf("stopping the control plane: %w", err)
	}
	return nil
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
