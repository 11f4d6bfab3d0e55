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
// site with its bytes at each run's peak, the largest change first.
func diffJSON(w io.Writer, d *figures.Diff, _ Options) error {
	type site struct {
		Frames []string `json:"frames"`
		A      uint64   `json:"a"`
		B      uint64   `json:"b"`
		Delta  int64    `json:"delta"`
		CountA int      `json:"count_a"`
		CountB int      `json:"count_b"`
	}
	doc := struct {
		A     json.RawMessage `json:"a"`
		B     json.RawMessage `json:"b"`
		Delta map[string]any  `json:"delta"`
		Depth int             `json:"site_depth"`
		Sites []site          `json:"sites"`
	}{Delta: map[string]any{}, Depth: d.Depth, Sites: []site{}}
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
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(out, '\n'))
	return err
}
