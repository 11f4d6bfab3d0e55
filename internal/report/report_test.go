package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fatih/color"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// statsWith returns a full memory_stats map, zero but for set.
func statsWith(set map[string]int64) alloc.Stats {
	s := alloc.Stats{MaxSplitSize: -1}
	families := map[string]*[3]alloc.Stat{
		"allocation": &s.Allocation, "segment": &s.Segment, "active": &s.Active, "inactive_split": &s.InactiveSplit,
		"allocated_bytes": &s.AllocatedBytes, "reserved_bytes": &s.ReservedBytes, "active_bytes": &s.ActiveBytes,
		"inactive_split_bytes": &s.InactiveSplitBytes, "requested_bytes": &s.RequestedBytes,
	}
	counters := map[string]*int64{"num_alloc_retries": &s.NumAllocRetries, "num_ooms": &s.NumOOMs,
		"num_sync_all_streams": &s.NumSyncAllStreams, "num_device_alloc": &s.NumDeviceAlloc, "num_device_free": &s.NumDeviceFree}
	pools := map[string]int{"all": alloc.All, "large_pool": alloc.Large, "small_pool": alloc.Small}
	for k, v := range set {
		if c, ok := counters[k]; ok {
			*c = v
			continue
		}
		parts := strings.Split(k, ".")
		f, pool := families[parts[0]], -1
		if len(parts) == 3 {
			if p, ok := pools[parts[1]]; ok {
				pool = p
			}
		}
		if f == nil || pool < 0 {
			panic("statsWith: unknown key " + k)
		}
		st := &f[pool]
		fields := map[string]*int64{"current": &st.Current, "peak": &st.Peak, "allocated": &st.Allocated, "freed": &st.Freed}
		if fields[parts[2]] == nil {
			panic("statsWith: unknown key " + k)
		}
		*fields[parts[2]] = v
	}
	return s
}

// wave is a deterministic timeline: a training-like sawtooth that
// reaches its highest reserved value at op peak.
func wave(n, every, peak int) []figures.Point {
	var pts []figures.Point
	for op := 0; op < n; op += every {
		phase := op % 1000
		alloc := int64(8*GiB) + int64(phase)*int64(10*MiB)
		res := int64(14 * GiB)
		if op >= 2000 {
			res = 18 * GiB
		}
		if op == peak {
			alloc, res = 17*GiB, 24*GiB
		}
		pts = append(pts, figures.Point{Op: op, Allocated: alloc, Reserved: res, Active: alloc + 64*MiB})
	}
	return pts
}

func completed() *figures.Replay {
	return &figures.Replay{
		Source:       "gpt2_varlen.pickle",
		Policy:       "pytorch",
		DeviceMemory: 150109880320,
		Ops:          123456,
		Skipped:      []figures.Skip{{Reason: "free of an unknown block", Count: 3}, {Reason: "record_stream of a freed block", Count: 1}},
		Truncated:    true,
		Stats: statsWith(map[string]int64{
			"allocated_bytes.all.current":      20690984960, // 19.27 GiB
			"allocated_bytes.all.peak":         17*GiB + 300*MiB,
			"allocated_bytes.all.allocated":    912 * GiB,
			"allocated_bytes.all.freed":        912*GiB - 20690984960,
			"active_bytes.all.current":         20690984960 + 64*MiB,
			"active_bytes.all.peak":            17*GiB + 364*MiB,
			"active_bytes.all.allocated":       912 * GiB,
			"active_bytes.all.freed":           912*GiB - 20690984960 - 64*MiB,
			"requested_bytes.all.current":      20690000000,
			"requested_bytes.all.peak":         17*GiB + 290*MiB,
			"requested_bytes.all.allocated":    911 * GiB,
			"requested_bytes.all.freed":        911*GiB - 20690000000,
			"reserved_bytes.all.current":       22 * GiB,
			"reserved_bytes.all.peak":          24 * GiB,
			"reserved_bytes.all.allocated":     30 * GiB,
			"reserved_bytes.all.freed":         8 * GiB,
			"inactive_split_bytes.all.current": 700 * MiB,
			"inactive_split_bytes.all.peak":    2 * GiB,
			"inactive_split_bytes.all.freed":   400 * GiB,
			"allocation.all.current":           1532,
			"allocation.all.peak":              2210,
			"allocation.all.allocated":         4567890,
			"allocation.all.freed":             4566358,
			"active.all.current":               1540,
			"active.all.peak":                  2215,
			"active.all.allocated":             4567890,
			"active.all.freed":                 4566350,
			"segment.all.current":              312,
			"segment.all.peak":                 340,
			"segment.all.allocated":            400,
			"segment.all.freed":                88,
			"inactive_split.all.current":       41,
			"inactive_split.all.peak":          97,
			"inactive_split.all.allocated":     88000,
			"inactive_split.all.freed":         87959,
			"num_alloc_retries":                2,
			"num_device_alloc":                 400,
			"num_device_free":                  88,
		}),
		PeakOp:                      2500,
		PeakAllocatedAtPeakReserved: 17 * GiB,
		LargestFree:                 900 * MiB,
		LowerBound:                  16*GiB + 768*MiB,
		Timeline:                    wave(4000, 10, 2500),
	}
}

