// Command apiproxy forwards TCP connections to one address. The local
// cluster (hack/cluster/up.sh) runs one in the network namespace of each
// node after the first, listening on 127.0.0.1:6443 there and forwarding
// to the API server on the host's end of the nodes' bridge: the node's
// host-network pods then reach the API server at 127.0.0.1:6443
// (KUBERNETES_SERVICE_HOST), as they do on the first node, which is the
// host. The bytes pass through untouched (TLS end to end).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:6443", "address to listen on")
	to := flag.String("to", "", "address to forward every connection to (required)")
	flag.Parse()
	if *to == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: apiproxy [-listen ADDR] -to ADDR")
		os.Exit(2)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("apiproxy: %v", err)
	}
	log.Printf("apiproxy: forwarding %s to %s", l.Addr(), *to)
	log.Fatalf("apiproxy: %v", serve(l, *to))
}

// serve forwards each connection l accepts to the address to, until l
// fails.
func serve(l net.Listener, to string) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go forward(c, to)
	}
}

// forward copies c to a new connection to the address to and back, until
// both directions have ended: an end of input in one direction is passed
// on as a half close, so a request-then-close client still gets its answer.
func forward(c net.Conn, to string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", to, 10*time.Second)
	if err != nil {
		log.Printf("apiproxy: %s: %v", c.RemoteAddr(), err)
		return
	}
	defer up.Close()
	done := make(chan error, 2)
	go func() { done <- pipe(up, c) }()
	go func() { done <- pipe(c, up) }()
	if err := <-done; err != nil {
		// One side failed (a reset, say): the other direction has no one
		// to talk to either.
		c.Close()
		up.Close()
	}
	<-done
}

// pipe copies src to dst, then half-closes dst's write side.
func pipe(dst, src net.Conn) error {
	_, err := io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	return err
}
