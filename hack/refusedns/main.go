// Command refusedns is the nameserver of the project's Docker engine
// (hack/docker/up.sh): it answers every DNS query on ADDRESS:53 (UDP) with
// REFUSED, at once.
//
//	refusedns ADDRESS
//
// Containers, and Docker's embedded DNS for the names it does not know, ask
// the engine's nameserver: the default bridge's own address inside the
// engine's network namespace, where nothing may lead off the machine. With
// nothing listening there, every query cost an ICMP port-unreachable, and
// those spent the kernel's rate limit on the ICMP errors the namespace sends
// to one address: a kind node whose CoreDNS checks its upstream twice a
// second got no "network unreachable" for its own attempts to leave the
// machine, and waited out TCP's retries instead. A refusal costs no ICMP,
// and a lookup of an outside name fails at once instead of timing out.
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
)

// rcodeRefused is the DNS response code REFUSED (RFC 1035).
const rcodeRefused = 5

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: refusedns ADDRESS")
		os.Exit(2)
	}
	if err := serve(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "refusedns:", err)
		os.Exit(1)
	}
}

func serve(addr string) error {
	conn, err := net.ListenPacket("udp", net.JoinHostPort(addr, "53"))
	if err != nil {
		return err
	}
	return answer(conn)
}

// answer refuses every query conn receives, until reading fails.
func answer(conn net.PacketConn) error {
	buf := make([]byte, 4096)
	for {
		n, peer, err := conn.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("reading a query: %w", err)
		}
		if answer, err := refusal(buf[:n]); err == nil {
			// A lost answer is the asker's to retry.
			_, _ = conn.WriteTo(answer, peer)
		}
	}
}

// refusal is the REFUSED response to query: the query's ID, opcode and RD
// flag, and its question, which resolvers match against what they asked.
// What is not a query with one question gets an error and no answer.
func refusal(query []byte) ([]byte, error) {
	const header = 12
	if len(query) < header {
		return nil, errors.New("shorter than a DNS header")
	}
	if query[2]&0x80 != 0 {
		return nil, errors.New("a response, not a query")
	}
	if binary.BigEndian.Uint16(query[4:6]) != 1 {
		return nil, errors.New("not exactly one question")
	}
	end := header
	for {
		if end >= len(query) {
			return nil, errors.New("question name runs past the message")
		}
		l := int(query[end])
		if l == 0 {
			break
		}
		if l&0xC0 != 0 {
			return nil, errors.New("question name is not a plain label sequence")
		}
		end += 1 + l
	}
	end += 1 + 4 // the root label, QTYPE and QCLASS
	if end > len(query) {
		return nil, errors.New("question runs past the message")
	}
	out := make([]byte, header, end)
	copy(out[0:2], query[0:2])
	// QR set; opcode and RD as asked; AA, TC and RA clear.
	out[2] = 0x80 | query[2]&0x79
	out[3] = rcodeRefused
	binary.BigEndian.PutUint16(out[4:6], 1) // QDCOUNT; AN, NS and AR stay 0
	return append(out, query[header:end]...), nil
}
