package certgen

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// Keys of the Secret, the ones kubernetes.io/tls Secrets and cert-manager
// use, so the webhook reads either kind the same way.
const (
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	KeyCA   = "ca.crt"
)

// backdate covers clocks a little behind the one that issued the
// certificate (the API server's, another node's).
const backdate = time.Hour

// keyPair is a generated serving certificate, its key and the CA bundle that
// verifies it, all PEM.
type keyPair struct {
	Cert, Key, CABundle []byte
}

// dnsNames are the names the API server may use for a webhook Service: it
// dials <svc>.<ns>.svc; the shorter ones serve in-cluster clients and the
// long one clusters that use the full domain.
func dnsNames(service, namespace, clusterDomain string) []string {
	base := service + "." + namespace + ".svc"
	return []string{service, service + "." + namespace, base, base + "." + clusterDomain}
}

// generate creates a fresh CA and a serving certificate for names, both valid
// from now-backdate until now+validity. The CA's key is not kept: a renewal
// makes a new CA, so no long-lived signing key sits in the cluster. extraCAs
// (PEM, the previous CA while its certificate is still in use) are appended
// to the bundle so clients trusting either accept the new and the old
// serving certificate during the switch.
func generate(names []string, now time.Time, validity time.Duration, extraCAs []byte) (keyPair, error) {
	notBefore, notAfter := now.Add(-backdate), now.Add(validity)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating the CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("migflex-webhook-ca@%d", now.Unix())},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := sign(caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing the CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return keyPair{}, fmt.Errorf("parsing the new CA certificate: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating the serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: names[0]},
		DNSNames:    names,
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if len(names) > 2 {
		tmpl.Subject.CommonName = names[2] // <svc>.<ns>.svc, the name the API server dials
	}
	der, err := sign(tmpl, ca, key.Public(), caKey)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return keyPair{}, fmt.Errorf("encoding the serving key: %w", err)
	}
	bundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	bundle = append(bundle, extraCAs...)
	return keyPair{
		Cert:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:      pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		CABundle: bundle,
	}, nil
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}

// check reports why the Secret data cannot keep serving names until
// now+renewBefore, or nil when it can. It accepts what certgen wrote and what
// any other issuer (cert-manager, a hand-made Secret) wrote, as long as the
// key matches, the certificate chains to ca.crt for every name, and neither
// expires within renewBefore.
func check(data map[string][]byte, names []string, now time.Time, renewBefore time.Duration) error {
	for _, k := range []string{KeyCert, KeyKey, KeyCA} {
		if len(data[k]) == 0 {
			return fmt.Errorf("no %s", k)
		}
	}
	pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return fmt.Errorf("%s and %s are not a key pair: %w", KeyCert, KeyKey, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("parsing %s: %w", KeyCert, err)
	}
	cas, err := parseCerts(data[KeyCA])
	if err != nil {
		return fmt.Errorf("parsing %s: %w", KeyCA, err)
	}
	roots := x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("parsing the chain in %s: %w", KeyCert, err)
		}
		inter.AddCert(c)
	}
	deadline := now.Add(renewBefore)
	for _, name := range names {
		opts := x509.VerifyOptions{
			DNSName:       name,
			Roots:         roots,
			Intermediates: inter,
			CurrentTime:   now,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		chains, err := leaf.Verify(opts)
		if err != nil {
			return fmt.Errorf("%s does not verify for %s against %s: %w", KeyCert, name, KeyCA, err)
		}
		// Every certificate of the chain, the CA included, must outlive
		// the renewal deadline.
		for _, c := range slices.Concat(chains...) {
			if c.NotAfter.Before(deadline) {
				return fmt.Errorf("%q expires at %s, within the renewal window of %s",
					c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339), renewBefore)
			}
		}
	}
	return nil
}

// parseCerts parses every CERTIFICATE block of a PEM bundle; anything else in
// it is an error, as is a bundle without certificates.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := bytes.TrimSpace(data)
	for len(rest) > 0 {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("not PEM")
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
		rest = bytes.TrimSpace(rest)
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate")
	}
	return out, nil
}

// previousCA returns, PEM-encoded, the CA of the old Secret that issued its
// serving certificate, when that CA is still valid at now: the new bundle
// keeps it while the webhook still serves the old certificate (the kubelet
// updates a mounted Secret a minute or more after the change). Only the
// issuer is kept, so bundles do not grow with every renewal. Nothing when
// the old data is unusable.
func previousCA(old map[string][]byte, now time.Time) []byte {
	leaves, err := parseCerts(old[KeyCert])
	if err != nil {
		return nil
	}
	cas, err := parseCerts(old[KeyCA])
	if err != nil {
		return nil
	}
	var out []byte
	for _, c := range cas {
		if c.IsCA && now.Before(c.NotAfter) && leaves[0].CheckSignatureFrom(c) == nil {
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
	}
	return out
}
