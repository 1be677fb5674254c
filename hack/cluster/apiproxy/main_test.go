package main

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
)

// An upstream that answers each line with the line upper-cased, then, at
// the end of its input, "bye" and closes: the proxy must carry both
// directions and the client's half close.
func TestForward(t *testing.T) {
	upstream := listen(t)
	go func() {
		for {
			c, err := upstream.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				sc.Buffer(nil, 2<<20)
				for sc.Scan() {
					io.WriteString(c, strings.ToUpper(sc.Text())+"\n")
				}
				io.WriteString(c, "bye\n")
			}()
		}
	}()
	proxy := listen(t)
	go serve(proxy, upstream.Addr().String())

	for _, lines := range [][]string{{"hello", "world"}, {}, {strings.Repeat("x", 1<<20)}} {
		c, err := net.Dial("tcp", proxy.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		for _, l := range lines {
			want.WriteString(strings.ToUpper(l) + "\n")
		}
		want.WriteString("bye\n")
		// Written while the answer is read, so that neither waits on the
		// other's buffers; the half close reaches the upstream, whose
		// answer then ends with bye.
		written := make(chan error, 1)
		go func() {
			for _, l := range lines {
				if _, err := io.WriteString(c, l+"\n"); err != nil {
					written <- err
					return
				}
			}
			written <- c.(*net.TCPConn).CloseWrite()
		}()
		got, err := io.ReadAll(c)
		if werr := <-written; werr != nil {
			t.Fatal(werr)
		}
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want.String() {
			t.Errorf("through the proxy: got %d bytes %.40q, want %d bytes %.40q", len(got), got, want.Len(), want.String())
		}
	}
}

// With nothing listening upstream, the client's connection is closed.
func TestForwardUpstreamDown(t *testing.T) {
	gone := listen(t)
	addr := gone.Addr().String()
	gone.Close()
	proxy := listen(t)
	go serve(proxy, addr)
	c, err := net.Dial("tcp", proxy.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, err := io.ReadAll(c); len(b) != 0 {
		t.Errorf("read %q (%v), want the connection closed", b, err)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
