package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func mustGenerate(t *testing.T, names []string, now time.Time, validity time.Duration, extra []byte) map[string][]byte {
	t.Helper()
	kp, err := generate(names, now, validity, extra)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{KeyCert: kp.Cert, KeyKey: kp.Key, KeyCA: kp.CABundle}
}

func TestDNSNames(t *testing.T) {
	want := []string{"gpu-webhook", "gpu-webhook.gpu-webhook", "gpu-webhook.gpu-webhook.svc", "gpu-webhook.gpu-webhook.svc.cluster.local"}
	if diff := cmp.Diff(want, dnsNames("gpu-webhook", "gpu-webhook", "cluster.local")); diff != "" {
		t.Errorf("dnsNames (-want +got):\n%s", diff)
	}
}

func TestGenerateIsAServingCertificateForEveryName(t *testing.T) {
	names := dnsNames("svc", "ns", "example.org")
	data := mustGenerate(t, names, t0, 24*time.Hour, nil)
	if err := check(data, names, t0, time.Hour); err != nil {
		t.Fatalf("a fresh certificate fails the check: %v", err)
	}
	leaf := parseOne(t, data[KeyCert])
	if diff := cmp.Diff(names, leaf.DNSNames); diff != "" {
		t.Errorf("DNS names (-want +got):\n%s", diff)
	}
	if leaf.Subject.CommonName != "svc.ns.svc" {
		t.Errorf("CommonName = %q, want the name the API server dials, svc.ns.svc", leaf.Subject.CommonName)
	}
	if !leaf.NotBefore.Equal(t0.Add(-backdate)) || !leaf.NotAfter.Equal(t0.Add(24*time.Hour)) {
		t.Errorf("validity %s..%s, want %s..%s", leaf.NotBefore, leaf.NotAfter, t0.Add(-backdate), t0.Add(24*time.Hour))
	}
	ca := parseOne(t, data[KeyCA])
	if !ca.IsCA || ca.MaxPathLen != 0 || !ca.MaxPathLenZero {
		t.Errorf("CA: IsCA=%v MaxPathLen=%d MaxPathLenZero=%v, want a CA that signs only leaves", ca.IsCA, ca.MaxPathLen, ca.MaxPathLenZero)
	}
	if leaf.IsCA {
		t.Error("the serving certificate is a CA")
	}
	// Two runs never share a CA: its key is thrown away.
	again := mustGenerate(t, names, t0, 24*time.Hour, nil)
	if string(again[KeyCA]) == string(data[KeyCA]) {
		t.Error("two generations produced the same CA")
	}
}

