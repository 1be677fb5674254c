package sim_test

import (
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
)

// Profile shorthands by compute slices: the query constants every built-in
// model has.
var byKind = map[string]int{
	"1g":    nvml.GPU_INSTANCE_PROFILE_1_SLICE,
	"1g+me": nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1,
	"1g.2m": nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, // 1 compute, 2 memory slices
	"2g":    nvml.GPU_INSTANCE_PROFILE_2_SLICE,
	"3g":    nvml.GPU_INSTANCE_PROFILE_3_SLICE,
	"4g":    nvml.GPU_INSTANCE_PROFILE_4_SLICE,
	"7g":    nvml.GPU_INSTANCE_PROFILE_7_SLICE,
}

type step struct {
	kind  string
	start int // -1: CreateGpuInstance (driver's first fit)
}

func at(kind string, start int) step { return step{kind, start} }
func firstFit(kind string) step      { return step{kind, -1} }

func repeat(s step, n int) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
		if s.start >= 0 {
			out[i].start = s.start + i
		}
	}
	return out
}

// TestLayouts builds each layout on every built-in model. A layout that
// fits creates every instance; one that does not fails on its last step
// with wantLast, after the others were created.
func TestLayouts(t *testing.T) {
	tests := []struct {
		name     string
		steps    []step
		wantLast nvml.Return
	}{
		{"7x1g placed", repeat(at("1g", 0), 7), nvml.SUCCESS},
		{"7x1g first fit", repeat(firstFit("1g"), 7), nvml.SUCCESS},
		{"4g+3g placed", []step{at("4g", 0), at("3g", 4)}, nvml.SUCCESS},
		{"4g+3g first fit", []step{firstFit("4g"), firstFit("3g")}, nvml.SUCCESS},
		{"3g+3g", []step{at("3g", 0), at("3g", 4)}, nvml.SUCCESS},
		{"4g+2g+1g placed", []step{at("4g", 0), at("2g", 4), at("1g", 6)}, nvml.SUCCESS},
		{"4g+2g+1g first fit", []step{firstFit("4g"), firstFit("2g"), firstFit("1g")}, nvml.SUCCESS},
		{"2g+2g+3g placed", []step{at("2g", 0), at("2g", 2), at("3g", 4)}, nvml.SUCCESS},
		{"2g+2g+3g first fit", []step{firstFit("2g"), firstFit("2g"), firstFit("3g")}, nvml.SUCCESS},
		{"2g+2g+2g+1g", []step{at("2g", 0), at("2g", 2), at("2g", 4), at("1g", 6)}, nvml.SUCCESS},
		{"7g", []step{firstFit("7g")}, nvml.SUCCESS},
		{"4x 1g with 2 memory slices", repeat(firstFit("1g.2m"), 4), nvml.SUCCESS},
		{"1g+me beside 1g", []step{at("1g+me", 0), at("1g", 1)}, nvml.SUCCESS},

		{"8x1g", repeat(firstFit("1g"), 8), nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"3x3g", repeat(firstFit("3g"), 3), nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"4g+4g", repeat(firstFit("4g"), 2), nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"4x2g", repeat(firstFit("2g"), 4), nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"5x 1g with 2 memory slices", repeat(firstFit("1g.2m"), 5), nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"3g at 0 blocks 4g", []step{at("3g", 0), firstFit("4g")}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"overlap", []step{at("2g", 0), at("1g", 1)}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"same placement twice", []step{at("3g", 4), at("3g", 4)}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"7g beside anything", []step{at("1g", 6), firstFit("7g")}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"1g+me max count 1", []step{at("1g+me", 0), at("1g+me", 3)}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"placement not in the list", []step{at("2g", 1)}, nvml.ERROR_INVALID_ARGUMENT},
		{"3g at 2", []step{at("3g", 2)}, nvml.ERROR_INVALID_ARGUMENT},
		{"start past the end", []step{at("1g", 7)}, nvml.ERROR_INVALID_ARGUMENT},
	}
	for _, model := range builtinNames {
		for _, tc := range tests {
			t.Run(model+"/"+tc.name, func(t *testing.T) {
				l := newLib(t, gpu(model))
				d := enableMIG(t, l, 0)
				for i, s := range tc.steps {
					info := profileInfo(t, d, byKind[s.kind])
					placements, _ := d.GetGpuInstancePossiblePlacements(&info)
					_, ret := createGI(d, info, s.start, placements[0].Size)
					want := nvml.SUCCESS
					if i == len(tc.steps)-1 {
						want = tc.wantLast
					}
					if ret != want {
						t.Fatalf("step %d (%s at %d) = %v, want %v", i, s.kind, s.start, ret, want)
					}
				}
			})
		}
	}
}

