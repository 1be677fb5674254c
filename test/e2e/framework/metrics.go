package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Where the local overlay serves metrics on the host (the agent's and the
// webhook's on its loopback; the planner's on the pod network, at the
// pod's IP), and the ClusterRole that lets a client read them.
const (
	AgentMetricsURL     = "https://127.0.0.1:9123"
	WebhookMetricsURL   = "https://127.0.0.1:9125"
	PlannerMetricsPort  = "9124"
	MetricsReaderRole   = "migflex-metrics-reader"
	metricsTokenSeconds = 3600
)

// MetricsToken returns a token of the ServiceAccount name in migflex's
// namespace, which it creates when missing, bound to
// migflex-metrics-reader when reader is true (docs/INSTALL.md shows the
// same with kubectl). The objects stay with the installation.
func (c *Cluster) MetricsToken(ctx context.Context, name string, reader bool) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: MigflexNamespace}}
	if _, err := c.Client.CoreV1().ServiceAccounts(MigflexNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating ServiceAccount %s: %w", name, err)
	}
	if reader {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MetricsReaderRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: MigflexNamespace, Name: name}},
		}
		if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("binding %s to %s: %w", name, MetricsReaderRole, err)
		}
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(MigflexNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr[int64](metricsTokenSeconds)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token for %s: %w", name, err)
	}
	return tr.Status.Token, nil
}

// scrapeClient takes the components' self-signed certificates, as a
// Prometheus with insecureSkipVerify does.
var scrapeClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
}

// Get GETs url with token as the bearer token ("" sends none) and returns
// the status code and body.
func Get(ctx context.Context, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
