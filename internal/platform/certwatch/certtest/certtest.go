// Package certtest makes certificates and lays them out on disk the way the
// kubelet mounts a Secret, for tests of TLS servers and certificate reloads,
// and for the benchmarks' webhooks (WriteServing).
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial atomic.Int64

// NewCA makes a CA valid for a day.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func newCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: "migflex test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// PEM is the CA certificate, for a caBundle or a client's RootCAs.
func (ca *CA) PEM() []byte { return ca.pem }

// Pool is a cert pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Pair is a serving certificate and its key, PEM encoded.
type Pair struct {
	Cert, Key []byte
	Serial    *big.Int
}

// Issue makes a serving certificate for 127.0.0.1, ::1 and localhost plus
// the given DNS names; every call gets a new serial number.
func (ca *CA) Issue(t testing.TB, dnsNames ...string) Pair {
	t.Helper()
	p, err := ca.issue(dnsNames...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (ca *CA) issue(dnsNames ...string) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: "migflex test server"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     append([]string{"localhost"}, dnsNames...),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("serving key: %w", err)
	}
	return Pair{
		Cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		Serial: tmpl.SerialNumber,
	}, nil
}

// WriteServing puts tls.crt and tls.key for 127.0.0.1 and localhost into
// dir, as the webhook's --tls-cert-dir expects, and returns the PEM of the
// CA that signed them. It is for tools outside tests (the benchmarks'
// webhooks), so it returns errors.
func WriteServing(dir string) ([]byte, error) {
	ca, err := newCA()
	if err != nil {
		return nil, err
	}
	p, err := ca.issue()
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{"tls.crt": p.Cert, "tls.key": p.Key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return ca.PEM(), nil
}

var generation atomic.Int64

// WriteSecretDir writes the pair into dir as the kubelet updates a mounted
// Secret: the files go into a new timestamped directory, a "..data_tmp"
// symlink to it is renamed over "..data" (one atomic step), tls.crt and
// tls.key are symlinks through "..data", and the previous directory is
// removed.
func WriteSecretDir(t testing.TB, dir string, p Pair) {
	t.Helper()
	ts := fmt.Sprintf("..%s_%d", time.Now().UTC().Format("2006_01_02_15_04_05"), generation.Add(1))
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tls.crt": p.Cert, "tls.key": p.Key} {
		if err := os.WriteFile(filepath.Join(dir, ts, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// WriteFiles writes the pair as two plain files, each replaced atomically
// by a rename, the certificate first: between the two renames the directory
// holds a certificate that does not match its key.
func WriteFiles(t testing.TB, dir string, p Pair) {
	t.Helper()
	for _, f := range []struct {
		name string
		data []byte
	}{{"tls.crt", p.Cert}, {"tls.key", p.Key}} {
		tmp := filepath.Join(dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			t.Fatal(err)
		}
	}
}