func TestCheck(t *testing.T) {
	names := dnsNames("svc", "ns", "cluster.local")
	good := mustGenerate(t, names, t0, 365*24*time.Hour, nil)
	other := mustGenerate(t, names, t0, 365*24*time.Hour, nil)
	otherSvc := mustGenerate(t, dnsNames("old-svc", "ns", "cluster.local"), t0, 365*24*time.Hour, nil)
	with := func(k string, v []byte) map[string][]byte {
		d := maps.Clone(good)
		if v == nil {
			delete(d, k)
		} else {
			d[k] = v
		}
		return d
	}
	for name, tc := range map[string]struct {
		data        map[string][]byte
		now         time.Time
		renewBefore time.Duration
		wantErr     string // substring; empty means usable
	}{
		"fresh":                        {data: good, now: t0, renewBefore: 30 * 24 * time.Hour},
		"just outside the window":      {data: good, now: t0.Add(334 * 24 * time.Hour), renewBefore: 30 * 24 * time.Hour},
		"inside the renewal window":    {data: good, now: t0.Add(336 * 24 * time.Hour), renewBefore: 30 * 24 * time.Hour, wantErr: "within the renewal window"},
		"expired":                      {data: good, now: t0.Add(400 * 24 * time.Hour), renewBefore: time.Hour, wantErr: "expired"},
		"not yet valid":                {data: good, now: t0.Add(-2 * backdate), renewBefore: time.Hour, wantErr: "not yet valid"},
		"no tls.crt":                   {data: with(KeyCert, nil), now: t0, wantErr: "no tls.crt"},
		"no tls.key":                   {data: with(KeyKey, nil), now: t0, wantErr: "no tls.key"},
		"no ca.crt":                    {data: with(KeyCA, nil), now: t0, wantErr: "no ca.crt"},
		"empty ca.crt":                 {data: with(KeyCA, []byte{}), now: t0, wantErr: "no ca.crt"},
		"garbage tls.crt":              {data: with(KeyCert, []byte("not a certificate")), now: t0, wantErr: "not a key pair"},
		"key of another certificate":   {data: with(KeyKey, other[KeyKey]), now: t0, wantErr: "not a key pair"},
		"ca.crt of another CA":         {data: with(KeyCA, other[KeyCA]), now: t0, wantErr: "does not verify"},
		"garbage ca.crt":               {data: with(KeyCA, []byte("junk")), now: t0, wantErr: "parsing ca.crt: not PEM"},
		"ca.crt holds a key":           {data: with(KeyCA, good[KeyKey]), now: t0, wantErr: `unexpected PEM block "PRIVATE KEY"`},
		"certificate of another svc":   {data: otherSvc, now: t0, wantErr: "does not verify for svc"},
		"ca.crt bundle with an old CA": {data: with(KeyCA, append(append([]byte{}, other[KeyCA]...), good[KeyCA]...)), now: t0},
	} {
		t.Run(name, func(t *testing.T) {
			err := check(tc.data, names, tc.now, tc.renewBefore)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("check: %v, want usable", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("check accepted it, want an error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("check: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCheckRenewsWhenTheCAExpiresFirst(t *testing.T) {
	names := dnsNames("svc", "ns", "cluster.local")
	// A hand-made pair, as another tool might leave: a CA valid 10 days
	// and a leaf valid 100 (x509 lets a leaf outlive its issuer).
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: "short-lived-ca"}, NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(10 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := sign(caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafDER, err := sign(&x509.Certificate{
		Subject: pkix.Name{CommonName: "svc.ns.svc"}, DNSNames: names, NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(100 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{
		KeyCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		KeyKey:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		KeyCA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}
	if err := check(data, names, t0, 5*24*time.Hour); err != nil {
		t.Fatalf("check with the CA outside the window: %v", err)
	}
	err = check(data, names, t0, 20*24*time.Hour)
	if err == nil || !strings.Contains(err.Error(), `"short-lived-ca" expires`) {
		t.Fatalf("check: %v, want the CA named as expiring", err)
	}
}

func TestPreviousCAKeepsOnlyTheLiveIssuer(t *testing.T) {
	names := dnsNames("svc", "ns", "cluster.local")
	old := mustGenerate(t, names, t0, 24*time.Hour, nil)
	unrelated := mustGenerate(t, names, t0, 24*time.Hour, nil)
	bundle := append(append([]byte{}, unrelated[KeyCA]...), old[KeyCA]...)
	data := map[string][]byte{KeyCert: old[KeyCert], KeyKey: old[KeyKey], KeyCA: bundle}

	if got := previousCA(data, t0); string(got) != string(old[KeyCA]) {
		t.Errorf("previousCA kept\n%s\nwant only the issuer of the old certificate\n%s", got, old[KeyCA])
	}
	if got := previousCA(data, t0.Add(48*time.Hour)); got != nil {
		t.Errorf("previousCA kept an expired CA:\n%s", got)
	}
	if got := previousCA(map[string][]byte{KeyCA: old[KeyCA]}, t0); got != nil {
		t.Errorf("previousCA without a certificate kept\n%s", got)
	}

	// The renewed bundle verifies both the new and the old certificate.
	renewed := mustGenerate(t, names, t0, 24*time.Hour, previousCA(data, t0))
	if err := check(renewed, names, t0, time.Hour); err != nil {
		t.Errorf("new certificate against the renewed bundle: %v", err)
	}
	oldWithNewBundle := map[string][]byte{KeyCert: old[KeyCert], KeyKey: old[KeyKey], KeyCA: renewed[KeyCA]}
	if err := check(oldWithNewBundle, names, t0, time.Hour); err != nil {
		t.Errorf("old certificate against the renewed bundle: %v", err)
	}
}

func TestOptionsWithDefaults(t *testing.T) {
	base := Options{Namespace: "ns", SecretName: "s", ServiceName: "svc"}
	got, err := base.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got.ClusterDomain != DefaultClusterDomain || got.Validity != DefaultValidity || got.RenewBefore != DefaultRenewBefore ||
		got.WaitTimeout != DefaultWaitTimeout || got.PollInterval != time.Second || got.Now == nil {
		t.Errorf("defaults not filled: %+v", got)
	}
	for name, tc := range map[string]struct {
		mod     func(*Options)
		wantErr string
	}{
		"no namespace":           {func(o *Options) { o.Namespace = "" }, "--namespace is required"},
		"no secret":              {func(o *Options) { o.SecretName = "" }, "--secret is required"},
		"no service":             {func(o *Options) { o.ServiceName = "" }, "--service is required"},
		"renew before validity":  {func(o *Options) { o.Validity, o.RenewBefore = time.Hour, 2*time.Hour }, "must be shorter than --validity"},
		"renew equal validity":   {func(o *Options) { o.Validity, o.RenewBefore = time.Hour, time.Hour }, "must be shorter than --validity"},
		"negative wait":          {func(o *Options) { o.WaitTimeout = -time.Second }, "must not be negative"},
		"negative renew":         {func(o *Options) { o.RenewBefore = -time.Second }, "must not be negative"},
		"all three names absent": {func(o *Options) { *o = Options{} }, "--namespace is required\n--secret is required\n--service is required"},
	} {
		t.Run(name, func(t *testing.T) {
			o := base
			tc.mod(&o)
			_, err := o.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("withDefaults: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCABundlePatch(t *testing.T) {
	bundle := []byte("new-ca")
	svc := func(ns, name string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: name}}
	}
	url := "https://127.0.0.1:9443/mutate"
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{Webhooks: []admissionregistrationv1.MutatingWebhook{
		{Name: "a.example.io", ClientConfig: svc("ns", "svc")},
		{Name: "b.example.io", ClientConfig: svc("ns", "other")},
		{Name: "c.example.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url}},
		{Name: "d.example.io", ClientConfig: svc("other-ns", "svc")},
		{Name: "e.example.io", ClientConfig: func() admissionregistrationv1.WebhookClientConfig {
			c := svc("ns", "svc")
			c.CABundle = []byte("new-ca")
			return c
		}()},
		{Name: "f.example.io", ClientConfig: func() admissionregistrationv1.WebhookClientConfig {
			c := svc("ns", "svc")
			c.CABundle = []byte("old-ca")
			return c
		}()},
	}}
	ops, matched := caBundlePatch(cfg, "ns", "svc", bundle)
	want := []patchOp{
		{Op: "test", Path: "/webhooks/0/name", Value: "a.example.io"},
		{Op: "add", Path: "/webhooks/0/clientConfig/caBundle", Value: bundle},
		{Op: "test", Path: "/webhooks/5/name", Value: "f.example.io"},
		{Op: "add", Path: "/webhooks/5/clientConfig/caBundle", Value: bundle},
	}
	if diff := cmp.Diff(want, ops); diff != "" {
		t.Errorf("ops (-want +got):\n%s", diff)
	}
	if matched != 3 {
		t.Errorf("matched %d webhooks, want 3 (a, e, f)", matched)
	}
	if ops, matched := caBundlePatch(cfg, "ns", "nothing", bundle); len(ops) != 0 || matched != 0 {
		t.Errorf("a Service no webhook calls: %d ops, %d matched", len(ops), matched)
	}
}

func parseOne(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("no PEM in %q", data)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
