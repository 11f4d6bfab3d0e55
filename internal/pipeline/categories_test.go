package pipeline

import (
	"context"
	"testing"
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