func fragmentationOOM() *figures.Replay {
	r := completed()
	r.Settings = "max_split_size_mb:128"
	r.Allowed = 24 * GiB
	r.Truncated = false
	r.Skipped = nil
	r.Stats.NumOOMs = 1
	r.Timeline = wave(3300, 10, 2500)
	r.OOM = &figures.OOM{
		OpIndex:     3301,
		Size:        1536*MiB + 100,
		Rounded:     1536*MiB + 512,
		AllocSize:   1536*MiB + 512,
		Stream:      0,
		DeviceTotal: 150109880320,
		DeviceFree:  120 * GiB,
		Allowed:     24 * GiB,
		Allocated:   20690984960,
		Reserved:    23*GiB + 512*MiB,
		CachedFree:  2*GiB + 200*MiB,
		LargestFree: 900 * MiB,
		Segments: []figures.SegmentMap{
			{Address: 0x7f2a40000000, Size: 2 * GiB, Blocks: []figures.Block{
				{Size: 512 * MiB, State: figures.Allocated}, {Size: 900 * MiB, State: figures.Free}, {Size: 100 * MiB, State: figures.Allocated}, {Size: 300 * MiB, State: figures.Free}, {Size: 236 * MiB, State: figures.Pending},
			}},
			{Address: 0x7f2ac0000000, Size: 1 * GiB, Blocks: []figures.Block{
				{Size: 600 * MiB, State: figures.Free}, {Size: 4 * MiB, State: figures.Allocated}, {Size: 420 * MiB, State: figures.Free},
			}},
		},
		Frames: []string{
			"torch/nn/functional.py:2546:layer_norm",
			"model.py:88:forward",
			"train.py:40:<module>",
		},
		PinFrames: [][]string{
			{"model.py:61:attention", "train.py:40:<module>"},
		},
	}
	return r
}

func shortageOOM() *figures.Replay {
	r := completed()
	r.Source = "synthetic: grow"
	r.Policy = "nocache"
	r.Truncated = false
	r.Skipped = nil
	r.Stats.NumOOMs = 1
	r.OOM = &figures.OOM{
		OpIndex:     4000,
		Size:        40 * GiB,
		Rounded:     40 * GiB,
		AllocSize:   40 * GiB,
		Stream:      7,
		DeviceTotal: 150109880320,
		DeviceFree:  30 * GiB,
		Allocated:   100 * GiB,
		Reserved:    110 * GiB,
		CachedFree:  2 * GiB,
		LargestFree: 1 * GiB,
	}
	return r
}

// diverged is a completed replay under a cap inferred from the recording,
// which it left at one op.
func diverged() *figures.Replay {
	r := completed()
	r.Allowed = 17899192320
	r.InferredCap = &figures.InferredCap{Low: 17899192320, High: 19304284159, From: "1 retry that released cached segments"}
	r.Divergence = &figures.Divergence{Op: 3127, Event: 4448,
		Recorded: "released 53 cached segments (1.31 GiB), then allocated a 1.54 GiB segment at 0x7f1000000000",
		Replayed: "allocated a 1.54 GiB segment at 0x7f1000000000",
		Cause:    "the recording released cached segments here and the replay did not: the program probably ran under a memory cap"}
	return r
}

