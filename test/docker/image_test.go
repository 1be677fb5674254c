//go:build docker

package docker

import (
	"os"
	"strings"
	"testing"
)

// TestDockerfileImage runs the image `docker build` made from the
// Dockerfile (hack/docker/test.sh builds it and names it in
// DOCKER_TEST_MIGFLEX_IMAGE): both binaries run from it, the agent with
// the glibc of its base, as the user the manifests expect.
func TestDockerfileImage(t *testing.T) {
	image := os.Getenv("DOCKER_TEST_MIGFLEX_IMAGE")
	if image == "" {
		t.Fatal("DOCKER_TEST_MIGFLEX_IMAGE is unset: run hack/docker/test.sh")
	}
	if got := strings.TrimSpace(docker(t, "image", "inspect", "-f", "{{.Config.User}} {{json .Config.Entrypoint}}", image)); got != `65532:65532 ["/device-plugin"]` {
		t.Errorf("user and entrypoint %s, want 65532:65532 [\"/device-plugin\"]", got)
	}
	// The entrypoint is the agent: its models subcommand needs no GPU.
	if out := docker(t, "run", "--rm", "--network", "none", image, "models"); !strings.Contains(out, "H100-SXM5-80GB") {
		t.Errorf("device-plugin models printed:\n%s\nwant the built-in H100-SXM5-80GB", out)
	}
	// The webhook and its certgen subcommand parse their flags and exit
	// on --help (usage on stderr).
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--help"}, "-tls-cert-dir"},
		{[]string{"certgen", "--help"}, "-renew-before"},
	} {
		args := append([]string{"run", "--rm", "--network", "none", "--entrypoint", "/webhook", image}, tc.args...)
		if out := dockerCombined(t, args...); !strings.Contains(out, tc.flag) {
			t.Errorf("webhook %s printed:\n%s\nwant its flag %s", strings.Join(tc.args, " "), out, tc.flag)
		}
	}
}