func TestCreateGpuInstanceArguments(t *testing.T) {
	l := newLib(t, gpu("A100-SXM4-80GB"))
	d := device(t, l, 0)
	info := profileInfo(t, d, nvml.GPU_INSTANCE_PROFILE_2_SLICE)

	// MIG disabled: the profile can be read, not created.
	if _, ret := d.CreateGpuInstance(&info); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("create with MIG disabled = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := d.GetGpuInstances(&info); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("list with MIG disabled = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	enableMIG(t, l, 0)
	bogus := info
	bogus.Id = 99
	tests := []struct {
		name      string
		info      *nvml.GpuInstanceProfileInfo
		placement *nvml.GpuInstancePlacement
		want      nvml.Return
	}{
		{"nil info", nil, &nvml.GpuInstancePlacement{Start: 0, Size: 2}, nvml.ERROR_INVALID_ARGUMENT},
		{"unknown profile id", &bogus, &nvml.GpuInstancePlacement{Start: 0, Size: 2}, nvml.ERROR_INVALID_ARGUMENT},
		{"nil placement", &info, nil, nvml.ERROR_INVALID_ARGUMENT},
		{"wrong size", &info, &nvml.GpuInstancePlacement{Start: 0, Size: 1}, nvml.ERROR_INVALID_ARGUMENT},
		{"valid", &info, &nvml.GpuInstancePlacement{Start: 2, Size: 2}, nvml.SUCCESS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, ret := d.CreateGpuInstanceWithPlacement(tc.info, tc.placement); ret != tc.want {
				t.Errorf("CreateGpuInstanceWithPlacement() = %v, want %v", ret, tc.want)
			}
		})
	}
}

func TestProfileQueries(t *testing.T) {
	l := newLib(t, gpu("A100-SXM4-40GB"))
	d := device(t, l, 0)
	got := map[int]nvml.Return{}
	for q := -1; q <= nvml.GPU_INSTANCE_PROFILE_COUNT; q++ {
		_, got[q] = d.GetGpuInstanceProfileInfo(q)
	}
	want := map[int]nvml.Return{-1: nvml.ERROR_INVALID_ARGUMENT, nvml.GPU_INSTANCE_PROFILE_COUNT: nvml.ERROR_INVALID_ARGUMENT}
	for q := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		want[q] = nvml.ERROR_NOT_SUPPORTED
	}
	for _, q := range []int{0, 1, 2, 3, 4, 7, 9} {
		want[q] = nvml.SUCCESS
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetGpuInstanceProfileInfo returns by query (-want +got):\n%s", diff)
	}
	info := profileInfo(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	wantInfo := nvml.GpuInstanceProfileInfo{Id: 9, SliceCount: 3, InstanceCount: 2, MultiprocessorCount: 42, CopyEngineCount: 3, DecoderCount: 2, MemorySizeMB: 19968}
	if diff := cmp.Diff(wantInfo, info); diff != "" {
		t.Errorf("3g.20gb info (-want +got):\n%s", diff)
	}
	placements, ret := d.GetGpuInstancePossiblePlacements(&info)
	if diff := cmp.Diff([]nvml.GpuInstancePlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}, placements); diff != "" || ret != nvml.SUCCESS {
		t.Errorf("placements = %v (-want +got):\n%s", ret, diff)
	}
}

