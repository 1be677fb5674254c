//go:build docker

package docker

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The engine's settings, as hack/docker/lib.sh sets them by default.
const (
	netns     = "migflex-docker"
	bridgeNet = "192.0.2.0/24"
	pool      = "198.51.100.0/24"
	// The containers' nameserver: the default bridge's own address.
	nameserver = "192.0.2.1"
)

// documentation is the RFC 5737 ranges: no real host has an address there.
var documentation = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	if os.Getenv("DOCKER_HOST") == "" {
		t.Fatal("DOCKER_HOST is unset: run the tests through hack/docker/run.sh")
	}
	cli := os.Getenv("DOCKER_CLI")
	if cli == "" {
		cli = "/usr/bin/docker"
	}
	return run(t, cli, args...)
}

// dockerCombined is docker with stdout and stderr together.
func dockerCombined(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "/usr/bin/docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// A network for the test, from the engine's pool, as kind makes its own.
func userNetwork(t *testing.T) string {
	t.Helper()
	name := "migflex-nettest"
	docker(t, "network", "create", name)
	t.Cleanup(func() { _ = exec.Command("/usr/bin/docker", "network", "rm", name).Run() })
	return name
}

// TestEngineNetworksAreDocumentationRanges: every address the engine's
// namespace has is loopback or in a documentation range, including a
// user network's (kind's) from the pool, and the namespace has no default
// route, nor any route outside those ranges.
func TestEngineNetworksAreDocumentationRanges(t *testing.T) {
	userNetwork(t)
	for _, cidr := range strings.Fields(docker(t, "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}", "bridge", "migflex-nettest")) {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			t.Fatal(err)
		}
		if !inDocumentation(p.Addr()) {
			t.Errorf("a Docker network has subnet %s, outside the documentation ranges", p)
		}
	}
	if got := strings.TrimSpace(docker(t, "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}}{{end}}", "bridge")); got != bridgeNet {
		t.Errorf("default bridge subnet %q, want %q", got, bridgeNet)
	}
	if got := strings.TrimSpace(docker(t, "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}}{{end}}", "migflex-nettest")); !netip.MustParsePrefix(pool).Contains(netip.MustParsePrefix(got).Addr()) {
		t.Errorf("user network subnet %q, want one from the pool %s", got, pool)
	}

	for _, line := range strings.Split(strings.TrimSpace(run(t, "ip", "-n", netns, "-o", "addr", "show")), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "inet" && f[2] != "inet6") {
			continue
		}
		p, err := netip.ParsePrefix(f[3])
		if err != nil {
			t.Fatal(err)
		}
		if !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() && !inDocumentation(p.Addr()) {
			t.Errorf("namespace %s has address %s on %s", netns, p, f[1])
		}
	}
	for _, family := range []string{"-4", "-6"} {
		for _, line := range strings.Split(strings.TrimSpace(run(t, "ip", family, "-n", netns, "route", "show")), "\n") {
			if line == "" {
				continue
			}
			dst := strings.Fields(line)[0]
			if dst == "default" {
				t.Errorf("namespace %s has a default route: %s", netns, line)
				continue
			}
			p, err := netip.ParsePrefix(dst)
			if err != nil {
				p, err = netip.ParsePrefix(dst + "/32")
			}
			if err != nil || (!inDocumentation(p.Addr()) && !p.Addr().IsLinkLocalUnicast()) {
				t.Errorf("namespace %s routes %s: %s", netns, dst, line)
			}
		}
	}
}

