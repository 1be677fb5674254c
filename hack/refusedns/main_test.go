package main

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// query is a DNS query for name (given as wire labels) of type A with
// flags byte f (RD is 0x01), followed by extra bytes (an EDNS record).
func query(id uint16, f byte, qdcount uint16, labels string, extra []byte) []byte {
	q := []byte{byte(id >> 8), byte(id), f, 0, byte(qdcount >> 8), byte(qdcount), 0, 0, 0, 0, 0, byte(len(extra) / 11)}
	q = append(q, labels...)
	q = append(q, 0, 0, 1, 0, 1) // root, QTYPE A, QCLASS IN
	return append(q, extra...)
}

var (
	exampleCom = "\x07example\x03com"
	edns       = []byte{0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0}
)

func TestRefusal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		query []byte
		want  []byte // nil: no answer
	}{
		{
			name:  "a recursive query with EDNS is refused with its ID, RD and question",
			query: query(0x1234, 0x01, 1, exampleCom, edns),
			want:  append([]byte{0x12, 0x34, 0x81, 5, 0, 1, 0, 0, 0, 0, 0, 0}, exampleCom+"\x00\x00\x01\x00\x01"...),
		},
		{
			name:  "the root name, no RD",
			query: query(7, 0x00, 1, "", nil),
			want:  []byte{0, 7, 0x80, 5, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1},
		},
		{
			name:  "opcode kept",
			query: query(7, 0x10|0x01, 1, "", nil), // opcode 2 (STATUS)
			want:  []byte{0, 7, 0x91, 5, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1},
		},
		{name: "shorter than a header", query: []byte{1, 2, 3}},
		{name: "a response", query: query(7, 0x81, 1, exampleCom, nil)},
		{name: "two questions", query: query(7, 0x01, 2, exampleCom, nil)},
		{name: "no question", query: query(7, 0x01, 0, "", nil)[:12]},
		{name: "name past the end", query: query(7, 0x01, 1, "\x07exam", nil)[:17]},
		{name: "type past the end", query: query(7, 0x01, 1, exampleCom, nil)[:26]},
		{name: "compressed name", query: query(7, 0x01, 1, "\xc0\x0c", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := refusal(tc.query)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("refusal(% x) = % x, want an error", tc.query, got)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Errorf("refusal(% x) = % x, %v; want % x", tc.query, got, err, tc.want)
			}
		})
	}
}

// TestServeAnswers: a query over UDP gets the refusal back, and one that is
// not a query gets nothing and does not stop the server.
func TestServeAnswers(t *testing.T) {
	// Port 53 needs privileges: the test listens where it may.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = answer(pc) }()
	t.Cleanup(func() { pc.Close() })

	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Hang protection only: the answer comes from a loop on loopback.
	if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, q := range [][]byte{{1, 2, 3}, query(42, 0x01, 1, exampleCom, edns)} {
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := refusal(query(42, 0x01, 1, exampleCom, edns))
	if !bytes.Equal(buf[:n], want) {
		t.Errorf("answer % x, want % x", buf[:n], want)
	}
}
