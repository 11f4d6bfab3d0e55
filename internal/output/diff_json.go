package output

import (
	"io"
	"strings"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/report"
)

// DiffJSON is the document of diff -o json: a and b are what a single
// replay prints, delta their differences (b − a), sites every allocation
// site with its bytes at each run's peak, the largest change first, and
// phases the annotated phases both recorded, with each run's peaks in them.
type DiffJSON struct {
	Stamp
	A      report.Document `json:"a"`
	B      report.Document `json:"b"`
	Delta  DiffDelta       `json:"delta"`
	Depth  int             `json:"site_depth"`
	Sites  []DiffSite      `json:"sites"`
	Phases []DiffPhase     `json:"phases"`
	// Categories compares the runs' categories at their peaks of
	// allocated memory, the largest |delta| first; [] unless both have them.
	Categories []DiffCategory `json:"categories"`
}

// DiffCategory is what one category held at each run's peak.
type DiffCategory struct {
	Category string `json:"category"`
	A        uint64 `json:"a"`
	B        uint64 `json:"b"`
	Delta    int64  `json:"delta"`
}

// DiffDelta is b − a of the figures the diff table compares. The keys are
// in alphabetical order, as they were when this was a map.
type DiffDelta struct {
	AllocRetries        int64    `json:"alloc_retries"`
	DeviceAllocs        int64    `json:"device_allocs"`
	FragmentationAtPeak *float64 `json:"fragmentation_at_peak"`
	LowerBound          int64    `json:"lower_bound"`
	OOMs                int64    `json:"ooms"`
	PeakAllocated       int64    `json:"peak_allocated"`
	PeakReserved        int64    `json:"peak_reserved"`
	PeakReservedGrowth  *float64 `json:"peak_reserved_growth"` // b / a − 1
}

// DiffSite is an allocation site's bytes at each run's peak.
type DiffSite struct {
	Frames []string `json:"frames"`
	A      uint64   `json:"a"`
	B      uint64   `json:"b"`
	Delta  int64    `json:"delta"`
	CountA int      `json:"count_a"`
	CountB int      `json:"count_b"`
}

// DiffPhase is an annotated phase with each run's peaks in it.
type DiffPhase struct {
	Name           string `json:"name"`
	Count          int    `json:"count"`
	PeakAllocatedA int64  `json:"peak_allocated_a"`
	PeakAllocatedB int64  `json:"peak_allocated_b"`
	PeakReservedA  int64  `json:"peak_reserved_a"`
	PeakReservedB  int64  `json:"peak_reserved_b"`
}

func diffJSON(w io.Writer, d *figures.Diff, _ Options) error {
	doc := DiffJSON{Stamp: stamp(), Depth: d.Depth, Sites: []DiffSite{}, Phases: []DiffPhase{}, Categories: []DiffCategory{}}
	for _, c := range d.Categories {
		doc.Categories = append(doc.Categories, DiffCategory{c.Name, c.A, c.B, c.Change()})
	}
	a, err := report.NewDocument(d.A)
	if err != nil {
		return err
	}
	b, err := report.NewDocument(d.B)
	if err != nil {
		return err
	}
	doc.A, doc.B = *a, *b
	change := map[string]int64{} // by the table's names of the figures
	for _, f := range diffFigures(d) {
		change[f.name] = f.b - f.a
	}
	fa, fb := d.A.Fragmentation().AtPeak, d.B.Fragmentation().AtPeak
	doc.Delta = DiffDelta{
		AllocRetries: change["alloc retries"], DeviceAllocs: change["device allocs"],
		FragmentationAtPeak: ratioOrNull(fb - fa), LowerBound: change["lower bound"], OOMs: change["OOMs"],
		PeakAllocated: change["peak allocated"], PeakReserved: change["peak reserved"],
		PeakReservedGrowth: ratioOrNull(d.Growth()),
	}
	for _, s := range d.Sites {
		doc.Sites = append(doc.Sites, DiffSite{strings.Split(s.Frames, "\n"), s.BytesA, s.BytesB, s.Change(), s.CountA, s.CountB})
	}
	for _, p := range d.Phases {
		doc.Phases = append(doc.Phases, DiffPhase(p))
	}
	return writeJSON(w, doc, true)
}
