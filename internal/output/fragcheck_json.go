package output

import (
	"io"
	"math"

	"github.com/gpumem/gpumem/internal/budget"
)

// FragcheckJSON is the document of fragcheck -o json. Its keys are part of
// gpumem's interface: add keys, never rename or drop them. A figure that
// could not be measured is null; so is a limit that is off.
type FragcheckJSON struct {
	Stamp
	Status  budget.Status `json:"status"`
	Summary jsonSummary   `json:"summary"`
	Cases   []jsonCase    `json:"cases"`
}

type jsonSummary struct {
	Cases int `json:"cases"`
	Pass  int `json:"pass"`
	Warn  int `json:"warn"`
	Fail  int `json:"fail"`
	Error int `json:"error"`
}

type jsonCase struct {
	Name          string                    `json:"name"`
	Source        string                    `json:"source"`
	Status        budget.Status             `json:"status"`
	Error         *string                   `json:"error"`
	Metric        budget.Metric             `json:"metric"`
	Definition    string                    `json:"metric_definition"`
	Fragmentation *float64                  `json:"fragmentation"`
	Ratios        map[budget.Metric]float64 `json:"ratios" jsonschema:"nullable"` // null when the case did not run
	PeakReserved  *int64                    `json:"peak_reserved"`
	PeakAllocated *int64                    `json:"peak_allocated"`
	OOM           bool                      `json:"oom"`
	Limits        jsonLimits                `json:"limits"`
	Crossed       []string                  `json:"crossed"`
	Findings      []jsonFinding             `json:"findings"`
	Baseline      *budget.Entry             `json:"baseline"`
	// MemoryStats is the replay's torch.cuda.memory_stats() at its end;
	// null when the case did not run
	MemoryStats map[string]int64 `json:"memory_stats" jsonschema:"nullable"`
}

type jsonLimits struct {
	WarnFrag    *float64 `json:"warn_frag"`
	MaxFrag     *float64 `json:"max_frag"`
	MaxReserved *uint64  `json:"max_reserved"`
	MustFit     *uint64  `json:"must_fit"`
}

type jsonFinding struct {
	Status  budget.Status `json:"status"`
	Limit   string        `json:"limit"`
	Message string        `json:"message"`
}

// fragcheckJSON writes rs as a JSON document: an overall status, counts by
// status, and each case with its figures, limits and findings.
func fragcheckJSON(w io.Writer, rs []budget.Result, _ Options) error {
	s := budget.Summarize(rs)
	doc := FragcheckJSON{
		Stamp:   stamp(),
		Status:  s.Status(),
		Summary: jsonSummary{Cases: s.Cases, Pass: s.Pass, Warn: s.Warn, Fail: s.Fail, Error: s.Error},
		Cases:   make([]jsonCase, 0, len(rs)),
	}
	for i := range rs {
		r := &rs[i]
		l := r.Case.Limits
		c := jsonCase{
			Name: r.Case.Name, Source: r.Case.Source(), Status: r.Status(),
			Metric: l.Metric, Definition: l.Metric.Definition(),
			Limits: jsonLimits{
				WarnFrag: ratioOrNull(l.WarnFrag), MaxFrag: ratioOrNull(l.MaxFrag),
				MaxReserved: sizeOrNull(l.MaxReserved), MustFit: sizeOrNull(l.MustFit),
			},
			Crossed:  r.Crossed(),
			Findings: []jsonFinding{},
			Baseline: r.Baseline,
		}
		if c.Crossed == nil {
			c.Crossed = []string{}
		}
		if r.Err != nil {
			msg := r.Err.Error()
			c.Error = &msg
		} else {
			e := budget.EntryOf(r)
			c.Fragmentation = ratioOrNull(r.Fragmentation())
			c.Ratios = e.Fragmentation
			c.PeakReserved, c.PeakAllocated = &e.PeakReserved, &e.PeakAllocated
			c.OOM = e.OOM
			c.MemoryStats = r.Figures.MemoryStats
		}
		for _, f := range r.Findings {
			c.Findings = append(c.Findings, jsonFinding{f.Status, f.Limit, f.Message})
		}
		doc.Cases = append(doc.Cases, c)
	}
	return writeJSON(w, doc, true)
}

func ratioOrNull(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	v = round4(v)
	return &v
}

func sizeOrNull(n uint64) *uint64 {
	if n == 0 {
		return nil
	}
	return &n
}

// round4 keeps four decimals, as the baseline file does.
func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }
