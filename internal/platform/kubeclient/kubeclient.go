// Package kubeclient is how every migflex binary finds its API server.
package kubeclient

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options say where the API server is and how to talk to it.
type Options struct {
	// Kubeconfig is the --kubeconfig file. Empty means $KUBECONFIG, a list
	// of files merged as kubectl merges them, and without it the
	// in-cluster configuration (the pod's service account).
	Kubeconfig string
	// UserAgent names the binary in the API server's logs and audit.
	UserAgent string
	// QPS and Burst limit the client's requests; zero keeps client-go's.
	QPS   float32
	Burst int
}

// Config returns the client configuration o and getenv (os.Getenv outside
// tests) describe.
func Config(o Options, getenv func(string) string) (*rest.Config, error) {
	cfg, err := load(o.Kubeconfig, getenv("KUBECONFIG"))
	if err != nil {
		return nil, fmt.Errorf("client configuration for the API server (--kubeconfig, $KUBECONFIG or in-cluster): %w", err)
	}
	cfg.UserAgent = o.UserAgent
	if o.QPS != 0 {
		cfg.QPS = o.QPS
	}
	if o.Burst != 0 {
		cfg.Burst = o.Burst
	}
	return cfg, nil
}

func load(explicit, env string) (*rest.Config, error) {
	if explicit == "" && env == "" {
		return rest.InClusterConfig()
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: explicit, Precedence: filepath.SplitList(env)}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// New returns a clientset for Config(o, getenv).
func New(o Options, getenv func(string) string) (kubernetes.Interface, error) {
	cfg, err := Config(o, getenv)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for the API server: %w", err)
	}
	return client, nil
}