func TestRemainingCapacity(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"))
	d := enableMIG(t, l, 0)
	remaining := func() map[string]int {
		out := map[string]int{}
		for _, kind := range []string{"1g", "1g+me", "1g.2m", "2g", "3g", "4g", "7g"} {
			info := profileInfo(t, d, byKind[kind])
			n, ret := d.GetGpuInstanceRemainingCapacity(&info)
			if ret != nvml.SUCCESS {
				t.Fatalf("GetGpuInstanceRemainingCapacity(%s) = %v", kind, ret)
			}
			out[kind] = n
		}
		return out
	}
	if diff := cmp.Diff(map[string]int{"1g": 7, "1g+me": 1, "1g.2m": 4, "2g": 3, "3g": 2, "4g": 1, "7g": 1}, remaining()); diff != "" {
		t.Errorf("empty GPU (-want +got):\n%s", diff)
	}
	createInstance(t, d, byKind["3g"], 4)
	if diff := cmp.Diff(map[string]int{"1g": 4, "1g+me": 1, "1g.2m": 2, "2g": 2, "3g": 1, "4g": 1, "7g": 0}, remaining()); diff != "" {
		t.Errorf("with 3g at 4 (-want +got):\n%s", diff)
	}
	createInstance(t, d, byKind["2g"], 0)
	if diff := cmp.Diff(map[string]int{"1g": 2, "1g+me": 1, "1g.2m": 1, "2g": 1, "3g": 0, "4g": 0, "7g": 0}, remaining()); diff != "" {
		t.Errorf("with 2g at 0 and 3g at 4 (-want +got):\n%s", diff)
	}
}

