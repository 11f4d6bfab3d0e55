package alloc

import (
	"math/rand/v2"
	"testing"
)

// A watch of the other placement is set up only on a simulated device
// without memory yet, and agrees only while an allocator on the other
// placement, given the same ops, would hold the same statistics.
func TestWatchOtherPlacement(t *testing.T) {
	if newChecked(t, Options{}).OtherPlacementAgrees() {
		t.Error("agrees without a watch")
	}
	a := newChecked(t, Options{Device: SimModelled(0)})
	if err := a.WatchOtherPlacement(); err != nil {
		t.Fatal(err)
	}
	if err := a.WatchOtherPlacement(); err == nil {
		t.Error("a second watch was set up")
	}
	if !a.OtherPlacementAgrees() {
		t.Error("a watch disagrees before any call")
	}
	mustAlloc(t, a, 0, 1<<20, 0)
	b := newChecked(t, Options{})
	mustAlloc(t, b, 0, 1<<20, 0)
	if err := b.WatchOtherPlacement(); err == nil {
		t.Error("a watch was set up on an allocator holding memory")
	}
	if err := newChecked(t, Options{Device: SimEmulated(0)}).WatchOtherPlacement(); err == nil {
		t.Error("a watch was set up on an emulated run's device")
	}
	rmm, err := ParsePolicy("rmm-pool")
	if err != nil {
		t.Fatal(err)
	}
	c := newChecked(t, Options{Config: Config{Policy: rmm}})
	if err := c.WatchOtherPlacement(); err != nil || c.OtherPlacementAgrees() {
		t.Errorf("another policy than pytorch: err %v, agrees %v", err, c.OtherPlacementAgrees())
	}
}

// Random ops of a few sizes, so that equal free blocks and whole free
// segments in several segments are common: while the watch agrees, an
// allocator on the other placement holds the same statistics after every op.
func TestWatchAgreesRandom(t *testing.T) {
	sizes := []uint64{4096, 1 << 20, 3 << 20, 12 << 20, 20 << 20, 40 << 20}
	agreed := 0
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 3))
		dev := SimModelled(uint64(256+rng.IntN(512)) << 20)
		a := newChecked(t, Options{Device: dev})
		if err := a.WatchOtherPlacement(); err != nil {
			t.Fatal(err)
		}
		other, _ := SimOtherPlacement(dev)
		b := newChecked(t, Options{Device: other})
		var live []uint32
		for i := range 400 {
			var op Op
			switch k := rng.IntN(10); {
			case k < 5 || len(live) == 0:
				op = Op{Kind: OpAlloc, ID: uint32(i), Size: sizes[rng.IntN(len(sizes))], Stream: uint64(rng.IntN(2))}
				live = append(live, op.ID)
			case k < 9:
				j := rng.IntN(len(live))
				op = Op{Kind: OpFree, ID: live[j]}
				live[j] = live[len(live)-1]
				live = live[:len(live)-1]
			default:
				op = Op{Kind: OpEmptyCache}
			}
			ra, erra := a.Run([]Op{op}, i, nil)
			rb, errb := b.Run([]Op{op}, i, nil)
			if erra != nil || errb != nil {
				t.Fatalf("seed %d op %d: %v, %v", seed, i, erra, errb)
			}
			if !a.OtherPlacementAgrees() {
				break
			}
			if (ra.OOM != nil) != (rb.OOM != nil) || a.Stats() != b.Stats() {
				t.Fatalf("seed %d op %d: the watch agrees, but the other placement gives oom %v, stats %+v, not %+v",
					seed, i, rb.OOM, b.Stats(), a.Stats())
			}
			if ra.OOM != nil {
				live = live[:len(live)-1] // the failed request holds nothing
			}
		}
		if a.OtherPlacementAgrees() {
			agreed++
		}
	}
	if agreed == 0 || agreed == 200 {
		t.Errorf("the watch agreed to the end in %d of 200 runs: one side only", agreed)
	}
}
