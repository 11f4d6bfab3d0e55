package report

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"

	"github.com/gpumem/gpumem/internal/figures"
)

// Document is the JSON document of a replay (replay -o json, and a part
// of the ranks', diff's and summary's documents). Its keys are part of
// gpumem's interface: add keys, never rename or drop them. Byte counts are
// integers; a ratio that cannot be computed is null.
type Document struct {
	Source       string           `json:"source"`
	Settings     string           `json:"settings"`
	Policy       string           `json:"policy"`
	Device       int              `json:"device"`
	DeviceMemory uint64           `json:"device_memory"`
	Allowed      uint64           `json:"allowed"`
	Ops          int              `json:"ops"`
	Skipped      []jsonSkip       `json:"skipped"`
	Truncated    bool             `json:"truncated"`
	Addresses    *jsonAddresses   `json:"addresses,omitempty"`
	MemoryStats  map[string]int64 `json:"memory_stats"`

	PeakOp                      int               `json:"peak_op"`
	PeakAllocatedAtPeakReserved int64             `json:"peak_allocated_at_peak_reserved"`
	LargestFree                 uint64            `json:"largest_free"`
	CachedFree                  int64             `json:"cached_free"`
	LowerBound                  uint64            `json:"lower_bound"`
	PeakReservedOverLowerBound  *float64          `json:"peak_reserved_over_lower_bound"`
	Fragmentation               jsonFragmentation `json:"fragmentation"`

	Timeline []jsonPoint `json:"timeline"`
	// OOM is the out-of-memory that ended the replay or, when none did,
	// the first one the recording had too ("recorded": true).
	OOM   *jsonOOM      `json:"oom"`
	OOMs  []jsonOOMItem `json:"ooms"`
	Pools []string      `json:"pools"`

	InferredCap *jsonCap        `json:"inferred_cap"`
	Divergence  *jsonDivergence `json:"divergence"`
	// InexactKeys names the memory_stats keys the trace cannot settle,
	// each with why ({} when it settles all of them)
	InexactKeys map[string]string `json:"inexact_keys"`

	// Categories is what allocated memory held at its peak, by category
	// (they sum to allocated_bytes.all.peak); null for a workload.
	Categories       *jsonCategories     `json:"categories"`
	CategoriesMethod *string             `json:"categories_method"`
	CategorySites    []jsonCategorySites `json:"category_sites"`
	// ActivationsKeptPastStep is the part of categories.activation kept
	// past the step it was born in (results held with their graphs).
	ActivationsKeptPastStep uint64       `json:"activations_kept_past_step"`
	Remedies                []jsonRemedy `json:"remedies"`
}

type jsonOOMItem struct {
	OpIndex  int    `json:"op_index"`
	Size     uint64 `json:"size"`
	Recorded bool   `json:"recorded"`
}

type jsonCap struct {
	Low  uint64 `json:"low"`
	High uint64 `json:"high"`
	From string `json:"from"`
}

type jsonDivergence struct {
	Op       int    `json:"op"`
	Event    *int   `json:"event"` // null when the recording has no event there
	Recorded string `json:"recorded"`
	Replayed string `json:"replayed"`
	Cause    string `json:"cause"`
}

// jsonAddresses: "chosen" is "recorded" (every segment at its recorded
// address) or "modelled" (from segment modelled_from on, by the driver
// model).
type jsonAddresses struct {
	Chosen       string `json:"chosen"`
	ModelledFrom *int   `json:"modelled_from"`
	Segments     int    `json:"segments"`
	Recorded     int    `json:"recorded"`
	Matched      int    `json:"at_recorded_address"`
	Predicted    int    `json:"predicted"`
}

type jsonSkip struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

type jsonFragmentation struct {
	End    *float64 `json:"end"`
	AtPeak *float64 `json:"at_peak"`
	Peaks  *float64 `json:"peaks"`
	Holes  *float64 `json:"holes"`
}

type jsonPoint struct {
	Op        int   `json:"op"`
	Allocated int64 `json:"allocated"`
	Reserved  int64 `json:"reserved"`
	Active    int64 `json:"active"`
	// Categories is what each category held after the op, bytes as asked
	// (requests, not blocks); absent when the run has no categories.
	Categories *jsonCategories `json:"categories,omitempty"`
}

type jsonOOM struct {
	OpIndex      int           `json:"op_index"`
	Size         uint64        `json:"size"`
	Rounded      uint64        `json:"rounded"`
	AllocSize    uint64        `json:"alloc_size"`
	Stream       uint64        `json:"stream"`
	DeviceTotal  uint64        `json:"device_total"`
	DeviceFree   uint64        `json:"device_free"`
	Allowed      uint64        `json:"allowed"`
	Allocated    int64         `json:"allocated"`
	Reserved     int64         `json:"reserved"`
	CachedFree   uint64        `json:"cached_free"`
	LargestFree  uint64        `json:"largest_free"`
	Headroom     uint64        `json:"headroom"`
	Verdict      string        `json:"verdict"` // "fragmentation" or "shortage"
	Segments     []jsonSegment `json:"segments"`
	Frames       []string      `json:"frames"`
	PinFrames    [][]string    `json:"pin_frames"`
	TorchMessage string        `json:"torch_message"`
	Recorded     bool          `json:"recorded"`
}

type jsonSegment struct {
	Address uint64      `json:"address"`
	Size    uint64      `json:"size"`
	Blocks  []jsonBlock `json:"blocks"`
}

