package manifests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// instruction is one Dockerfile instruction, continuations joined.
type instruction struct {
	cmd  string // upper case: FROM, COPY, RUN, ...
	args string
}

// stage is one FROM and the instructions after it.
type stage struct {
	name  string // the AS name, or ""
	instr []instruction
}

// parseDockerfile splits a Dockerfile into its stages. It knows what the
// tests below need: comments, line continuations and instruction keywords.
func parseDockerfile(t *testing.T, data string) []stage {
	t.Helper()
	var stages []stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") { // --platform=...
				f = f[1:]
			}
			s := stage{}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
		}
		if len(stages) == 0 {
			return // ARG before the first FROM
		}
		stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, in)
	}
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		// Comment lines are dropped, inside a continuation too.
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if body, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	if len(stages) == 0 {
		t.Fatal("Dockerfile has no FROM")
	}
	return stages
}

// words splits an instruction's arguments, in exec (JSON array) or shell
// form, and returns its leading --flags apart.
func words(t *testing.T, in instruction) (flags map[string]string, rest []string) {
	t.Helper()
	flags = map[string]string{}
	f := strings.Fields(in.args)
	for len(f) > 0 && strings.HasPrefix(f[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(f[0], "--"), "=")
		flags[k] = v
		f = f[1:]
	}
	s := strings.Join(f, " ")
	if strings.HasPrefix(s, "[") {
		if err := json.Unmarshal([]byte(s), &rest); err != nil {
			t.Fatalf("%s %s: %v", in.cmd, in.args, err)
		}
		return flags, rest
	}
	return flags, f
}

// image is what the final stage of the Dockerfile produces.
type image struct {
	files      map[string]string // path in the image -> its COPY source
	sourceFrom map[string]string // path in the image -> the stage it is copied from
	user       string
	entrypoint []string
}

func finalImage(t *testing.T, stages []stage) image {
	t.Helper()
	img := image{files: map[string]string{}, sourceFrom: map[string]string{}}
	workdir := "/"
	for _, in := range stages[len(stages)-1].instr {
		switch in.cmd {
		case "WORKDIR":
			workdir = path.Join(workdir, in.args)
		case "USER":
			img.user = in.args
		case "ENTRYPOINT":
			_, img.entrypoint = words(t, in)
		case "COPY", "ADD":
			flags, w := words(t, in)
			if len(w) < 2 {
				t.Fatalf("%s %s: want sources and a destination", in.cmd, in.args)
			}
			srcs, dest := w[:len(w)-1], w[len(w)-1]
			if !path.IsAbs(dest) {
				dest = path.Join(workdir, dest) + map[bool]string{true: "/"}[strings.HasSuffix(dest, "/")]
			}
			for _, src := range srcs {
				p := dest
				if len(srcs) > 1 || strings.HasSuffix(dest, "/") {
					p = path.Join(dest, path.Base(src))
				}
				img.files[p] = src
				img.sourceFrom[p] = flags["from"]
			}
		}
	}
	return img
}

// podSpecs are the pod specs of every workload in objs.
func podSpecs(t *testing.T, objs objects) map[string]*corev1.PodSpec {
	t.Helper()
	out := map[string]*corev1.PodSpec{}
	for _, o := range objs {
		var fields []string
		switch o.GetKind() {
		case "Pod":
			fields = []string{"spec"}
		case "DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job":
			fields = []string{"spec", "template", "spec"}
		case "CronJob":
			fields = []string{"spec", "jobTemplate", "spec", "template", "spec"}
		default:
			continue
		}
		m, ok, err := unstructured.NestedMap(o.Object, fields...)
		if !ok || err != nil {
			t.Fatalf("%s: no pod spec at %v: %v", key(o), fields, err)
		}
		out[key(o)] = as[corev1.PodSpec](t, &unstructured.Unstructured{Object: m})
	}
	return out
}

// allRenderings are every Helm scenario and every kustomization.
func allRenderings(t *testing.T) map[string]objects {
	t.Helper()
	out := map[string]objects{}
	for _, s := range scenarios {
		out["helm/"+s.name] = helmTemplate(t, s)
	}
	for _, o := range overlays {
		out["kustomize/"+o] = kustomizeBuild(t, o)
	}
	for _, o := range testOverlays {
		out["kustomize/testdata/"+o] = kustomizeBuildTestdata(t, o)
	}
	return out
}