var cases = []struct {
	name   string
	replay func() *figures.Replay
}{
	{"completed", completed},
	{"oom_fragmentation", fragmentationOOM},
	{"oom_shortage", shortageOOM},
	{"diverged", diverged},
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file\n%s", path, lineDiff(string(want), string(got)))
	}
}

func TestGolden(t *testing.T) {
	renderers := []struct {
		name   string
		render func(w *bytes.Buffer, r *figures.Replay) error
	}{
		{"table", func(w *bytes.Buffer, r *figures.Replay) error { return Table(w, r, Options{}) }},
		{"markdown", func(w *bytes.Buffer, r *figures.Replay) error { return Markdown(w, r, Options{}) }},
		{"json", func(w *bytes.Buffer, r *figures.Replay) error { return JSON(w, r) }},
		{"timeline", func(w *bytes.Buffer, r *figures.Replay) error { return Timeline(w, r, Options{}) }},
	}
	for _, c := range cases {
		for _, rd := range renderers {
			t.Run(rd.name+"_"+c.name, func(t *testing.T) {
				var buf bytes.Buffer
				if err := rd.render(&buf, c.replay()); err != nil {
					t.Fatal(err)
				}
				golden(t, rd.name+"_"+c.name, buf.Bytes())
			})
		}
	}
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// With Color the output gains escapes and nothing else; without, it has none.
func TestColor(t *testing.T) {
	renderers := map[string]func(w *bytes.Buffer, r *figures.Replay, o Options) error{
		"table":    func(w *bytes.Buffer, r *figures.Replay, o Options) error { return Table(w, r, o) },
		"markdown": func(w *bytes.Buffer, r *figures.Replay, o Options) error { return Markdown(w, r, o) },
		"timeline": func(w *bytes.Buffer, r *figures.Replay, o Options) error { return Timeline(w, r, o) },
	}
	for _, c := range cases {
		for name, render := range renderers {
			var plain, coloured bytes.Buffer
			if err := render(&plain, c.replay(), Options{Color: false}); err != nil {
				t.Fatal(err)
			}
			if err := render(&coloured, c.replay(), Options{Color: true}); err != nil {
				t.Fatal(err)
			}
			if bytes.IndexByte(plain.Bytes(), 0x1b) >= 0 {
				t.Errorf("%s/%s: escape byte with Color=false", name, c.name)
			}
			hasEsc := bytes.IndexByte(coloured.Bytes(), 0x1b) >= 0
			if name == "markdown" && hasEsc {
				t.Errorf("markdown/%s: escape byte in Markdown", c.name)
			}
			if name != "markdown" && !hasEsc {
				t.Errorf("%s/%s: no escape byte with Color=true", name, c.name)
			}
			if got := ansi.ReplaceAllString(coloured.String(), ""); got != plain.String() {
				t.Errorf("%s/%s: coloured output differs beyond escapes\n%s", name, c.name, lineDiff(plain.String(), got))
			}
		}
	}
}

// The caller's choice wins over fatih/color's global default both ways.
func TestColorIgnoresGlobal(t *testing.T) {
	saved := color.NoColor
	t.Cleanup(func() { color.NoColor = saved })
	for _, global := range []bool{false, true} {
		color.NoColor = global
		for _, want := range []bool{false, true} {
			var buf bytes.Buffer
			if err := Table(&buf, fragmentationOOM(), Options{Color: want}); err != nil {
				t.Fatal(err)
			}
			if got := bytes.IndexByte(buf.Bytes(), 0x1b) >= 0; got != want {
				t.Errorf("color.NoColor=%v, Color=%v: escapes %v", global, want, got)
			}
		}
	}
}

func TestFragmentationColour(t *testing.T) {
	r := completed() // at peak: 1 − 17/24 = 29.2% (high); at the end 12.4%
	var buf bytes.Buffer
	if err := Table(&buf, r, Options{Color: true}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "\x1b[33m29.2%\x1b[0m") {
		t.Errorf("29.2%% at peak not yellow:\n%s", out)
	}
	if strings.Contains(out, "\x1b[33m12.4%") || strings.Contains(out, "\x1b[31;1m12.4%") {
		t.Errorf("12.4%% coloured:\n%s", out)
	}
	buf.Reset()
	if err := Table(&buf, r, Options{Color: true, Warn: 0.1, Alarm: 0.25}); err != nil {
		t.Fatal(err)
	}
	out = buf.String()
	if !strings.Contains(out, "\x1b[31;1m29.2%\x1b[0;22m") {
		t.Errorf("thresholds 0.1/0.25 not applied:\n%s", out)
	}
	// the end-of-run ratios describe the cache once the work is done: no level
	if strings.Contains(out, "\x1b[33m12.4%") || strings.Contains(out, "\x1b[31;1m12.4%") {
		t.Errorf("12.4%% at the end coloured:\n%s", out)
	}
}

// A run that frees everything keeps its cache: 1 − 0/reserved is 100%,
// which the definition gives, and no level: it is the end of a completed
// run (issue #16, #30).
func TestFragmentationAllFreed(t *testing.T) {
	r := completed()
	r.Stats.AllocatedBytes[alloc.All].Current = 0
	var buf bytes.Buffer
	if err := Table(&buf, r, Options{Color: true}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	var end string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "allocated/reserved, at the end") {
			end = l
		}
	}
	if !strings.Contains(end, "100.0%") || strings.Contains(end, "very high") || strings.Contains(end, "\x1b[") {
		t.Errorf("end row over an empty allocation: %q", end)
	}
}

