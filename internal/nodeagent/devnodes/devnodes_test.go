package devnodes

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/migflex/migflex/internal/testsupport/testutil"
)

// The driver's table lists every GPU instance and compute instance a GPU
// can have, with config and monitor first; an excerpt for GPU 0 and 1.
const migMinors = `config 1
monitor 2
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu0/gi2/access 21
gpu0/gi2/ci0/access 22
gpu1/gi1/access 147
gpu1/gi1/ci0/access 148
`

// hostRoot is a temp dir with files at the given host paths.
func hostRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	return testutil.WriteTree(t, "", files)
}

func TestNodes(t *testing.T) {
	mig := func(id string, minor int, gi uint32) Device { return Device{ID: id, Minor: minor, MIG: true, GI: gi} }
	tests := []struct {
		name       string
		files      map[string]string
		driverRoot string
		devs       []Device
		want       []string // path or path<-hostpath
		wantErr    string
	}{
		{
			name: "whole GPUs: control node and each GPU once; no UVM when the module is not loaded",
			devs: []Device{{ID: "GPU-a", Minor: 0}, {ID: "GPU-b", Minor: 3}, {ID: "GPU-a", Minor: 0}},
			want: []string{"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia3"},
		},
		{
			name:  "MIG devices: parent GPU and the capability nodes of GI and CI",
			files: map[string]string{MigMinorsPath: migMinors, "dev/nvidia-uvm": "", "dev/nvidia-uvm-tools": ""},
			devs:  []Device{mig("MIG-a", 0, 2), mig("MIG-b", 0, 1), mig("MIG-c", 1, 1)},
			want: []string{
				"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
				"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22",
				"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13",
				"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap147", "/dev/nvidia-caps/nvidia-cap148",
			},
		},
		{
			name:       "a driver root prefixes the host paths and is where UVM is looked for",
			files:      map[string]string{"run/nvidia/driver/dev/nvidia-uvm": ""},
			driverRoot: "/run/nvidia/driver",
			devs:       []Device{{ID: "GPU-a", Minor: 1}},
			want:       []string{"/dev/nvidiactl<-/run/nvidia/driver/dev/nvidiactl", "/dev/nvidia-uvm<-/run/nvidia/driver/dev/nvidia-uvm", "/dev/nvidia1<-/run/nvidia/driver/dev/nvidia1"},
		},
		{name: "no mig-minors table", devs: []Device{mig("MIG-a", 0, 1)}, wantErr: "reading MIG capability minors"},
		{name: "instance not in the table", files: map[string]string{MigMinorsPath: migMinors}, devs: []Device{mig("MIG-x", 0, 9)}, wantErr: `device MIG-x: no "gpu0/gi9/access"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			driverRoot := tt.driverRoot
			if driverRoot == "" {
				driverRoot = "/"
			}
			nodes, err := Nodes(hostRoot(t, tt.files), driverRoot, tt.devs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range nodes {
				if n.HostPath == n.Path {
					got = append(got, n.Path)
				} else {
					got = append(got, n.Path+"<-"+n.HostPath)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}

func TestParseMigMinors(t *testing.T) {
	got, err := ParseMigMinors(strings.NewReader(migMinors + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got["gpu1/gi1/ci0/access"] != 148 || got["config"] != 1 || len(got) != 8 {
		t.Errorf("ParseMigMinors = %v", got)
	}
	for in, want := range map[string]string{
		"gpu0/gi1/access\n":       `line 1: "gpu0/gi1/access" is not`,
		"config 1\ngpu0 x\n":      `line 2: minor "x"`,
		"gpu0/gi1/access -3\n":    `minor "-3"`,
		"gpu0/gi1/access 1 2 3\n": "is not",
	} {
		if _, err := ParseMigMinors(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMigMinors(%q) err = %v, want one containing %q", in, err, want)
		}
	}
}