// The image the Dockerfile builds is the one the manifests expect: every
// container runs a binary the image has, the image's user is the non-root
// user the webhook and certgen run as, and the binaries come from the
// Makefile target CI builds and tests.
func TestDockerfileMatchesManifests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(data)
	renderings := allRenderings(t)
	checks := []struct {
		name  string
		check func(*testing.T, []stage, image, map[string]objects) []string
	}{
		{"commands are the image's binaries", commandProblems},
		{"the image's user is the webhook's", userProblems},
		{"the build is the make target CI runs", buildProblems},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			stages := parseDockerfile(t, dockerfile)
			for _, p := range c.check(t, stages, finalImage(t, stages), renderings) {
				t.Error(p)
			}
		})
	}

	// The checks can fail: each breaks on a Dockerfile changed the way
	// that would break the manifests.
	for _, tc := range []struct {
		name, old, new string
		check          int
		want           string
	}{
		{"webhook not copied", "/src/bin/device-plugin /src/bin/webhook /src/bin/planner /", "/src/bin/device-plugin /src/bin/planner /", 0, "/webhook"},
		{"planner not copied", "/src/bin/device-plugin /src/bin/webhook /src/bin/planner /", "/src/bin/device-plugin /src/bin/webhook /", 0, "/planner"},
		{"binaries elsewhere", "/src/bin/planner /", "/src/bin/planner /usr/bin/", 0, "not in the image"},
		{"root user", "USER 65532:65532", "USER 0", 1, "non-root"},
		{"another uid", "USER 65532:65532", "USER 1000:1000", 1, "want 1000"},
		{"user name", "USER 65532:65532", "USER nonroot", 1, "numeric"},
		{"plain go build", "    make build ", "    go build -o bin/ ./cmd/... ", 2, "want exactly one"},
		{"unknown target", "    make build ", "    make image-binaries ", 2, "no such target"},
		{"a target CI does not run", "    make build ", "    make bench ", 2, "CI (.ci/run"},
		{"binaries elsewhere on the command line", "BIN=/src/bin", "BIN=/out", 2, "/out/webhook"},
		{"other outputs", "/src/bin/planner /", "/src/bin/planner /src/bin/extra /", 2, "/src/bin/extra"},
	} {
		t.Run("catches "+tc.name, func(t *testing.T) {
			if !strings.Contains(dockerfile, tc.old) {
				t.Fatalf("the Dockerfile no longer has %q: update this case", tc.old)
			}
			stages := parseDockerfile(t, strings.Replace(dockerfile, tc.old, tc.new, 1))
			got := checks[tc.check].check(t, stages, finalImage(t, stages), renderings)
			if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("%s: problems %q, want one mentioning %q", checks[tc.check].name, got, tc.want)
			}
		})
	}
}

// commandProblems: every container of every rendering runs (command, else
// the image's ENTRYPOINT) a file the final stage copies.
func commandProblems(t *testing.T, _ []stage, img image, renderings map[string]objects) []string {
	var out []string
	files := slices.Sorted(maps.Keys(img.files))
	if len(img.entrypoint) == 0 || img.files[img.entrypoint[0]] == "" {
		out = append(out, fmt.Sprintf("ENTRYPOINT %q: not a file the final stage copies (%v)", img.entrypoint, files))
	}
	for name, objs := range renderings {
		n := 0
		for obj, spec := range podSpecs(t, objs) {
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				n++
				cmd := c.Command
				if len(cmd) == 0 {
					cmd = img.entrypoint
				}
				if len(cmd) == 0 || img.files[cmd[0]] == "" {
					out = append(out, fmt.Sprintf("%s %s container %s runs %q: not in the image (%v)", name, obj, c.Name, cmd, files))
				}
			}
		}
		if n == 0 {
			out = append(out, name+": no container")
		}
	}
	return out
}

