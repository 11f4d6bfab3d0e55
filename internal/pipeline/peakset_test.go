package pipeline

import (
	"cmp"
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/pkg/replay"
)

// The allocations the ride keeps for the peak (peakSet), undone from the
// replay's final state, are those a replay stopped at the peak lists,
// with the same blocks and events: for every fixture, read whole and
// streamed, with a timeline of many points and of few.
func TestPeakSetMatchesReplayToPeak(t *testing.T) {
	files, err := filepath.Glob(pytorchFixture("*.pickle"))
	if err != nil || len(files) == 0 {
		t.Fatal("no fixtures", err)
	}
	byID := func(x, y peakBlock) int { return cmp.Compare(x.id, y.id) }
	answered := 0
	for _, f := range files {
		for _, keep := range []Keep{KeepPlan, KeepReport} {
			for _, points := range []int{2000, 3} {
				r, err := Replay(context.Background(), Source{Trace: f, Keep: keep}, Settings{Points: points})
				if err != nil {
					t.Fatal(err)
				}
				if r.cls == nil || r.res.OOM != nil || r.res.Timeline == nil {
					continue
				}
				// the report's replay again, with a ride of its own: the
				// Run let go of its ride's peak once read
				r.ride = newCatRide(r.plan, r.cls)
				ro := r.opts
				ro.Observe, ro.BlockSizes = r.ride.observe, r.ride.wantSizes
				if r.res, err = replay.Run(r.plan, ro); err != nil {
					t.Fatal(err)
				}
				tl := r.res.Timeline
				peak := tl.PeakOp()
				got, _, ok := r.rideAnswers(tl, peak)
				if !ok {
					continue
				}
				answered++
				want, _, err := r.peakByReplay(tl, peak)
				if err != nil {
					t.Fatal(err)
				}
				for k := range want {
					want[k].address = 0 // the ride has none: no block of it is seeded
				}
				slices.SortFunc(got, byID)
				slices.SortFunc(want, byID)
				if !slices.Equal(got, want) {
					t.Errorf("%s keep %d, %d points: the ride's %d blocks at the peak (op %d) differ from the replay's %d",
						filepath.Base(f), keep, points, len(got), peak, len(want))
				}
			}
		}
	}
	if answered < len(files) {
		t.Errorf("the ride answered for %d replays of %d fixtures", answered, len(files))
	}
}
