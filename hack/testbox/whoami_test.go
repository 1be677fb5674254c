package main

import (
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeAPIServer answers SelfSubjectReviews for one token; the test writes a
// service-account directory trusting its certificate.
func fakeAPIServer(t *testing.T, token string) (host, port, saDir string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case r.Method != http.MethodPost || r.URL.Path != "/apis/authentication.k8s.io/v1/selfsubjectreviews":
			http.Error(w, "wrong request "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		case !strings.Contains(string(body), `"kind":"SelfSubjectReview"`):
			http.Error(w, "not a SelfSubjectReview", http.StatusBadRequest)
		case r.Header.Get("Authorization") != "Bearer "+token:
			http.Error(w, `{"kind":"Status","reason":"Unauthorized"}`, http.StatusUnauthorized)
		default:
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"kind":"SelfSubjectReview","status":{"userInfo":{"username":"system:serviceaccount:ns:default"}}}`)
		}
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ = net.SplitHostPort(u.Host)
	saDir = t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(saDir, "token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return host, port, saDir
}

func TestWhoami(t *testing.T) {
	host, port, saDir := fakeAPIServer(t, "good-token")
	got, err := whoami(host, port, saDir)
	if err != nil {
		t.Fatalf("whoami: %v", err)
	}
	if diff := cmp.Diff("system:serviceaccount:ns:default", got); diff != "" {
		t.Errorf("username (-want +got):\n%s", diff)
	}
}

func TestWhoamiErrors(t *testing.T) {
	host, port, saDir := fakeAPIServer(t, "good-token")
	badToken := t.TempDir()
	ca, _ := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	for name, content := range map[string][]byte{"ca.crt": ca, "token": []byte("bad-token")} {
		if err := os.WriteFile(filepath.Join(badToken, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	untrusted := t.TempDir()
	for name, content := range map[string][]byte{"ca.crt": []byte("not a certificate"), "token": []byte("good-token")} {
		if err := os.WriteFile(filepath.Join(untrusted, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, tc := range map[string]struct {
		host, port, saDir string
		wantErr           string
	}{
		"no service host":  {port: port, saDir: saDir, wantErr: "KUBERNETES_SERVICE_HOST"},
		"no token file":    {host: host, port: port, saDir: t.TempDir(), wantErr: "token"},
		"rejected token":   {host: host, port: port, saDir: badToken, wantErr: "401"},
		"CA without certs": {host: host, port: port, saDir: untrusted, wantErr: "no certificates"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := whoami(tc.host, tc.port, tc.saDir)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("whoami error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