func TestInstanceIDsAndInfo(t *testing.T) {
	l := newLib(t, gpu("A100-SXM4-40GB"))
	d := enableMIG(t, l, 0)
	var gis []nvml.GpuInstance
	for _, s := range []int{0, 2, 4} {
		gi, _ := createInstance(t, d, byKind["2g"], s)
		gis = append(gis, gi)
	}
	ids := func() []uint32 {
		var out []uint32
		info := profileInfo(t, d, byKind["2g"])
		list, _ := d.GetGpuInstances(&info)
		for _, gi := range list {
			i, _ := gi.GetInfo()
			out = append(out, i.Id)
		}
		return out
	}
	if diff := cmp.Diff([]uint32{1, 2, 3}, ids()); diff != "" {
		t.Errorf("GPU instance ids (-want +got):\n%s", diff)
	}
	// Free id 2 (the instance at 2): the next instance reuses it.
	destroyAll(t, gis[1])
	if ret := gis[1].Destroy(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("Destroy() on a destroyed instance = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	gi, ci := createInstance(t, d, byKind["2g"], 2)
	info, _ := gi.GetInfo()
	wantInfo := nvml.GpuInstanceInfo{Device: d, Id: 2, ProfileId: 14, Placement: nvml.GpuInstancePlacement{Start: 2, Size: 2}}
	if diff := cmp.Diff(wantInfo, info, cmp.Comparer(sameDevice)); diff != "" {
		t.Errorf("GetInfo() (-want +got):\n%s", diff)
	}
	// The old handle stays stale although id 2 is back.
	if _, ret := gis[1].GetInfo(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("stale handle GetInfo() = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if byID, ret := d.GetGpuInstanceById(2); ret != nvml.SUCCESS {
		t.Errorf("GetGpuInstanceById(2) = %v", ret)
	} else if i, _ := byID.GetInfo(); i.Placement.Start != 2 {
		t.Errorf("GetGpuInstanceById(2) start = %d", i.Placement.Start)
	}
	if _, ret := d.GetGpuInstanceById(9); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetGpuInstanceById(9) = %v, want ERROR_NOT_FOUND", ret)
	}
	ciInfo, _ := ci.GetInfo()
	if ciInfo.Id != 0 || ciInfo.ProfileId != nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE || ciInfo.Placement != (nvml.ComputeInstancePlacement{Start: 0, Size: 2}) {
		t.Errorf("compute instance info = %+v", ciInfo)
	}
	if parent, _ := ciInfo.GpuInstance.GetInfo(); parent.Id != 2 {
		t.Errorf("compute instance's GPU instance = %d, want 2", parent.Id)
	}
}

func sameDevice(a, b nvml.Device) bool {
	ua, ra := a.GetUUID()
	ub, rb := b.GetUUID()
	return ra == nvml.SUCCESS && rb == nvml.SUCCESS && ua == ub
}

// destroyAll destroys a GPU instance's compute instances, then the GPU
// instance.
func destroyAll(t *testing.T, gi nvml.GpuInstance) {
	t.Helper()
	info, _ := gi.GetInfo()
	ciProf, _ := gi.GetComputeInstanceProfileInfo(fullCI[map[uint32]uint32{19: 1, 20: 1, 15: 1, 14: 2, 9: 3, 5: 4, 0: 7}[info.ProfileId]], 0)
	cis, _ := gi.GetComputeInstances(&ciProf)
	for _, ci := range cis {
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			t.Fatalf("compute instance Destroy() = %v", ret)
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatalf("GPU instance Destroy() = %v", ret)
	}
}

func TestComputeInstances(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"))
	d := enableMIG(t, l, 0)
	info := profileInfo(t, d, byKind["3g"])
	gi, ret := createGI(d, info, 0, 4)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	for q := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		_, ret := gi.GetComputeInstanceProfileInfo(q, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		want := nvml.ERROR_NOT_SUPPORTED
		if q == nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE {
			want = nvml.SUCCESS
		}
		if ret != want {
			t.Errorf("GetComputeInstanceProfileInfo(%d) = %v, want %v", q, ret, want)
		}
	}
	if _, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 1); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("unknown engine profile = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	ciProf, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 0)
	if want := (nvml.ComputeInstanceProfileInfo{Id: 2, SliceCount: 3, InstanceCount: 1, MultiprocessorCount: 60}); ciProf != want {
		t.Errorf("compute instance profile = %+v, want %+v", ciProf, want)
	}
	if n, _ := gi.GetComputeInstanceRemainingCapacity(&ciProf); n != 1 {
		t.Errorf("remaining compute instances = %d, want 1", n)
	}
	if _, ret := gi.CreateComputeInstanceWithPlacement(&ciProf, &nvml.ComputeInstancePlacement{Start: 1, Size: 2}); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("partial placement = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	ci, ret := gi.CreateComputeInstanceWithPlacement(&ciProf, &nvml.ComputeInstancePlacement{Start: 0, Size: 3})
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.CreateComputeInstance(&ciProf); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("second full-size compute instance = %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
	}
	if n, _ := gi.GetComputeInstanceRemainingCapacity(&ciProf); n != 0 {
		t.Errorf("remaining compute instances = %d, want 0", n)
	}
	if _, ret := gi.GetComputeInstanceById(0); ret != nvml.SUCCESS {
		t.Errorf("GetComputeInstanceById(0) = %v", ret)
	}
	if _, ret := gi.GetComputeInstanceById(1); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetComputeInstanceById(1) = %v, want ERROR_NOT_FOUND", ret)
	}
	// Destroying the GPU instance with its compute instance in place fails
	// like real hardware; with it gone it succeeds.
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("GPU instance Destroy() with a compute instance = %v, want ERROR_IN_USE", ret)
	}
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := ci.GetInfo(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("destroyed compute instance GetInfo() = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Errorf("GPU instance Destroy() = %v", ret)
	}
}

func TestBusy(t *testing.T) {
	l := newLib(t, gpu("H100-SXM5-80GB"))
	d := enableMIG(t, l, 0)
	gi, ci := createInstance(t, d, byKind["4g"], 0)
	id := giID(t, gi)
	if err := l.SetBusy(0, id, true); err != nil {
		t.Fatal(err)
	}
	if ret := ci.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("compute instance Destroy() while busy = %v, want ERROR_IN_USE", ret)
	}
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("GPU instance Destroy() while busy = %v, want ERROR_IN_USE", ret)
	}
	if err := l.SetBusy(0, id, false); err != nil {
		t.Fatal(err)
	}
	destroyAll(t, gi)

	for _, tc := range []struct {
		gpu  int
		gi   uint32
		want string
	}{
		{1, 0, "set busy: no GPU 1 (the simulator has 1): ERROR_INVALID_ARGUMENT"},
		{0, id, fmt.Sprintf("GPU 0 has no GPU instance %d: ERROR_NOT_FOUND", id)},
	} {
		if err := l.SetBusy(tc.gpu, tc.gi, true); err == nil || err.Error() != tc.want {
			t.Errorf("SetBusy(%d, %d) = %v, want %q", tc.gpu, tc.gi, err, tc.want)
		}
	}
}

func giID(t *testing.T, gi nvml.GpuInstance) uint32 {
	t.Helper()
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		t.Fatalf("GetInfo() = %v", ret)
	}
	return info.Id
}
