package output

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/gpumem/gpumem/pkg/figures"
	"github.com/gpumem/gpumem/pkg/report"
)

// ranksJSON writes {"runs": [...], "worst": i, "spread": x}: each run is
// the object a single replay prints (its "source" and "device" say which
// rank it is), "ranks" their rank numbers (null when unknown).
func ranksJSON(w io.Writer, r *figures.Ranks, _ Options) error {
	doc := struct {
		Runs   []json.RawMessage `json:"runs"`
		Ranks  []*int            `json:"ranks"`
		Worst  int               `json:"worst"`
		Spread *float64          `json:"spread"`
	}{Runs: []json.RawMessage{}, Ranks: []*int{}, Worst: r.Worst, Spread: ratioOrNull(r.Spread())}
	for i, x := range r.Replays {
		var b bytes.Buffer
		if err := report.JSON(&b, x); err != nil {
			return err
		}
		doc.Runs = append(doc.Runs, b.Bytes())
		var rank *int
		if r.Ranks[i] >= 0 {
			rank = &r.Ranks[i]
		}
		doc.Ranks = append(doc.Ranks, rank)
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(out, '\n'))
	return err
}
