package webhook

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/migflex/migflex/internal/platform/certwatch/certtest"
	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// TestDrainAnswersKeptAliveConnections: the API server keeps its
// connections to the webhook alive and may send a request on an idle one
// at any moment, also while the webhook stops. A stopping webhook accepts
// no new connection but answers a request on a kept-alive one (with
// "Connection: close", so that the next goes to another replica) instead
// of closing the idle connection under it: a POST lost there is not
// retried, and with failurePolicy Ignore the pod would be admitted
// unchecked. Run returns once the last connection has closed, long before
// the drain period.
func TestDrainAnswersKeptAliveConnections(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certtest.WriteSecretDir(t, dir, ca.Issue(t))
	srv, stop := runServer(t, Options{
		Listen:           "127.0.0.1:0",
		CertDir:          dir,
		CertPollInterval: -1,
		Decider:          newDecider(t),
		Source:           StaticSource{Snap: snapshotOf(gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 7}))},
		DrainPeriod:      time.Hour,
	})
	addr := srv.Addr().String()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	post := func() (*http.Response, error) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+"/mutate", bytes.NewReader(reviewFor(t, gpuPod("p", mig2g20, "1"), nil)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if err := req.Write(conn); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || review.Response == nil || len(review.Response.Patch) == 0 {
			t.Fatalf("answer %d: %v %+v, want a rewrite", resp.StatusCode, err, review.Response)
		}
		return resp, nil
	}
	if resp, err := post(); err != nil || resp.Close {
		t.Fatalf("first request: %v (close %v), want an answer on a connection kept alive", err, resp != nil && resp.Close)
	}

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	// The server is stopping once it refuses new connections.
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(time.Millisecond) // polling a condition nothing signals
	}

	resp, err := post()
	if err != nil {
		t.Fatalf("a request on the kept-alive connection while the server stops: %v, want an answer", err)
	}
	if !resp.Close {
		t.Error(`the answer while stopping lacks "Connection: close"`)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the answer: %v, want the server to close the connection", err)
	}
	<-stopped
}

// TestIdleTimeoutOutlastsTheAPIServers: the API server's webhook client
// (client-go, whose transports get k8s.io/apimachinery's defaults) closes
// a connection idle for its IdleConnTimeout. The webhook keeps an idle
// connection longer, so that it is never the one to close it while a
// request may be on its way.
func TestIdleTimeoutOutlastsTheAPIServers(t *testing.T) {
	client := utilnet.SetTransportDefaults(&http.Transport{}).IdleConnTimeout
	if client <= 0 || idleTimeout <= client {
		t.Fatalf("the webhook closes connections idle for %v, the API server those idle for %v: want the webhook's longer", idleTimeout, client)
	}
}

// TestStopUnderLoadLosesNoRequest: clients keep sending admissions over
// kept-alive connections, as the API server does, while a replica whose
// endpoint was withdrawn stops; new connections go to a sibling replica.
// No request is lost (before the drain most stops lost some:
// docs/BENCHMARKS.md).
func TestStopUnderLoadLosesNoRequest(t *testing.T) {
	ca := certtest.NewCA(t)
	dir := t.TempDir()
	certtest.WriteSecretDir(t, dir, ca.Issue(t))
	src := StaticSource{Snap: snapshotOf(gpuNode("a100", map[corev1.ResourceName]int64{mig1g10: 7}))}
	opts := Options{Listen: "127.0.0.1:0", CertDir: dir, CertPollInterval: -1, Decider: newDecider(t), Source: src}
	body := reviewFor(t, gpuPod("p", mig2g20, "1"), nil)
	const rounds, clients = 5, 4
	for round := range rounds {
		stopping, stop := runServer(t, opts)
		sibling, stopSibling := runServer(t, opts)
		// One address, as the Service's: new connections go to the
		// stopping replica until its endpoint is withdrawn (before it
		// is told to stop: the preStop sleep), then to the sibling; the
		// connections kept alive stay where they are.
		var (
			endpointMu sync.Mutex
			withdrawn  bool
			connecting int // connections to the stopping replica not yet established
		)
		dialer := &tls.Dialer{Config: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}}
		tr := &http.Transport{
			DialTLSContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				endpointMu.Lock()
				addr := sibling.Addr().String()
				if !withdrawn {
					addr = stopping.Addr().String()
					connecting++
					defer func() {
						endpointMu.Lock()
						connecting--
						endpointMu.Unlock()
					}()
				}
				endpointMu.Unlock()
				return dialer.DialContext(ctx, network, addr) // the handshake: accepted
			},
		}
		client := &http.Client{Transport: tr}
		var (
			mu       sync.Mutex
			answered int
			lost     []string
			wg       sync.WaitGroup
			stopped  = make(chan struct{})
		)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stopped:
						return
					default:
					}
					resp, err := client.Post("https://webhook/mutate", "application/json", bytes.NewReader(body))
					mu.Lock()
					if err != nil {
						lost = append(lost, err.Error())
					} else {
						answered++
					}
					mu.Unlock()
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}()
		}
		// Stop once every client has been answered, with their
		// connections kept alive.
		testutil.Eventually(t, "answers before the stop", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return answered >= 4*clients
		})
		endpointMu.Lock()
		withdrawn = true
		endpointMu.Unlock()
		testutil.Eventually(t, "the connections on their way to the stopping replica", func() bool {
			endpointMu.Lock()
			defer endpointMu.Unlock()
			return connecting == 0
		})
		stop()
		close(stopped)
		wg.Wait()
		tr.CloseIdleConnections()
		stopSibling()
		if len(lost) > 0 {
			t.Errorf("round %d: %d of %d requests lost while a replica stopped: %v", round, len(lost), answered+len(lost), lost)
		}
	}
}