type jsonBlock struct {
	Size  uint64 `json:"size"`
	State string `json:"state"`
}

// JSON writes r as one indented JSON object with stable snake_case keys:
// the replay's figures, "memory_stats" (every key given), the
// fragmentation ratios, the timeline and "oom" (null, or an object with
// "op_index", "size", the diagnosis and "verdict": "fragmentation" or
// "shortage"; when no OOM stopped the replay but the program survived
// some, the first of those, with "recorded": true), "ooms" (every OOM:
// "op_index", "size", "recorded") and "pools" (one line per private pool).
// Lists are [] rather than null when empty.
func JSON(w io.Writer, r *figures.Replay) error {
	doc, err := NewDocument(r)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // frames such as "<module>" stay readable
	return enc.Encode(doc)
}

// NewDocument is the JSON document of r, as JSON writes it.
func NewDocument(r *figures.Replay) (*Document, error) {
	if r == nil {
		return nil, errors.New("report: no replay")
	}
	f := r.Fragmentation()
	doc := &Document{
		Source:                      r.Source,
		Settings:                    r.Settings,
		Policy:                      r.Policy,
		Device:                      r.Device,
		DeviceMemory:                r.DeviceMemory,
		Allowed:                     r.Allowed,
		Ops:                         r.Ops,
		Skipped:                     []jsonSkip{},
		Truncated:                   r.Truncated,
		Addresses:                   addressesJSON(r.Addresses),
		MemoryStats:                 r.Stats.Map(),
		PeakOp:                      r.PeakOp,
		PeakAllocatedAtPeakReserved: r.PeakAllocatedAtPeakReserved,
		LargestFree:                 r.LargestFree,
		CachedFree:                  r.CachedFree(),
		LowerBound:                  r.LowerBound,
		PeakReservedOverLowerBound:  number(r.OverLowerBound()),
		Fragmentation: jsonFragmentation{
			End: number(f.End), AtPeak: number(f.AtPeak), Peaks: number(f.Peaks), Holes: number(f.Holes),
		},
		Timeline:    make([]jsonPoint, 0, len(r.Timeline)),
		OOMs:        []jsonOOMItem{},
		Pools:       append([]string{}, r.Pools...),
		InexactKeys: map[string]string{},
	}
	maps.Copy(doc.InexactKeys, r.Inexact)
	for _, o := range r.OOMs {
		doc.OOMs = append(doc.OOMs, jsonOOMItem{o.OpIndex, o.Size, o.Recorded})
	}
	addCategories(doc, r.Categories)
	for _, s := range r.Skipped {
		doc.Skipped = append(doc.Skipped, jsonSkip(s))
	}
	for i, p := range r.Timeline {
		doc.Timeline = append(doc.Timeline, jsonPoint{Op: p.Op, Allocated: p.Allocated, Reserved: p.Reserved, Active: p.Active,
			Categories: pointCategories(r.Categories, i)})
	}
	if c := r.InferredCap; c != nil {
		doc.InferredCap = &jsonCap{Low: c.Low, High: c.High, From: c.From}
	}
	if d := r.Divergence; d != nil {
		doc.Divergence = &jsonDivergence{Op: d.Op, Recorded: d.Recorded, Replayed: d.Replayed, Cause: d.Cause}
		if d.Event >= 0 {
			doc.Divergence.Event = &d.Event
		}
	}
	o := r.OOM
	if o == nil && len(r.OOMs) > 0 {
		o = r.OOMs[0]
	}
	if o != nil {
		verdict := "shortage"
		if o.Fragmented() {
			verdict = "fragmentation"
		}
		j := &jsonOOM{
			OpIndex: o.OpIndex, Size: o.Size, Rounded: o.Rounded, AllocSize: o.AllocSize, Stream: o.Stream,
			DeviceTotal: o.DeviceTotal, DeviceFree: o.DeviceFree, Allowed: o.Allowed,
			Allocated: o.Allocated, Reserved: o.Reserved, CachedFree: o.CachedFree, LargestFree: o.LargestFree,
			Headroom: o.Headroom(), Verdict: verdict,
			Segments:     []jsonSegment{},
			Frames:       append([]string{}, o.Frames...),
			PinFrames:    [][]string{},
			TorchMessage: TorchOOMMessage(r.Device, o),
			Recorded:     o.Recorded,
		}
		for _, s := range o.Segments {
			js := jsonSegment{Address: s.Address, Size: s.Size, Blocks: []jsonBlock{}}
			for _, b := range s.Blocks {
				js.Blocks = append(js.Blocks, jsonBlock{b.Size, string(b.State)})
			}
			j.Segments = append(j.Segments, js)
		}
		for _, f := range o.PinFrames {
			j.PinFrames = append(j.PinFrames, append([]string{}, f...))
		}
		doc.OOM = j
	}
	return doc, nil
}

// number is r, or nil (JSON null) when r is not a finite number.
func number(r float64) *float64 {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return nil
	}
	return &r
}

func addressesJSON(a *figures.Addresses) *jsonAddresses {
	if a == nil {
		return nil
	}
	j := &jsonAddresses{Chosen: "recorded", Segments: a.Segments, Recorded: a.Recorded, Matched: a.Matched,
		Predicted: a.Predicted}
	if a.ModelledFrom >= 0 {
		from := a.ModelledFrom
		j.Chosen, j.ModelledFrom = "modelled", &from
	}
	return j
}
