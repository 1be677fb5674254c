package deviceplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPreferredAllocation(t *testing.T) {
	const r = "nvidia.com/mig-1g.10gb"
	dev := func(gpu int, gi uint32) Device { return migDev(r, "1g.10gb", gpu, gi) }
	// GPU 0 has four 1g devices, two of them in use; GPU 1 two, both free;
	// GPU 2 three, all free.
	devices := []Device{
		dev(0, 9), dev(0, 10), dev(0, 11), dev(0, 12),
		dev(1, 9), dev(1, 10),
		dev(2, 9), dev(2, 10), dev(2, 11),
	}
	available := []string{"MIG-2-11", "MIG-0-11", "MIG-0-12", "MIG-1-9", "MIG-1-10", "MIG-2-9", "MIG-2-10"}

	for name, tc := range map[string]struct {
		policy      AllocationPolicy
		available   []string
		mustInclude []string
		size        int
		want        []string
		wantErr     string
	}{
		"packed takes the fullest GPU": {
			policy: AllocationPacked, available: available, size: 1, want: []string{"MIG-0-11"},
		},
		"packed fills GPUs in turn": {
			policy: AllocationPacked, available: available, size: 3, want: []string{"MIG-0-11", "MIG-0-12", "MIG-1-9"},
		},
		"packed starts on the must-include GPU": {
			policy: AllocationPacked, available: available, mustInclude: []string{"MIG-1-10"}, size: 2, want: []string{"MIG-1-10", "MIG-1-9"},
		},
		"distributed spreads over GPUs": {
			policy: AllocationDistributed, available: available, size: 3, want: []string{"MIG-2-9", "MIG-0-11", "MIG-1-9"},
		},
		"distributed counts must-include devices": {
			policy: AllocationDistributed, available: available, mustInclude: []string{"MIG-0-11"}, size: 3, want: []string{"MIG-0-11", "MIG-2-9", "MIG-1-9"},
		},
		"distributed wraps around": {
			policy: AllocationDistributed, available: []string{"MIG-1-9", "MIG-1-10", "MIG-2-9"}, size: 3, want: []string{"MIG-1-9", "MIG-2-9", "MIG-1-10"},
		},
		"must-include only": {
			policy: AllocationPacked, available: available, mustInclude: []string{"MIG-2-10", "MIG-0-12"}, size: 2, want: []string{"MIG-2-10", "MIG-0-12"},
		},
		"unknown and duplicate available IDs are skipped": {
			policy: AllocationPacked, available: []string{"MIG-9-9", "MIG-1-9", "MIG-1-9", "MIG-1-10"}, size: 2, want: []string{"MIG-1-9", "MIG-1-10"},
		},
		"zero size":             {policy: AllocationPacked, available: available, size: 0, wantErr: "size 0 is not positive"},
		"must-include too many": {policy: AllocationPacked, available: available, mustInclude: []string{"MIG-0-11", "MIG-0-12"}, size: 1, wantErr: "2 must-include devices exceed the allocation size 1"},
		"unknown must-include":  {policy: AllocationPacked, available: available, mustInclude: []string{"MIG-7-7"}, size: 1, wantErr: `must-include device "MIG-7-7" is not a device`},
		"not enough available":  {policy: AllocationDistributed, available: []string{"MIG-1-9"}, size: 2, wantErr: "size 2 exceeds the 0 must-include and 1 other"},
		"unknown policy":        {policy: "random", available: available, size: 1, wantErr: "unknown allocation policy random"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := preferredAllocation(tc.policy, devices, tc.available, tc.mustInclude, tc.size)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
