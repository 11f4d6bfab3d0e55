package figures

import (
	"math"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

const (
	MiB = 1 << 20
	GiB = 1 << 30
)

func TestVerdict(t *testing.T) {
	tests := []struct {
		name string
		oom  OOM
		frag bool
		head uint64
	}{
		{"cached bytes suffice", OOM{Rounded: 1 * GiB, CachedFree: 2 * GiB, LargestFree: 512 * MiB}, true, 0},
		{"cached plus card", OOM{Rounded: 1 * GiB, CachedFree: 600 * MiB, LargestFree: 512 * MiB, DeviceFree: 500 * MiB}, true, 500 * MiB},
		{"cap limits headroom", OOM{Rounded: 1 * GiB, CachedFree: 600 * MiB, DeviceFree: 50 * GiB, Allowed: 10 * GiB, Reserved: 10*GiB - 100*MiB}, false, 100 * MiB},
		{"over the cap", OOM{Rounded: 1 * GiB, DeviceFree: 50 * GiB, Allowed: 10 * GiB, Reserved: 11 * GiB}, false, 0},
		{"real shortage", OOM{Rounded: 4 * GiB, CachedFree: 1 * GiB, LargestFree: 1 * GiB, DeviceFree: 1 * GiB}, false, 1 * GiB},
	}
	for _, tt := range tests {
		if got := tt.oom.Headroom(); got != tt.head {
			t.Errorf("%s: Headroom = %d, want %d", tt.name, got, tt.head)
		}
		if got := tt.oom.Fragmented(); got != tt.frag {
			t.Errorf("%s: Fragmented = %v, want %v", tt.name, got, tt.frag)
		}
		want := map[bool]string{true: "fragmentation OOM", false: "real shortage"}[tt.frag]
		if got := tt.oom.Verdict(); got != want {
			t.Errorf("%s: Verdict = %q, want %q", tt.name, got, want)
		}
	}
}

func TestFragmentationOf(t *testing.T) {
	var s alloc.Stats
	s.AllocatedBytes[alloc.All] = alloc.Stat{Current: 3 * GiB, Peak: 6 * GiB}
	s.ReservedBytes[alloc.All] = alloc.Stat{Current: 4 * GiB, Peak: 8 * GiB}
	s.ActiveBytes[alloc.All] = alloc.Stat{Current: 3*GiB + 512*MiB}
	f := FragmentationOf(s, 5*GiB, 128*MiB)
	want := Fragmentation{End: 0.25, AtPeak: 0.375, Peaks: 0.25, Holes: 0.75}
	if f != want {
		t.Errorf("FragmentationOf = %+v, want %+v", f, want)
	}
	if got := CachedFree(s); got != 512*MiB {
		t.Errorf("CachedFree = %d, want 512 MiB", got)
	}
	if f := FragmentationOf(alloc.Stats{}, 0, 0); !math.IsNaN(f.End) || !math.IsNaN(f.AtPeak) || !math.IsNaN(f.Peaks) || !math.IsNaN(f.Holes) {
		t.Errorf("empty stats: %+v, want NaN ratios", f)
	}
	if got := OverBound(9, 6); got != 1.5 {
		t.Errorf("OverBound(9, 6) = %v", got)
	}
	if !math.IsNaN(OverBound(9, 0)) {
		t.Error("OverBound without a bound is not NaN")
	}
}