// TestEngineCannotReachOffMachine asks the kernel, without sending a
// packet, how the engine's namespace would route an address off this
// machine: it has no route. A container's attempt fails with the same
// answer, from the namespace, and DOCKER-USER drops whatever a route added
// later would forward outside the documentation ranges; it lets through
// only what those ranges are sent, and frames bridged between two
// containers of the namespace (kind's nodes, carrying their pods' traffic).
func TestEngineCannotReachOffMachine(t *testing.T) {
	// An address of the documentation ranges that no network here has.
	const elsewhere = "203.0.113.7"
	out, err := exec.Command("ip", "-n", netns, "route", "get", elsewhere).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unreachable") {
		t.Errorf("ip -n %s route get %s: %v %q; want it refused as unreachable", netns, elsewhere, err, out)
	}
	rules := run(t, "ip", "netns", "exec", netns, "iptables", "-S", "DOCKER-USER")
	want := []string{
		"-A DOCKER-USER -m physdev --physdev-is-bridged -j RETURN",
		"-A DOCKER-USER -d 192.0.2.0/24 -j RETURN",
		"-A DOCKER-USER -d 198.51.100.0/24 -j RETURN",
		"-A DOCKER-USER -d 203.0.113.0/24 -j RETURN",
		"-A DOCKER-USER -j DROP",
	}
	if !strings.Contains(rules, strings.Join(want, "\n")) {
		t.Errorf("DOCKER-USER:\n%s\nwant, in order:\n%s", rules, strings.Join(want, "\n"))
	}
	if got := strings.TrimSpace(run(t, "ip", "netns", "exec", netns, "sysctl", "-n", "net.ipv4.icmp_ratelimit")); got != "0" {
		t.Errorf("net.ipv4.icmp_ratelimit in %s is %s, want 0: a container's attempt to leave must be refused at once", netns, got)
	}

	image := os.Getenv("DOCKER_TEST_IMAGE")
	if image == "" {
		t.Skip("DOCKER_TEST_IMAGE unset: no image with bash to try a connection from a container")
	}
	// bash's /dev/tcp: the connect fails at once, answered by the namespace.
	res, err := exec.Command("/usr/bin/docker", "run", "--rm", "--network", userNetwork(t), image,
		"bash", "-c", "exec 3<>/dev/tcp/"+elsewhere+"/80").CombinedOutput()
	if err == nil || !(strings.Contains(string(res), "unreachable") || strings.Contains(string(res), "No route to host")) {
		t.Errorf("a container's connection to %s: %v %q; want it refused as unreachable", elsewhere, err, res)
	}
}

// TestEngineNameserverRefuses: the containers' nameserver, on the default
// bridge's address in the engine's namespace, answers a query REFUSED
// (hack/refusedns), so that containers' lookups of outside names fail at
// once and cost no ICMP. The query is sent from inside the namespace, by
// this test binary run again there.
func TestEngineNameserverRefuses(t *testing.T) {
	const helperEnv = "MIGFLEX_TEST_DNS_HELPER"
	if os.Getenv(helperEnv) == "1" {
		c, err := net.Dial("udp", net.JoinHostPort(nameserver, "53"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Hang protection only.
		if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		q := append([]byte{0xbe, 0xef, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0}, "\x07example\x03com\x00\x00\x01\x00\x01"...)
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no answer from %s: %v", nameserver, err)
		}
		if n < 12 || buf[0] != 0xbe || buf[1] != 0xef || buf[2]&0x80 == 0 || buf[3]&0x0f != 5 {
			t.Fatalf("answer % x from %s: want a response to ID beef with RCODE 5 (REFUSED)", buf[:n], nameserver)
		}
		return
	}
	cmd := exec.CommandContext(t.Context(), "ip", "netns", "exec", netns, os.Args[0], "-test.run=^TestEngineNameserverRefuses$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Errorf("a query to %s from inside %s: %v\n%s", nameserver, netns, err, out)
	}
}

// TestHostNamespaceUntouched: Docker's bridges and iptables chains exist
// only in the engine's namespace, so the host's FORWARD policy and the
// local cluster's networking (hack/cluster) are left alone.
func TestHostNamespaceUntouched(t *testing.T) {
	for _, line := range strings.Split(run(t, "ip", "-o", "link", "show"), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 {
			name := strings.TrimSuffix(strings.Split(f[1], "@")[0], ":")
			if name == "docker0" || strings.HasPrefix(name, "br-") {
				t.Errorf("the host has Docker's interface %s", name)
			}
		}
	}
	rules := run(t, "iptables", "-S")
	if strings.Contains(rules, "DOCKER") {
		t.Errorf("the host's iptables has Docker's rules:\n%s", rules)
	}
	if got := strings.TrimSpace(run(t, "ip", "netns", "exec", netns, "iptables", "-S", "FORWARD")); !strings.Contains(got, "DOCKER-USER") {
		t.Errorf("the engine's namespace has no Docker FORWARD rules (is the engine running in %s?):\n%s", netns, got)
	}
}

func inDocumentation(a netip.Addr) bool {
	for _, p := range documentation {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}
