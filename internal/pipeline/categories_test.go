package pipeline

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// The explorer colours every allocation by its category and samples what
// each category held; the replay's categories at the peak match what the
// classification put there.
func TestExplorerCategories(t *testing.T) {
	r, err := Replay(context.Background(), Source{Trace: "../categories/testdata/profiler/leak.pickle.gz", Keep: KeepDetail}, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Report.Categories
	if c == nil || c.Total != uint64(r.Report.Stats.AllocatedBytes[0].Peak) || c.Bytes("activation") == 0 || c.KeptPastStep == 0 {
		t.Fatalf("categories %+v", c)
	}
	d, err := r.Detail(nil)
	if err != nil {
		t.Fatal(err)
	}
	ex := d.Explorers[0]
	if len(ex.Categories) != 9 || len(ex.CategorySeries) == 0 || len(ex.CategorySeries) > seriesPoints {
		t.Fatalf("%d categories, %d points", len(ex.Categories), len(ex.CategorySeries))
	}
	for i, a := range ex.Allocs {
		if a.Category == 0 || int(a.Category) > len(ex.Categories) {
			t.Fatalf("allocation %d: category %d", i, a.Category)
		}
	}
	// the sample holding the most: activations lead, as at the peak
	best, at := uint64(0), 0
	for i, p := range ex.CategorySeries {
		var sum uint64
		for _, n := range p.Bytes {
			sum += n
		}
		if sum > best {
			best, at = sum, i
		}
	}
	p := ex.CategorySeries[at]
	for k, n := range p.Bytes {
		if n > p.Bytes[4] {
			t.Errorf("at op %d, %s holds %d, more than the activations' %d", p.Op, ex.Categories[k], n, p.Bytes[4])
		}
	}
}

// The categories at the peak come from the report's own timeline when it
// has one, and from a replay of their own when it has none: both find the
// same peak and shares, read whole or streamed, and the peak's total is
// the replay's allocated bytes at its peak.
func TestCategoriesPeakWithoutTimeline(t *testing.T) {
	path := pytorchFixture("gpt2_varlen_stacks.pickle")
	var ref *figures.Categories
	for _, keep := range []Keep{KeepPlan, KeepReport} {
		for _, points := range []int{0, 2000} {
			r, err := Replay(context.Background(), Source{Trace: path, Keep: keep}, Settings{Points: points})
			if err != nil {
				t.Fatal(err)
			}
			c := r.Report.Categories
			if c == nil {
				t.Fatalf("keep %d, %d points: no categories", keep, points)
			}
			if got, want := int64(c.Total), r.Report.Stats.AllocatedBytes[0].Peak; got != want {
				t.Errorf("keep %d, %d points: %d bytes at the peak op %d, want the allocated peak %d", keep, points, got, c.Op, want)
			}
			if points > 0 && len(c.Timeline) != len(r.Report.Timeline) {
				t.Errorf("keep %d: %d timeline points of categories, want %d", keep, len(c.Timeline), len(r.Report.Timeline))
			}
			if ref == nil {
				ref = c
				continue
			}
			if c.Op != ref.Op || !reflect.DeepEqual(c.Shares, ref.Shares) {
				t.Errorf("keep %d, %d points: peak op %d, shares %v; want %d, %v", keep, points, c.Op, c.Shares, ref.Op, ref.Shares)
			}
		}
	}
}

// The categories' timeline made beside the report's replay is the one a
// pass of its own over the ops makes, read whole or streamed, with
// stretches shorter and longer than a batch of the replay, and so are
// the allocations live at the peak that the replay to it passes.
func TestCategoriesRide(t *testing.T) {
	for _, name := range []string{"gpt2_varlen_stacks.pickle", "resnet50_fp32.pickle", "seed_frag.pickle", "multistream.pickle"} {
		for _, keep := range []Keep{KeepPlan, KeepReport} {
			for _, points := range []int{2000, 3} {
				r, err := Replay(context.Background(), Source{Trace: pytorchFixture(name), Keep: keep}, Settings{Points: points})
				if err != nil {
					t.Fatal(err)
				}
				if r.Report.Categories == nil || r.res.Timeline == nil {
					t.Fatalf("%s keep %d, %d points: no categories or no timeline", name, keep, points)
				}
				tl := r.res.Timeline
				got, ok := r.ride.timeline(tl.AllocatedOp)
				if !ok {
					t.Fatalf("%s keep %d, %d points: the ride gave up", name, keep, points)
				}
				peak := tl.PeakOp()
				evOf, want := opCategories(r.plan, peak, r.Report.Timeline, tl.AllocatedOp, r.cls)
				if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(r.Report.Categories.Timeline, want) {
					t.Errorf("%s keep %d, %d points: the ride's timeline differs from the pass's", name, keep, points)
				}
				o := r.opts
				o.Check, o.NoDivergence = false, true
				_, upto, err := replayToPeak(r.plan, o, peak)
				if err != nil {
					t.Fatal(err)
				}
				if upto == nil || !reflect.DeepEqual(upto, evOf) {
					t.Errorf("%s keep %d, %d points: the allocations at the peak differ", name, keep, points)
				}
			}
		}
	}
}

// A plan whose allocations are its trace's alloc events one for one finds
// each one's category as the block born k-th (catRide), the one its event
// names: for every fixture, read whole and streamed.
func TestCategoriesOneForOne(t *testing.T) {
	files, err := filepath.Glob(pytorchFixture("*.pickle"))
	if err != nil || len(files) == 0 {
		t.Fatal("no fixtures", err)
	}
	checked := 0
	for _, f := range files {
		for _, keep := range []Keep{KeepPlan, KeepReport} {
			r, err := Replay(context.Background(), Source{Trace: f, Keep: keep}, Settings{Points: 2000})
			if err != nil {
				t.Fatal(err)
			}
			if r.cls == nil || r.plan.Skipped[replay.SkipDoubleAlloc] > 0 {
				continue
			}
			if !oneForOne(r.plan, r.cls) {
				t.Errorf("%s keep %d: not one for one", f, keep)
				continue
			}
			byEvent, k := r.cls.InOrder(), 0
			_ = r.plan.Each(func(_ int, ops []alloc.Op, event, _ []int32) error {
				for j := range ops {
					if ops[j].Kind != alloc.OpAlloc || ops[j].Flags&alloc.FlagRecordedOOM != 0 {
						continue
					}
					want, ok := byEvent(event[j])
					if got := r.cls.BornCategory(k); !ok || got != want {
						t.Fatalf("%s keep %d: allocation %d is %v, its event's block %v (%v)", f, keep, k, got, want, ok)
					}
					k++
				}
				return nil
			})
			if k != r.cls.Born() {
				t.Errorf("%s keep %d: %d allocations, %d blocks born", f, keep, k, r.cls.Born())
			}
			checked++
		}
	}
	if checked < len(files) {
		t.Errorf("%d of %d fixtures' plans checked", checked/2, len(files))
	}
}
