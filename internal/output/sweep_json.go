package output

import (
	"io"
	"math"

	"github.com/gpumem/gpumem/internal/sweep"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// SweepJSON is the JSON document of a sweep. Add keys, never rename or drop them.
type SweepJSON struct {
	Stamp
	Source         string            `json:"source"`
	Ops            int               `json:"ops"`
	DeviceMemory   []uint64          `json:"device_memory"`
	MemoryFraction float64           `json:"memory_fraction"`
	Baseline       string            `json:"baseline"`
	OfflinePeak    uint64            `json:"offline_peak"`
	Rows           []SweepJSONRow    `json:"rows"`
	Recommendation *SweepJSONAdvice  `json:"recommendation"`
	NotAdvised     []SweepJSONAdvice `json:"not_advised"`
}

// SweepJSONRow is one setting of a sweep.
type SweepJSONRow struct {
	Label         string           `json:"label"`
	AllocConf     string           `json:"alloc_conf"`
	Policy        string           `json:"policy"`
	Settable      bool             `json:"settable"`
	Recorded      bool             `json:"recorded"`      // the settings the trace was recorded with
	DeviceMemory  uint64           `json:"device_memory"` // the headline card; 0 = unlimited
	Allowed       uint64           `json:"allowed"`
	PeakReserved  int64            `json:"peak_reserved"`
	PeakAllocated int64            `json:"peak_allocated"`
	LowerBound    int64            `json:"lower_bound"`
	FragAtPeak    *float64         `json:"fragmentation_at_peak"`
	DeviceAllocs  int64            `json:"device_allocs"`
	Retries       int64            `json:"alloc_retries"`
	OOMOpIndex    *int             `json:"oom_op_index"`
	Cards         []SweepJSONCard  `json:"cards"`
	MemoryStats   map[string]int64 `json:"memory_stats"`
}

// SweepJSONCard is a setting's outcome on one card.
type SweepJSONCard struct {
	DeviceMemory uint64 `json:"device_memory"`
	Allowed      uint64 `json:"allowed"`
	Fits         bool   `json:"fits"`
	OOMOpIndex   *int   `json:"oom_op_index"`
	PeakReserved int64  `json:"peak_reserved"`
	Retries      int64  `json:"alloc_retries"`
}

// SweepJSONAdvice is a recommended or not advised setting.
type SweepJSONAdvice struct {
	Label        string  `json:"label"`
	AllocConf    string  `json:"alloc_conf"` // "" = leave PYTORCH_CUDA_ALLOC_CONF unset
	PeakReserved int64   `json:"peak_reserved"`
	SavedBytes   int64   `json:"saved_bytes"` // against the baseline
	SavedPercent float64 `json:"saved_percent"`
	Text         string  `json:"text"`
}

func sweepJSONDoc(w io.Writer, sw *sweep.Report, _ Options) error {
	rows, fraction := sw.Rows, sw.Fraction
	doc := SweepJSON{
		Stamp:  stamp(),
		Source: sw.Source, Ops: sw.Ops, DeviceMemory: sw.Cards, MemoryFraction: fraction,
		Baseline: sw.Baseline, OfflinePeak: sw.OfflinePeak, Rows: []SweepJSONRow{}, NotAdvised: []SweepJSONAdvice{},
	}
	if doc.DeviceMemory == nil {
		doc.DeviceMemory = []uint64{}
	}
	opIndex := func(o *alloc.OOM) *int {
		if o == nil {
			return nil
		}
		return &o.OpIndex
	}
	for i := range rows {
		r := &rows[i]
		jr := SweepJSONRow{
			Label: r.Label, AllocConf: r.Setting.Config.Text, Policy: string(r.Setting.Config.Policy),
			Settable: r.Setting.Settable(), Recorded: r.Setting.Recorded, DeviceMemory: r.Card, Allowed: r.Allowed,
			PeakReserved: r.PeakReserved(), PeakAllocated: r.Stats.AllocatedBytes[alloc.All].Peak,
			LowerBound: r.LowerBound, DeviceAllocs: r.DeviceAllocs(), Retries: r.Stats.NumAllocRetries,
			OOMOpIndex: opIndex(r.OOM), Cards: []SweepJSONCard{}, MemoryStats: r.Stats.Map(),
		}
		if f := r.Fragmentation.AtPeak; !math.IsNaN(f) {
			jr.FragAtPeak = &f
		}
		for k := range r.Cards {
			c := &r.Cards[k]
			jr.Cards = append(jr.Cards, SweepJSONCard{DeviceMemory: c.Card, Allowed: c.Allowed, Fits: c.Fits(),
				OOMOpIndex: opIndex(c.OOM), PeakReserved: c.PeakReserved(), Retries: c.Stats.NumAllocRetries})
		}
		doc.Rows = append(doc.Rows, jr)
	}
	_, last := sweepVerdict(sw)
	advice := func(r, base *sweep.Row, text string) SweepJSONAdvice {
		a := SweepJSONAdvice{Label: r.Label, AllocConf: r.Setting.Env(), PeakReserved: r.PeakReserved(), Text: text}
		if base != nil {
			a.SavedBytes = base.PeakReserved() - r.PeakReserved()
			a.SavedPercent = 100 * float64(a.SavedBytes) / float64(max(base.PeakReserved(), 1))
		}
		return a
	}
	if sw.Compare {
		if best := sweep.Lowest(rows, nil); best != nil {
			a := advice(best, sw.FindRow(sw.Baseline), last)
			a.AllocConf = best.Setting.Config.Text
			doc.Recommendation = &a
		}
	} else {
		rec := sweep.Recommend(rows)
		if rec.Best != nil {
			a := advice(rec.Best, rec.Baseline, last)
			doc.Recommendation = &a
		}
		for _, r := range rec.Unsettable {
			doc.NotAdvised = append(doc.NotAdvised, advice(r, rec.Baseline, unsettableNote(r, rec.Baseline)))
		}
	}
	return writeSweepJSON(w, &doc)
}
