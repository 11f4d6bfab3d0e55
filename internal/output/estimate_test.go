package output

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/estimate"
)

// An estimate of several ranks: the table names the worst rank and lists
// every rank; the JSON has the ranks and worst_rank; one rank's estimate
// has none of them.
func TestEstimateRanks(t *testing.T) {
	res := &estimate.Result{}
	rep := &estimate.Report{Command: []string{"python3", "train.py"}, Card: estimate.Card{Name: "NVIDIA H200", Total: 1 << 30},
		Result: res, Rank: 1, Ranks: []estimate.RankRow{
			{Rank: 0, Trace: "e.rank0.trace", PeakAllocated: 100 << 20, PeakReserved: 120 << 20, OK: true},
			{Rank: 1, Trace: "e.rank1.trace", PeakAllocated: 200 << 20, PeakReserved: 220 << 20, OK: false, Failure: "out of memory"},
		}}
	var b bytes.Buffer
	if err := estimateTable(&b, rep, Options{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Ranks: 2", "220.00 MiB", "failed: out of memory (worst)", "The worst rank is rank 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	b.Reset()
	if err := estimateJSON(&b, rep, Options{}); err != nil {
		t.Fatal(err)
	}
	var d EstimateJSON
	if err := json.Unmarshal(b.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.WorstRank == nil || *d.WorstRank != 1 || len(d.Ranks) != 2 || d.Ranks[1].PeakReserved != 220<<20 {
		t.Errorf("worst_rank %v, ranks %+v", d.WorstRank, d.Ranks)
	}
	if w := rep.Wrote(); !strings.Contains(w, "e.rank0.trace, e.rank1.trace") || !strings.Contains(w, "gpumem replay e.rank0.trace e.rank1.trace") {
		t.Errorf("wrote: %q", w)
	}
	rep.Ranks = nil
	b.Reset()
	if err := estimateJSON(&b, rep, Options{}); err != nil {
		t.Fatal(err)
	}
	var one map[string]any
	if err := json.Unmarshal(b.Bytes(), &one); err != nil {
		t.Fatal(err)
	}
	if r, ok := one["ranks"].([]any); !ok || len(r) != 0 || one["worst_rank"] != nil {
		t.Errorf("one rank: ranks %v, worst_rank %v", one["ranks"], one["worst_rank"])
	}
}
