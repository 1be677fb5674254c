package certgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	admissionv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
)

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// injectCABundle waits for the webhook configuration to exist, then sets the
// caBundle of every webhook in it that calls the Service to bundle, with a
// JSON patch on just those fields. Each is guarded by a test of the
// webhook's name at its index, so a configuration reordered in the meantime
// fails the patch (and the read starts over) instead of getting the bundle
// on the wrong webhook. Webhooks calling anything else are left alone. It
// returns the configuration as last read.
func injectCABundle(ctx context.Context, api admissionv1client.MutatingWebhookConfigurationsGetter, o Options, bundle []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	log := o.Logger.WithValues("mutatingWebhookConfiguration", o.WebhookConfigName)
	cfg, err := waitForConfig(ctx, api, o)
	if err != nil {
		return nil, err
	}
	// A failed test op is answered 422 Invalid; a concurrent write between
	// Get and Patch therefore retries from a fresh Get.
	retriable := func(err error) bool { return apierrors.IsInvalid(err) || apierrors.IsConflict(err) }
	first := true
	err = retryOn(retriable, func() error {
		if !first {
			if cfg, err = api.MutatingWebhookConfigurations().Get(ctx, o.WebhookConfigName, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", o.WebhookConfigName, err)
			}
		}
		first = false
		ops, matched := caBundlePatch(cfg, o.Namespace, o.ServiceName, bundle)
		if matched == 0 {
			return fmt.Errorf("MutatingWebhookConfiguration %s has no webhook calling Service %s/%s", o.WebhookConfigName, o.Namespace, o.ServiceName)
		}
		if len(ops) == 0 {
			log.Info("CA bundle already in place", "webhooks", matched)
			return nil
		}
		body, err := json.Marshal(ops)
		if err != nil {
			return fmt.Errorf("encoding the caBundle patch: %w", err)
		}
		_, err = api.MutatingWebhookConfigurations().Patch(ctx, o.WebhookConfigName, types.JSONPatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
		if err != nil {
			return fmt.Errorf("patching the caBundle of MutatingWebhookConfiguration %s: %w", o.WebhookConfigName, err)
		}
		log.Info("Injected the CA bundle", "webhooks", matched, "patched", len(ops)/2)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// caBundlePatch returns the operations that set bundle on every webhook of
// cfg calling Service namespace/service whose caBundle differs, and how many
// webhooks call that Service.
func caBundlePatch(cfg *admissionregistrationv1.MutatingWebhookConfiguration, namespace, service string, bundle []byte) (ops []patchOp, matched int) {
	for i, wh := range cfg.Webhooks {
		svc := wh.ClientConfig.Service
		if svc == nil || svc.Namespace != namespace || svc.Name != service {
			continue
		}
		matched++
		if bytes.Equal(wh.ClientConfig.CABundle, bundle) {
			continue
		}
		base := "/webhooks/" + strconv.Itoa(i)
		ops = append(ops,
			patchOp{Op: "test", Path: base + "/name", Value: wh.Name},
			// add sets the member whether or not it exists; []byte
			// encodes as the base64 string the API expects.
			patchOp{Op: "add", Path: base + "/clientConfig/caBundle", Value: bundle},
		)
	}
	return ops, matched
}

// waitForConfig polls until the configuration exists: `kubectl apply -k`
// creates it in the same breath as the Job running this, in no guaranteed
// order. An answer from the API server other than NotFound (Forbidden, say)
// ends the wait at once; errors on the way there (a connection refused, the
// client's rate limiter near the deadline) are retried.
func waitForConfig(ctx context.Context, api admissionv1client.MutatingWebhookConfigurationsGetter, o Options) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var (
		cfg    *admissionregistrationv1.MutatingWebhookConfiguration
		last   error
		logged bool
	)
	err := wait.PollUntilContextTimeout(ctx, o.PollInterval, o.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		c, err := api.MutatingWebhookConfigurations().Get(ctx, o.WebhookConfigName, metav1.GetOptions{})
		var status apierrors.APIStatus
		switch {
		case apierrors.IsNotFound(err):
			if !logged {
				o.Logger.Info("Waiting for the MutatingWebhookConfiguration to exist", "mutatingWebhookConfiguration", o.WebhookConfigName, "timeout", o.WaitTimeout)
				logged = true
			}
			return false, nil
		case errors.As(err, &status):
			return false, err
		case err != nil:
			last = err
			return false, nil
		}
		cfg = c
		return true, nil
	})
	switch {
	case err == nil:
		return cfg, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("waiting for MutatingWebhookConfiguration %s: %w", o.WebhookConfigName, ctx.Err())
	case wait.Interrupted(err) && last != nil:
		return nil, fmt.Errorf("MutatingWebhookConfiguration %s did not appear within %s (last error: %w)", o.WebhookConfigName, o.WaitTimeout, last)
	case wait.Interrupted(err):
		return nil, fmt.Errorf("MutatingWebhookConfiguration %s did not appear within %s", o.WebhookConfigName, o.WaitTimeout)
	default:
		return nil, fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", o.WebhookConfigName, err)
	}
}