func TestFragmentation(t *testing.T) {
	r := completed()
	f := r.Fragmentation()
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("End", f.End, 1-20690984960.0/(22*GiB))
	near("AtPeak", f.AtPeak, 1-17.0/24)
	near("Peaks", f.Peaks, 1-(17*GiB+300*MiB)/(24.0*GiB))
	cached := int64(22*GiB - 20690984960 - 64*MiB)
	if got := r.CachedFree(); got != cached {
		t.Errorf("CachedFree = %d, want %d", got, cached)
	}
	near("Holes", f.Holes, 1-900.0*MiB/float64(cached))
	near("OverLowerBound", r.OverLowerBound(), 24.0/(16+0.75))

	empty := &figures.Replay{}
	f = empty.Fragmentation()
	for name, v := range map[string]float64{"End": f.End, "AtPeak": f.AtPeak, "Peaks": f.Peaks, "Holes": f.Holes, "OverLowerBound": empty.OverLowerBound()} {
		if !math.IsNaN(v) {
			t.Errorf("empty replay: %s = %v, want NaN", name, v)
		}
	}
}

func TestBlockMap(t *testing.T) {
	tests := []struct {
		blocks []figures.Block
		width  int
		want   string
	}{
		{[]figures.Block{{Size: 4, State: figures.Allocated}, {Size: 2, State: figures.Free}, {Size: 2, State: figures.Pending}, {Size: 1, State: figures.Free}, {Size: 3, State: figures.Allocated}}, 12, "[AAAA..PP.AAA]"},
		// Halved: allocated beats pending beats free within a cell.
		{[]figures.Block{{Size: 4, State: figures.Allocated}, {Size: 2, State: figures.Free}, {Size: 2, State: figures.Pending}, {Size: 1, State: figures.Free}, {Size: 3, State: figures.Allocated}}, 6, "[AA.PAA]"},
		{[]figures.Block{{Size: 1, State: figures.Free}, {Size: 99, State: figures.Allocated}}, 10, "[AAAAAAAAAA]"},
		{[]figures.Block{{Size: 50, State: figures.Free}, {Size: 50, State: figures.Allocated}}, 1, "[A]"},
		{[]figures.Block{{Size: 50, State: figures.Pending}, {Size: 50, State: figures.Allocated}}, 1, "[A]"},
		{[]figures.Block{{Size: 50, State: figures.Pending}, {Size: 50, State: figures.Free}}, 1, "[P]"},
		// A small pinning block stays visible.
		{[]figures.Block{{Size: 600, State: figures.Free}, {Size: 4, State: figures.Allocated}, {Size: 420, State: figures.Free}}, 10, "[.....A....]"},
		{[]figures.Block{{Size: 1, State: figures.Free}, {Size: 1, State: figures.Allocated}, {Size: 1, State: figures.Free}}, 3, "[.A.]"},
		{[]figures.Block{{Size: 1, State: figures.Free}, {Size: 1, State: figures.Allocated}, {Size: 1, State: figures.Free}}, 7, "[..AAA..]"},
		{[]figures.Block{{Size: 3, State: figures.Allocated}}, 7, "[AAAAAAA]"},
		{[]figures.Block{{Size: 0, State: figures.Allocated}, {Size: 10, State: figures.Free}}, 4, "[....]"},
		{nil, 10, ""},
		{[]figures.Block{{Size: 10, State: figures.Free}}, 0, ""},
	}
	for _, tt := range tests {
		if got := blockMap(figures.SegmentMap{Blocks: tt.blocks}, tt.width); got != tt.want {
			t.Errorf("blockMap(%v, %d) = %q, want %q", tt.blocks, tt.width, got, tt.want)
		}
	}
}

