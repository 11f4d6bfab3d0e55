package output

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"

	"github.com/gpumem/gpumem/pkg/figures"
	"github.com/gpumem/gpumem/pkg/report"
)

// diffJSON writes {"a", "b", "delta", "sites"}: a and b are what a single
// replay prints, delta their differences (b − a), sites every allocation
// site with its bytes at each run's peak, the largest change first, and
// phases the annotated phases both recorded, with each run's peaks in them.
func diffJSON(w io.Writer, d *figures.Diff, _ Options) error {
	type site struct {
		Frames []string `json:"frames"`
		A      uint64   `json:"a"`
		B      uint64   `json:"b"`
		Delta  int64    `json:"delta"`
		CountA int      `json:"count_a"`
		CountB int      `json:"count_b"`
	}
	type phase struct {
		Name           string `json:"name"`
		Count          int    `json:"count"`
		PeakAllocatedA int64  `json:"peak_allocated_a"`
		PeakAllocatedB int64  `json:"peak_allocated_b"`
		PeakReservedA  int64  `json:"peak_reserved_a"`
		PeakReservedB  int64  `json:"peak_reserved_b"`
	}
	doc := struct {
		A      json.RawMessage `json:"a"`
		B      json.RawMessage `json:"b"`
		Delta  map[string]any  `json:"delta"`
		Depth  int             `json:"site_depth"`
		Sites  []site          `json:"sites"`
		Phases []phase         `json:"phases"`
	}{Delta: map[string]any{}, Depth: d.Depth, Sites: []site{}, Phases: []phase{}}
	for _, side := range []struct {
		r   *figures.Replay
		out *json.RawMessage
	}{{d.A, &doc.A}, {d.B, &doc.B}} {
		var b bytes.Buffer
		if err := report.JSON(&b, side.r); err != nil {
			return err
		}
		*side.out = b.Bytes()
	}
	for _, f := range diffFigures(d) {
		doc.Delta[strings.ToLower(strings.ReplaceAll(f.name, " ", "_"))] = f.b - f.a
	}
	doc.Delta["peak_reserved_growth"] = ratioOrNull(d.Growth())
	fa, fb := d.A.Fragmentation().AtPeak, d.B.Fragmentation().AtPeak
	doc.Delta["fragmentation_at_peak"] = ratioOrNull(fb - fa)
	for _, s := range d.Sites {
		doc.Sites = append(doc.Sites, site{strings.Split(s.Frames, "\n"), s.BytesA, s.BytesB, s.Change(), s.CountA, s.CountB})
	}
	for _, p := range d.Phases {
		doc.Phases = append(doc.Phases, phase(p))
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(out, '\n'))
	return err
}
