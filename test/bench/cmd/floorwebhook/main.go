// Command floorwebhook is the benchmarks' floor: an HTTPS server that
// answers every AdmissionReview "allowed" with its uid and does nothing
// else. It takes the flags cmd/webhook and listwebhook share, so that
// webhookbench runs it as it runs them, and its latency is what the
// round trip between two processes costs on the machine (TLS, HTTP/2 as
// the client negotiates it, the two processes' wakeups), the part of the
// webhook's latency that no change to the webhook can remove.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// review is the one field of an AdmissionReview the floor reads.
type review struct {
	Request *struct {
		UID string `json:"uid"`
	} `json:"request"`
}

type answer struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Response   response `json:"response"`
}

type response struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
}

func mutate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 8<<20))
	if err != nil {
		http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var in review
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil || in.Request.UID == "" {
		http.Error(w, "want an AdmissionReview with a request uid", http.StatusBadRequest)
		return
	}
	out, err := json.Marshal(answer{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview",
		Response: response{UID: in.Request.UID, Allowed: true}})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floorwebhook", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8443", "HTTPS listen address")
	certDir := fs.String("tls-cert-dir", "", "directory with tls.crt and tls.key")
	// Accepted and ignored: the harness passes every webhook the same flags.
	fs.String("kubeconfig", "", "ignored")
	fs.String("mode", "", "ignored")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(*certDir, "tls.crt"), filepath.Join(*certDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("--tls-cert-dir: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", mutate)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{
		Addr:              *listen,
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS("", "") }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shut)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "floorwebhook:", err)
		os.Exit(1)
	}
}
