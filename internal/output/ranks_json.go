package output

import (
	"io"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/report"
)

// RanksJSON is the document of replay -o json over a set of ranks.
type RanksJSON struct {
	Stamp
	RanksDocument
}

// RanksDocument is a set of ranks, as the ranks' document and summary's
// "ranks" hold it: each run is the document a single replay prints (its
// "source" and "device" say which rank it is), "ranks" their rank numbers
// (null when unknown), "worst" the index of the worst run.
type RanksDocument struct {
	Runs   []report.Document `json:"runs"`
	Ranks  []*int            `json:"ranks"`
	Worst  int               `json:"worst"`
	Spread *float64          `json:"spread"`
}

func newRanksDocument(r *figures.Ranks) (*RanksDocument, error) {
	doc := &RanksDocument{Runs: []report.Document{}, Ranks: []*int{}, Worst: r.Worst, Spread: ratioOrNull(r.Spread())}
	for i, x := range r.Replays {
		run, err := report.NewDocument(x)
		if err != nil {
			return nil, err
		}
		doc.Runs = append(doc.Runs, *run)
		var rank *int
		if r.Ranks[i] >= 0 {
			rank = &r.Ranks[i]
		}
		doc.Ranks = append(doc.Ranks, rank)
	}
	return doc, nil
}

func ranksJSON(w io.Writer, r *figures.Ranks, _ Options) error {
	doc, err := newRanksDocument(r)
	if err != nil {
		return err
	}
	return writeJSON(w, RanksJSON{stamp(), *doc}, true)
}
