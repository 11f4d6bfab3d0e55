package output

import (
	"encoding/json"
	"io"
	"maps"
	"slices"
	"strconv"
)

// The sweep's JSON document is written by hand, byte for byte what
// writeJSON (encoding/json, two-space indent, HTML escaped) writes: its
// rows' memory_stats maps (122 keys each) made encoding/json sort and
// reflect on some two thousand entries and then indent 100 kB, a few
// milliseconds at the end of every sweep, after its replays. Strings and
// floats still go through encoding/json. TestSweepJSONWriter holds the
// two to the same bytes, every field set.

// jsonw writes indented JSON.
type jsonw struct {
	b     []byte
	ind   []byte // the current indentation
	first bool   // nothing written yet inside the innermost object or array
	err   error
	keys  []string // the last memory_stats map's keys, sorted
}

// sameKeys reports whether m's keys are those of keys (distinct).
func sameKeys(keys []string, m map[string]int64) bool {
	if len(keys) != len(m) {
		return false
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

func (w *jsonw) open(c byte) {
	w.b = append(w.b, c)
	w.ind = append(w.ind, "  "...)
	w.first = true
}

func (w *jsonw) close(c byte) {
	w.ind = w.ind[:len(w.ind)-2]
	if !w.first {
		w.b = append(w.b, '\n')
		w.b = append(w.b, w.ind...)
	}
	w.b = append(w.b, c)
	w.first = false
}

// elem starts a member or an element.
func (w *jsonw) elem() {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, '\n')
	w.b = append(w.b, w.ind...)
	w.first = false
}

func (w *jsonw) key(k string) {
	w.elem()
	w.str(k)
	w.b = append(w.b, ": "...)
}

// value writes v through encoding/json (a string or a float).
func (w *jsonw) value(v any) {
	b, err := json.Marshal(v)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.b = append(w.b, b...)
}

// str writes s, at once when no byte of it needs escaping.
func (w *jsonw) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			w.value(s)
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *jsonw) num(f float64)            { w.value(f) }
func (w *jsonw) int(n int64)              { w.b = strconv.AppendInt(w.b, n, 10) }
func (w *jsonw) uint(n uint64)            { w.b = strconv.AppendUint(w.b, n, 10) }
func (w *jsonw) bool(v bool)              { w.b = strconv.AppendBool(w.b, v) }
func (w *jsonw) null()                    { w.b = append(w.b, "null"...) }
func (w *jsonw) kInt(k string, n int64)   { w.key(k); w.int(n) }
func (w *jsonw) kUint(k string, n uint64) { w.key(k); w.uint(n) }
func (w *jsonw) kStr(k string, s string)  { w.key(k); w.str(s) }
func (w *jsonw) kBool(k string, v bool)   { w.key(k); w.bool(v) }
func (w *jsonw) kNum(k string, f float64) { w.key(k); w.num(f) }

func (w *jsonw) kIntPtr(k string, p *int) {
	w.key(k)
	if p == nil {
		w.null()
		return
	}
	w.int(int64(*p))
}

// writeSweepJSON writes doc as writeJSON(w, doc, true) would.
func writeSweepJSON(out io.Writer, doc *SweepJSON) error {
	w := &jsonw{b: make([]byte, 0, 8<<10+len(doc.Rows)*6<<10)}
	w.open('{')
	w.kInt("schema_version", int64(doc.SchemaVersion))
	w.key("generator")
	w.open('{')
	w.kStr("name", doc.Generator.Name)
	w.kStr("version", doc.Generator.Version)
	w.close('}')
	w.kStr("source", doc.Source)
	w.kInt("ops", int64(doc.Ops))
	w.key("device_memory")
	if doc.DeviceMemory == nil {
		w.null()
	} else {
		w.open('[')
		for _, c := range doc.DeviceMemory {
			w.elem()
			w.uint(c)
		}
		w.close(']')
	}
	w.kNum("memory_fraction", doc.MemoryFraction)
	w.kStr("baseline", doc.Baseline)
	w.kUint("offline_peak", doc.OfflinePeak)
	w.key("rows")
	if doc.Rows == nil {
		w.null()
	} else {
		w.open('[')
		for i := range doc.Rows {
			w.elem()
			w.sweepRow(&doc.Rows[i])
		}
		w.close(']')
	}
	w.key("recommendation")
	if doc.Recommendation == nil {
		w.null()
	} else {
		w.advice(doc.Recommendation)
	}
	w.key("not_advised")
	if doc.NotAdvised == nil {
		w.null()
	} else {
		w.open('[')
		for i := range doc.NotAdvised {
			w.elem()
			w.advice(&doc.NotAdvised[i])
		}
		w.close(']')
	}
	w.close('}')
	if w.err != nil {
		return w.err
	}
	_, err := out.Write(append(w.b, '\n'))
	return err
}

func (w *jsonw) sweepRow(r *SweepJSONRow) {
	w.open('{')
	w.kStr("label", r.Label)
	w.kStr("alloc_conf", r.AllocConf)
	w.kStr("policy", r.Policy)
	w.kBool("settable", r.Settable)
	w.kBool("recorded", r.Recorded)
	w.kUint("device_memory", r.DeviceMemory)
	w.kUint("allowed", r.Allowed)
	w.kInt("peak_reserved", r.PeakReserved)
	w.kInt("peak_allocated", r.PeakAllocated)
	w.kInt("lower_bound", r.LowerBound)
	w.key("fragmentation_at_peak")
	if r.FragAtPeak == nil {
		w.null()
	} else {
		w.num(*r.FragAtPeak)
	}
	w.kInt("device_allocs", r.DeviceAllocs)
	w.kInt("alloc_retries", r.Retries)
	w.kIntPtr("oom_op_index", r.OOMOpIndex)
	w.key("cards")
	if r.Cards == nil {
		w.null()
	} else {
		w.open('[')
		for i := range r.Cards {
			c := &r.Cards[i]
			w.elem()
			w.open('{')
			w.kUint("device_memory", c.DeviceMemory)
			w.kUint("allowed", c.Allowed)
			w.kBool("fits", c.Fits)
			w.kIntPtr("oom_op_index", c.OOMOpIndex)
			w.kInt("peak_reserved", c.PeakReserved)
			w.kInt("alloc_retries", c.Retries)
			w.close('}')
		}
		w.close(']')
	}
	w.key("memory_stats")
	if r.MemoryStats == nil {
		w.null()
	} else {
		w.open('{')
		// the rows' maps have the same keys: sorted once
		if !sameKeys(w.keys, r.MemoryStats) {
			w.keys = slices.Sorted(maps.Keys(r.MemoryStats))
		}
		for _, k := range w.keys {
			w.kInt(k, r.MemoryStats[k])
		}
		w.close('}')
	}
	w.close('}')
}

func (w *jsonw) advice(a *SweepJSONAdvice) {
	w.open('{')
	w.kStr("label", a.Label)
	w.kStr("alloc_conf", a.AllocConf)
	w.kInt("peak_reserved", a.PeakReserved)
	w.kInt("saved_bytes", a.SavedBytes)
	w.kNum("saved_percent", a.SavedPercent)
	w.kStr("text", a.Text)
	w.close('}')
}
