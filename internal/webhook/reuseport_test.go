package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/migflex/migflex/internal/platform/certwatch/certtest"
)

// TestReusePort: with ReusePort two webhooks share one port, as the old
// and the new replica of a rolling update on the host network do; without
// it the second cannot bind. A webhook on a shared port accepts no
// connection before its caches have synced, so a pod is never admitted
// unchecked by a replica that is still starting: the connection waits and
// gets a real decision.
func TestReusePort(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certtest.WriteSecretDir(t, dir, ca.Issue(t))
	node := gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 7})

	// The first replica, synced.
	first, stopFirst := runServer(t, Options{
		Listen: "127.0.0.1:0", CertDir: dir, CertPollInterval: -1, Decider: newDecider(t),
		Client: fake.NewClientset(node), ReusePort: true,
	})
	addr := first.Addr().String()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	defer client.CloseIdleConnections() // before the servers stop, which would wait for it
	waitReady(t, client, "https://"+addr)

	if _, err := NewServer(Options{Listen: addr, CertDir: dir, CertPollInterval: -1, Decider: newDecider(t), Client: fake.NewClientset()}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a second webhook without ReusePort on %s: %v, want address in use", addr, err)
	}

	// The second replica, whose node list hangs until released: it shares
	// the port but accepts nothing meanwhile.
	release := make(chan struct{})
	slow := fake.NewClientset(node)
	slow.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil
	})
	second, _ := runServer(t, Options{Listen: addr, CertDir: dir, CertPollInterval: -1, Decider: newDecider(t), Client: slow, ReusePort: true})
	if second.Addr().String() != addr {
		t.Fatalf("second replica on %s, want %s", second.Addr(), addr)
	}
	// The old replica goes; every connection reaches the new one. The
	// client lets its idle connection go first: the old replica would
	// otherwise keep it for its drain period.
	client.CloseIdleConnections()
	stopFirst()
	raw, err := net.Dial("tcp", addr) // the kernel completes the connection
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// No server hello while not synced. The deadline only bounds the
	// probe: the handshake cannot complete before the release, however
	// slow the machine.
	_ = raw.SetDeadline(time.Now().Add(300 * time.Millisecond))
	hs := tls.Client(raw, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	if err := hs.Handshake(); err == nil {
		t.Fatal("the replica that has not synced completed a TLS handshake")
	}

	answer := make(chan *admissionv1.AdmissionReview, 1)
	go func() {
		resp, err := client.Post("https://"+addr+"/mutate", "application/json", bytes.NewReader(reviewFor(t, gpuPod("p", mig2g20, "1"), nil)))
		if err != nil {
			t.Errorf("mutate: %v", err)
			answer <- nil
			return
		}
		defer resp.Body.Close()
		var r admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Errorf("decoding: %v", err)
		}
		answer <- &r
	}()
	close(release)
	r := <-answer
	if r == nil || r.Response == nil || !strings.Contains(string(r.Response.Patch), "nvidia.com~1mig-1g.10gb") {
		t.Fatalf("answer %+v: want the rewrite to 1g.10gb, decided on synced caches", r)
	}
}

// runServer runs a server until stop or the end of the test.
func runServer(t *testing.T, o Options) (s *Server, stop func()) {
	t.Helper()
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return s, stop
}

// waitReady polls /readyz until the server's caches have synced.
func waitReady(t *testing.T, client *http.Client, base string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition nothing signals
	}
}
