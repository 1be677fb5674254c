// Package certgen provisions the webhook's serving certificate without
// cert-manager: it keeps a CA and a certificate for <svc>.<ns>.svc in a
// kubernetes.io/tls Secret (reusing a valid one, replacing one that is
// missing, broken or about to expire) and writes the CA into the caBundle of
// the MutatingWebhookConfiguration's webhooks that call that Service. The
// Secret is then owned by that configuration, so deleting migflex (helm
// uninstall, kubectl delete -k) lets the garbage collector delete it too.
//
// It runs as a one-shot Job (`webhook certgen ...`) at install and upgrade,
// and is idempotent: a second run with nothing to do changes nothing.
package certgen

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/migflex/migflex/internal/platform/cli"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Defaults for Options.
const (
	DefaultClusterDomain = "cluster.local"
	// DefaultValidity is long: the Job only runs at install and upgrade,
	// and an expired certificate would silently switch the fallback off
	// (the webhook's failurePolicy is Ignore). Run it again with a smaller
	// --validity and --renew-before to rotate sooner.
	DefaultValidity    = 10 * 365 * 24 * time.Hour
	DefaultRenewBefore = 30 * 24 * time.Hour
	DefaultWaitTimeout = 2 * time.Minute
)

// Options configure Run.
type Options struct {
	// Namespace of the Secret and the Service.
	Namespace string
	// SecretName is the kubernetes.io/tls Secret the webhook mounts.
	SecretName string
	// ServiceName is the webhook's Service; the certificate names it.
	ServiceName string
	// WebhookConfigName is the MutatingWebhookConfiguration whose webhooks
	// calling the Service get the CA; empty skips that step (a Job that
	// only creates the Secret, before the configuration exists).
	WebhookConfigName string
	// ClusterDomain completes <svc>.<ns>.svc.<domain>; default cluster.local.
	ClusterDomain string
	// Validity of a new CA and certificate; default DefaultValidity.
	Validity time.Duration
	// RenewBefore replaces a certificate that expires within it; default
	// DefaultRenewBefore. It must be shorter than Validity.
	RenewBefore time.Duration
	// WaitTimeout bounds the wait for the webhook configuration to exist
	// (kubectl apply -k creates it next to the Job); default
	// DefaultWaitTimeout.
	WaitTimeout time.Duration
	// PollInterval is how often the configuration is looked for; default 1s.
	PollInterval time.Duration

	// Now is the clock; nil means time.Now. Tests move it to exercise
	// renewal.
	Now func() time.Time
	// Logger; zero means klog.FromContext of Run's context.
	Logger klog.Logger
}

// RegisterFlags binds the command-line flags of `webhook certgen` to o,
// each with its environment twin (MIGFLEX_CERTGEN_<FLAG>),
// with the defaults above.
func RegisterFlags(f *cli.Flags, o *Options) {
	f.String(&o.Namespace, "namespace", "", "namespace of the Secret and the Service (required)")
	f.String(&o.SecretName, "secret", "", "kubernetes.io/tls Secret to create or keep (required)")
	f.String(&o.ServiceName, "service", "", "the webhook's Service, named by the certificate (required)")
	f.String(&o.WebhookConfigName, "webhook-config", "", "MutatingWebhookConfiguration whose webhooks calling --service get the CA bundle; empty: only the Secret")
	f.String(&o.ClusterDomain, "cluster-domain", DefaultClusterDomain, "cluster DNS domain, for <svc>.<ns>.svc.<domain>")
	f.Duration(&o.Validity, "validity", DefaultValidity, "validity of a new CA and serving certificate")
	f.Duration(&o.RenewBefore, "renew-before", DefaultRenewBefore, "replace a certificate that expires within this")
	f.Duration(&o.WaitTimeout, "wait-timeout", DefaultWaitTimeout, "how long to wait for --webhook-config to exist")
}

// withDefaults fills the zero fields and validates the rest.
func (o Options) withDefaults() (Options, error) {
	if o.ClusterDomain == "" {
		o.ClusterDomain = DefaultClusterDomain
	}
	if o.Validity == 0 {
		o.Validity = DefaultValidity
	}
	if o.RenewBefore == 0 {
		o.RenewBefore = DefaultRenewBefore
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var errs []error
	for _, f := range []struct{ flag, v string }{
		{"--namespace", o.Namespace}, {"--secret", o.SecretName}, {"--service", o.ServiceName},
	} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.flag))
		}
	}
	if o.Validity < 0 || o.RenewBefore < 0 || o.WaitTimeout < 0 || o.PollInterval < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if o.RenewBefore >= o.Validity {
		errs = append(errs, fmt.Errorf("--renew-before (%s) must be shorter than --validity (%s), or every run would renew", o.RenewBefore, o.Validity))
	}
	return o, errors.Join(errs...)
}

// Run makes sure the Secret holds a usable certificate and, when
// WebhookConfigName is set, that the webhooks calling the Service trust its
// CA and that the configuration owns the Secret. It returns the first
// error; running it again resumes where it failed.
func Run(ctx context.Context, client kubernetes.Interface, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return fmt.Errorf("certgen: %w", err)
	}
	if o.Logger.GetSink() == nil {
		o.Logger = klog.FromContext(ctx)
	}
	bundle, err := ensureSecret(ctx, client.CoreV1(), o)
	if err != nil {
		return err
	}
	if o.WebhookConfigName == "" {
		return nil
	}
	cfg, err := injectCABundle(ctx, client.AdmissionregistrationV1(), o, bundle)
	if err != nil {
		return err
	}
	return ownSecret(ctx, client.CoreV1(), o, cfg)
}