// userProblems: the image's USER is a numeric non-root uid (the kubelet can
// check runAsNonRoot only for one), the uid the webhook and certgen pods
// ask for with runAsNonRoot.
func userProblems(t *testing.T, _ []stage, img image, renderings map[string]objects) []string {
	uidStr, _, _ := strings.Cut(img.user, ":")
	uid, err := strconv.ParseInt(uidStr, 10, 64)
	if err != nil || uid == 0 {
		return []string{fmt.Sprintf("USER %q: want a numeric non-root uid", img.user)}
	}
	var out []string
	checked := 0
	for name, objs := range renderings {
		for obj, spec := range podSpecs(t, objs) {
			// The webhook and certgen run as the image's user; the
			// agent asks for root.
			if name := path.Base(obj); name != "gpu-webhook" && !strings.HasPrefix(name, "migflex-certgen") {
				continue
			}
			for _, c := range spec.Containers {
				runAs, nonRoot := effectiveUser(spec, c)
				checked++
				if runAs == nil || *runAs != uid || nonRoot == nil || !*nonRoot {
					out = append(out, fmt.Sprintf("%s %s container %s: runAsUser %v runAsNonRoot %v, want %d (the image's USER %s) and true", name, obj, c.Name, deref(runAs), deref(nonRoot), uid, img.user))
				}
			}
		}
	}
	if checked == 0 {
		out = append(out, "no webhook or certgen container in any rendering")
	}
	return out
}

