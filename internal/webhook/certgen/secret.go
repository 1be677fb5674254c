package certgen

import (
	"context"
	"fmt"
	"maps"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"
)

// secretLabels mark a Secret certgen created, for `kubectl get -l`.
var secretLabels = map[string]string{
	"app.kubernetes.io/part-of":    "migflex",
	"app.kubernetes.io/component":  "webhook-certificate",
	"app.kubernetes.io/managed-by": "migflex-certgen",
}

// ensureSecret creates the Secret, keeps it when check accepts it, or
// replaces its certificate, and returns the CA bundle it ends up holding.
// A concurrent writer (another certgen run) makes it start over from a fresh
// read, so the result is always the stored Secret's bundle.
func ensureSecret(ctx context.Context, secrets corev1client.SecretsGetter, o Options) ([]byte, error) {
	names := dnsNames(o.ServiceName, o.Namespace, o.ClusterDomain)
	ref := o.Namespace + "/" + o.SecretName
	log := o.Logger.WithValues("secret", ref)
	api := secrets.Secrets(o.Namespace)
	var bundle []byte
	raced := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retryOn(raced, func() error {
		now := o.Now()
		s, err := api.Get(ctx, o.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			kp, err := generate(names, now, o.Validity, nil)
			if err != nil {
				return err
			}
			s = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: o.SecretName, Namespace: o.Namespace, Labels: secretLabels},
				Type:       corev1.SecretTypeTLS,
				Data:       map[string][]byte{KeyCert: kp.Cert, KeyKey: kp.Key, KeyCA: kp.CABundle},
			}
			if _, err := api.Create(ctx, s, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
				return fmt.Errorf("creating Secret %s: %w", ref, err)
			}
			log.Info("Created the webhook's serving certificate", "dnsNames", names, "notAfter", now.Add(o.Validity).UTC())
			bundle = kp.CABundle
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading Secret %s: %w", ref, err)
		}
		if s.Type != corev1.SecretTypeTLS {
			// The type is immutable and the Secret may be someone else's:
			// leave it and say what to do.
			return fmt.Errorf("secret %s has type %q, not %q: delete it or choose another --secret", ref, s.Type, corev1.SecretTypeTLS)
		}
		why := check(s.Data, names, now, o.RenewBefore)
		if why == nil {
			log.Info("Kept the webhook's serving certificate: valid for every name beyond the renewal window")
			bundle = s.Data[KeyCA]
			return nil
		}
		kp, err := generate(names, now, o.Validity, previousCA(s.Data, now))
		if err != nil {
			return err
		}
		s = s.DeepCopy()
		s.Data = maps.Clone(s.Data)
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[KeyCert], s.Data[KeyKey], s.Data[KeyCA] = kp.Cert, kp.Key, kp.CABundle
		// The resourceVersion from Get makes this fail with a conflict,
		// and start over, if the Secret changed in the meantime.
		if _, err := api.Update(ctx, s, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("updating Secret %s: %w", ref, err)
		}
		log.Info("Replaced the webhook's serving certificate", "reason", why.Error(), "dnsNames", names, "notAfter", now.Add(o.Validity).UTC())
		bundle = kp.CABundle
		return nil
	})
	if err != nil {
		return nil, err
	}
	return bundle, nil
}

// ownSecret makes cfg an owner of the Secret, replacing an owner reference
// to an earlier configuration of the same name (one deleted and created
// again while the Secret stayed). The Secret's only creator is certgen, and
// nothing but migflex's webhook uses it: when the configuration goes, so
// does the Secret, instead of staying behind after an uninstall. A
// cluster-scoped owner of a namespaced object is allowed; the reference
// blocks nothing, so certgen needs no permission on the configuration's
// finalizers.
func ownSecret(ctx context.Context, secrets corev1client.SecretsGetter, o Options, cfg *admissionregistrationv1.MutatingWebhookConfiguration) error {
	ref := o.Namespace + "/" + o.SecretName
	owner := metav1.OwnerReference{
		APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
		Kind:       "MutatingWebhookConfiguration",
		Name:       cfg.Name,
		UID:        cfg.UID,
	}
	api := secrets.Secrets(o.Namespace)
	return retryOn(apierrors.IsConflict, func() error {
		s, err := api.Get(ctx, o.SecretName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Secret %s: %w", ref, err)
		}
		var refs []metav1.OwnerReference
		has := false
		for _, r := range s.OwnerReferences {
			switch {
			case r.UID == owner.UID:
				has = true
				refs = append(refs, r)
			case r.APIVersion == owner.APIVersion && r.Kind == owner.Kind && r.Name == owner.Name:
				// An earlier configuration of the same name: gone.
			default:
				refs = append(refs, r)
			}
		}
		if has && len(refs) == len(s.OwnerReferences) {
			return nil
		}
		if !has {
			refs = append(refs, owner)
		}
		s = s.DeepCopy()
		s.OwnerReferences = refs
		if _, err := api.Update(ctx, s, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("making MutatingWebhookConfiguration %s the owner of Secret %s: %w", cfg.Name, ref, err)
		}
		o.Logger.Info("The webhook configuration owns the certificate Secret now: deleting it deletes the Secret", "secret", ref, "mutatingWebhookConfiguration", cfg.Name)
		return nil
	})
}

// retryOn runs fn again after an error retriable accepts, with
// retry.DefaultRetry's backoff, and returns fn's last error. retry.OnError
// alone would do, but for its result: it takes an error matching
// context.DeadlineExceeded or context.Canceled, as a dial timeout and a
// cancelled request do, for the end of its own backoff and returns nil, so
// that certgen would exit 0 with no Secret written.
func retryOn(retriable func(error) bool, fn func() error) error {
	var last error
	_ = retry.OnError(retry.DefaultRetry, retriable, func() error {
		last = fn()
		return last
	})
	return last
}

// fieldManager names certgen in managedFields.
const fieldManager = "migflex-certgen"