func TestNilReplay(t *testing.T) {
	for name, err := range map[string]error{
		"table":    Table(&bytes.Buffer{}, nil, Options{}),
		"markdown": Markdown(&bytes.Buffer{}, nil, Options{}),
		"json":     JSON(&bytes.Buffer{}, nil),
		"timeline": Timeline(&bytes.Buffer{}, nil, Options{}),
	} {
		if err == nil {
			t.Errorf("%s: nil replay accepted", name)
		}
	}
}

func TestJSONShape(t *testing.T) {
	for _, c := range cases {
		var buf bytes.Buffer
		if err := JSON(&buf, c.replay()); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		stats, ok := doc["memory_stats"].(map[string]any)
		if !ok || len(stats) != 122 || stats["allocated_bytes.all.current"] != 20690984960.0 {
			t.Errorf("%s: memory_stats = %v", c.name, doc["memory_stats"])
		}
		oom, present := doc["oom"]
		if !present {
			t.Fatalf("%s: no oom key", c.name)
		}
		r := c.replay()
		if r.OOM == nil {
			if oom != nil {
				t.Errorf("%s: oom = %v, want null", c.name, oom)
			}
			continue
		}
		m, ok := oom.(map[string]any)
		if !ok || m["op_index"] != float64(r.OOM.OpIndex) || m["size"] != float64(r.OOM.Size) {
			t.Errorf("%s: oom = %v", c.name, oom)
		}
	}

	// Undefined ratios are null, empty lists [].
	var buf bytes.Buffer
	if err := JSON(&buf, &figures.Replay{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"end": null`, `"holes": null`, `"skipped": []`, `"timeline": []`, `"oom": null`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("empty replay: no %s in\n%s", want, buf.String())
		}
	}
}

// The peak marker sits under the column where reserved memory is highest,
// which is the top row of the chart.
func TestTimelinePeakMarker(t *testing.T) {
	for _, width := range []int{40, 80, 200} {
		r := completed()
		r.Timeline = wave(4000, 1, 2500)
		var buf bytes.Buffer
		if err := Timeline(&buf, r, Options{Width: width}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(buf.String(), "\n")
		var top []rune // the chart's first row
		for _, l := range lines {
			if strings.ContainsAny(l, "┤┼") {
				top = []rune(l)
				break
			}
		}
		var marks []rune
		for _, l := range lines {
			if strings.Contains(l, "^") && !strings.Contains(l, "operation") {
				marks = []rune(l)
			}
		}
		col := len(marks) - 1
		if col < 0 || marks[col] != '^' {
			t.Fatalf("width %d: no marker line in\n%s", width, buf.String())
		}
		if col >= len(top) || top[col] == ' ' {
			t.Errorf("width %d: marker at column %d, not under the top of the chart\n%s", width, col, buf.String())
		}
		for _, l := range lines {
			if n := len([]rune(l)); n > width {
				t.Errorf("width %d: line of %d columns: %q", width, n, l)
			}
		}
	}
}

func TestTimelineEdges(t *testing.T) {
	for name, pts := range map[string][]figures.Point{
		"none":      nil,
		"one point": {{Op: 5, Allocated: 100, Reserved: 200}},
		"all zero":  {{Op: 0}, {Op: 1}, {Op: 2}},
		"same op":   {{Op: 3, Reserved: MiB}, {Op: 3, Reserved: 2 * MiB}},
		"negative":  {{Op: 0, Allocated: -5}, {Op: 10, Reserved: GiB}},
	} {
		r := &figures.Replay{Timeline: pts, PeakOp: 1, OOM: &figures.OOM{OpIndex: 99}}
		var buf bytes.Buffer
		if err := Timeline(&buf, r, Options{Width: 30}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if buf.Len() == 0 {
			t.Errorf("%s: nothing written", name)
		}
	}
}

func FuzzRender(f *testing.F) {
	f.Add(int64(1), int64(2), uint64(3), uint64(4), uint64(5), 10, true, byte(3))
	f.Add(int64(-1), int64(0), uint64(0), uint64(math.MaxUint64), uint64(1), 0, false, byte(0))
	f.Fuzz(func(t *testing.T, alloc, res int64, largest, size, free uint64, width int, oom bool, blocks byte) {
		r := &figures.Replay{
			Stats: statsWith(map[string]int64{
				"allocated_bytes.all.current": alloc, "reserved_bytes.all.current": res,
				"reserved_bytes.all.peak": res, "allocated_bytes.all.peak": alloc,
			}),
			LargestFree: largest,
			LowerBound:  size,
			PeakOp:      width,
			Timeline:    []figures.Point{{Op: 0, Allocated: alloc, Reserved: res}, {Op: width, Allocated: res, Reserved: alloc}},
		}
		if oom {
			seg := figures.SegmentMap{Address: size, Size: free}
			for i := range int(blocks % 16) {
				seg.Blocks = append(seg.Blocks, figures.Block{Size: size >> i, State: []figures.BlockState{figures.Allocated, figures.Free, figures.Pending}[i%3]})
			}
			r.OOM = &figures.OOM{OpIndex: width, Size: size, Rounded: size, AllocSize: free, DeviceFree: free,
				Allowed: largest, Reserved: res, Allocated: alloc, CachedFree: free, LargestFree: largest,
				Segments: []figures.SegmentMap{seg}}
		}
		o := Options{Width: width % 300}
		for _, render := range []func(*bytes.Buffer) error{
			func(w *bytes.Buffer) error { return Table(w, r, o) },
			func(w *bytes.Buffer) error { return Markdown(w, r, o) },
			func(w *bytes.Buffer) error { return JSON(w, r) },
			func(w *bytes.Buffer) error { return Timeline(w, r, o) },
		} {
			var buf bytes.Buffer
			if err := render(&buf); err != nil {
				t.Fatal(err)
			}
			if bytes.IndexByte(buf.Bytes(), 0x1b) >= 0 {
				t.Fatal("escape byte without colour")
			}
		}
	})
}

func ExampleFormatBytes() {
	fmt.Println(units.FormatBytes(20690984960))
	fmt.Println(units.FormatSizeTorch(2 << 30))
	// Output:
	// 19.27 GiB
	// 2.00 GiB
}

func TestWrap(t *testing.T) {
	got := wrap("only 32.00 GiB free in all for a 40.00 GiB request: 8.00 GiB short", 38)
	want := []string{"only 32.00 GiB free in all for a", "40.00 GiB request: 8.00 GiB short"}
	if !slices.Equal(got, want) {
		t.Errorf("wrap = %q, want %q", got, want)
	}
	if got := wrap("\x1b[1mbold\x1b[0m word", 9); len(got) != 1 {
		t.Errorf("escapes counted as columns: %q", got)
	}
}