// effectiveUser is the container's runAsUser and runAsNonRoot, the pod's
// where the container sets none.
func effectiveUser(spec *corev1.PodSpec, c corev1.Container) (*int64, *bool) {
	var user *int64
	var nonRoot *bool
	if p := spec.SecurityContext; p != nil {
		user, nonRoot = p.RunAsUser, p.RunAsNonRoot
	}
	if s := c.SecurityContext; s != nil {
		if s.RunAsUser != nil {
			user = s.RunAsUser
		}
		if s.RunAsNonRoot != nil {
			nonRoot = s.RunAsNonRoot
		}
	}
	return user, nonRoot
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// assignment is a variable name on a make command line (NAME=value).
var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// makeTargetRe finds `make TARGET` (or $(MAKE) TARGET) in a command line.
var makeTargetRe = regexp.MustCompile(`(?:^|[;&|]\s*|\s)(?:make|\$\(MAKE\))\s+([A-Za-z0-9_.-]+)`)

// makefile is the part of a Makefile the test needs: variables and rules.
type makefile struct {
	vars    map[string]string
	prereqs map[string][]string
	recipes map[string][]string
}

func parseMakefile(t *testing.T, data string) makefile {
	t.Helper()
	m := makefile{vars: map[string]string{}, prereqs: map[string][]string{}, recipes: map[string][]string{}}
	varRe := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*(?::=|\?=|=)\s*(.*)$`)
	ruleRe := regexp.MustCompile(`^([A-Za-z0-9_.-]+)\s*:([^=].*)?$`)
	var target string
	lines := strings.Split(data, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		switch {
		case strings.HasPrefix(line, "\t"):
			if target != "" {
				m.recipes[target] = append(m.recipes[target], strings.TrimSpace(line))
			}
		case strings.HasPrefix(strings.TrimSpace(line), "#") || strings.TrimSpace(line) == "":
		case varRe.MatchString(line):
			g := varRe.FindStringSubmatch(line)
			// ?= sets only what is not set yet (the first of two
			// branches of an ifeq, as make reads it natively).
			if _, set := m.vars[g[1]]; !set || !strings.Contains(line, "?=") {
				m.vars[g[1]] = strings.TrimSpace(g[2])
			}
			target = ""
		case ruleRe.MatchString(line):
			g := ruleRe.FindStringSubmatch(line)
			target = g[1]
			m.prereqs[target] = strings.Fields(g[2])
		default:
			target = ""
		}
	}
	return m
}

// expand replaces $(VAR) with the Makefile's variables (and CURDIR).
func (m makefile) expand(s, curdir string) string {
	re := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for range 10 {
		s = re.ReplaceAllStringFunc(s, func(v string) string {
			name := re.FindStringSubmatch(v)[1]
			if name == "CURDIR" {
				return curdir
			}
			if val, ok := m.vars[name]; ok {
				return val
			}
			return v
		})
	}
	return s
}

// runsTarget reports whether running target (its prerequisites, its
// recipe, and the repository scripts its recipe runs) runs `make want`.
func (m makefile) runsTarget(t *testing.T, target, want string, seen map[string]bool) bool {
	t.Helper()
	if target == want {
		return true
	}
	if seen[target] {
		return false
	}
	seen[target] = true
	for _, p := range m.prereqs[target] {
		if m.runsTarget(t, p, want, seen) {
			return true
		}
	}
	for _, line := range m.recipes[target] {
		for _, g := range makeTargetRe.FindAllStringSubmatch(line, -1) {
			if m.runsTarget(t, g[1], want, seen) {
				return true
			}
		}
		// A script of this repository the recipe runs.
		if f := strings.Fields(line); len(f) > 0 && strings.HasSuffix(f[0], ".sh") {
			if slices.Contains(scriptMakeTargets(t, f[0]), want) {
				return true
			}
		}
	}
	return false
}

// scriptMakeTargets are the targets a file runs with `make TARGET` lines.
func scriptMakeTargets(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), file))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, g := range makeTargetRe.FindAllStringSubmatch(line, -1) {
			out = append(out, g[1])
		}
	}
	return out
}

// buildProblems: the final stage's binaries are what a `make TARGET` in
// their build stage writes, and CI (.ci/run) runs the same target.
func buildProblems(t *testing.T, stages []stage, img image, _ map[string]objects) []string {
	var out []string
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	mk := parseMakefile(t, string(data))

	// The stages the final one copies from, and the sources it copies.
	want := map[string][]string{}
	for p, from := range img.sourceFrom {
		if from == "" {
			out = append(out, fmt.Sprintf("%s is copied from the build context, not built", p))
			continue
		}
		want[from] = append(want[from], img.files[p])
	}
	for from, srcs := range want {
		i := slices.IndexFunc(stages, func(s stage) bool { return s.name == from })
		if i < 0 {
			out = append(out, fmt.Sprintf("COPY --from=%s: no such stage", from))
			continue
		}
		workdir := "/"
		var targets []string
		// Variables set on the make command line (make build BIN=/out)
		// win over the Makefile's.
		cmdline := makefile{vars: maps.Clone(mk.vars), prereqs: mk.prereqs, recipes: mk.recipes}
		for _, in := range stages[i].instr {
			switch in.cmd {
			case "WORKDIR":
				workdir = path.Join(workdir, in.args)
			case "RUN":
				_, w := words(t, in)
				line := strings.Join(w, " ")
				for _, g := range makeTargetRe.FindAllStringSubmatchIndex(line, -1) {
					targets = append(targets, line[g[2]:g[3]])
					for _, f := range strings.Fields(line[g[1]:]) {
						if f == "&&" || f == "||" || f == ";" || f == "|" {
							break
						}
						if k, v, ok := strings.Cut(f, "="); ok && assignment.MatchString(k) {
							cmdline.vars[k] = v
						}
					}
				}
			}
		}
		if len(targets) != 1 {
			out = append(out, fmt.Sprintf("stage %s runs make targets %q, want exactly one", from, targets))
			continue
		}
		target := targets[0]
		if _, ok := mk.prereqs[target]; !ok {
			out = append(out, fmt.Sprintf("stage %s runs `make %s`: the Makefile has no such target", from, target))
			continue
		}
		// What the target's recipe writes (go build -o PATH), with the
		// stage's WORKDIR as make's CURDIR.
		var outputs []string
		for _, line := range mk.recipes[target] {
			f := strings.Fields(cmdline.expand(line, workdir))
			for j := 0; j+1 < len(f); j++ {
				if f[j] == "-o" {
					outputs = append(outputs, path.Clean(f[j+1]))
				}
			}
		}
		slices.Sort(outputs)
		slices.Sort(srcs)
		if diff := cmp.Diff(srcs, outputs); diff != "" {
			out = append(out, fmt.Sprintf("the image copies (-) from stage %s other files than `make %s` writes (+):\n%s", from, target, diff))
		}

		// CI runs the same target: .ci/run's make targets reach it.
		ciTargets := scriptMakeTargets(t, ".ci/run")
		reached := slices.ContainsFunc(ciTargets, func(c string) bool { return mk.runsTarget(t, c, target, map[string]bool{}) })
		if !reached {
			out = append(out, fmt.Sprintf("the image is built with `make %s`, which CI (.ci/run: make %v) never runs", target, ciTargets))
		}
	}
	return out
}
