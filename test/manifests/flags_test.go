package manifests

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The flags every rendering passes to the agent and the webhook are flags
// the binaries know, with values they parse: each container's arguments are
// run with -h appended, which the binaries answer with exit status 0 only
// when everything before it parsed. A misspelt flag would otherwise show up
// as a crash-looping pod. (certgen's flags are checked against
// certgen.RegisterFlags in TestHelmTemplate.)
func TestRenderedFlagsParse(t *testing.T) {
	type rendering struct {
		name string
		objs objects
	}
	var renderings []rendering
	for _, s := range scenarios {
		renderings = append(renderings, rendering{"helm/" + s.name, helmTemplate(t, s)})
	}
	for _, o := range overlays {
		renderings = append(renderings, rendering{"kustomize/" + o, kustomizeBuild(t, o)})
	}
	for _, o := range testOverlays {
		renderings = append(renderings, rendering{"kustomize/testdata/" + o, kustomizeBuildTestdata(t, o)})
	}

	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/device-plugin", "./cmd/webhook", "./cmd/planner")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the binaries: %v\n%s", err, out)
	}

	for _, r := range renderings {
		t.Run(r.name, func(t *testing.T) {
			var containers []corev1.Container
			for _, o := range r.objs.ofKind("DaemonSet") {
				containers = append(containers, as[appsv1.DaemonSet](t, o).Spec.Template.Spec.Containers...)
			}
			for _, o := range r.objs.ofKind("Deployment") {
				containers = append(containers, as[appsv1.Deployment](t, o).Spec.Template.Spec.Containers...)
			}
			if len(containers) == 0 {
				t.Fatal("no agent or webhook container")
			}
			for _, c := range containers {
				if len(c.Command) != 1 || (c.Command[0] != "/device-plugin" && c.Command[0] != "/webhook" && c.Command[0] != "/planner") {
					t.Errorf("container %s runs %q, want /device-plugin, /webhook or /planner (the image's paths)", c.Name, c.Command)
					continue
				}
				cmd := exec.Command(filepath.Join(bin, filepath.Base(c.Command[0])), append(c.Args, "-h")...)
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				if errors.As(err, &exit) {
					t.Errorf("%s %s: exit %d:\n%s", c.Command[0], strings.Join(c.Args, " "), exit.ExitCode(), out)
				} else if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
