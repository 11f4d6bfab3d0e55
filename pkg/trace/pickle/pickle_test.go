package pickle

import (
	"github.com/gpumem/gpumem/pkg/trace/model"

	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// golden mirrors what testdata/gen_golden.py writes from CPython's
// reading of each fixture.
type golden struct {
	Segments struct {
		Count         int            `json:"count"`
		TotalSize     uint64         `json:"total_size"`
		AllocatedSize uint64         `json:"allocated_size"`
		ActiveSize    uint64         `json:"active_size"`
		RequestedSize uint64         `json:"requested_size"`
		Blocks        int            `json:"blocks"`
		BlockStates   map[string]int `json:"block_states"`
		BlockBytes    uint64         `json:"block_bytes"`
		First, Last   []goldenSeg
	} `json:"segments"`
	Traces []struct {
		Count      int            `json:"count"`
		Actions    map[string]int `json:"actions"`
		WithFrames int            `json:"with_frames"`
		SumSize    uint64         `json:"sum_size"`
		SumAddr    uint64         `json:"sum_addr"`
		SumTimeUS  uint64         `json:"sum_time_us"`
		First      []goldenEvent  `json:"first"`
		Last       []goldenEvent  `json:"last"`
	} `json:"traces"`
	Stacks   int `json:"stacks"`
	Settings *struct {
		AllocConf          string  `json:"alloc_conf"`
		MaxSplitSize       int64   `json:"max_split_size"`
		GCThreshold        float64 `json:"gc_threshold"`
		ExpandableSegments bool    `json:"expandable_segments"`
		Roundup            [16]int `json:"roundup"`
	} `json:"settings"`
	Annotations struct {
		Count int              `json:"count"`
		First []map[string]any `json:"first"`
	} `json:"annotations"`
}

type goldenSeg struct {
	Device        int      `json:"device"`
	Address       uint64   `json:"address"`
	TotalSize     uint64   `json:"total_size"`
	AllocatedSize uint64   `json:"allocated_size"`
	ActiveSize    uint64   `json:"active_size"`
	RequestedSize uint64   `json:"requested_size"`
	Stream        uint64   `json:"stream"`
	Small         bool     `json:"small"`
	PoolID        [2]int64 `json:"pool_id"`
	Expandable    bool     `json:"expandable"`
	Blocks        int      `json:"blocks"`
	Frames        [][]any  `json:"frames"`
}

type goldenEvent struct {
	Action string  `json:"action"`
	Addr   uint64  `json:"addr"`
	Size   uint64  `json:"size"`
	Stream uint64  `json:"stream"`
	TimeUS int64   `json:"time_us"`
	Frames [][]any `json:"frames"`
}

func readGolden(t *testing.T, name string) *golden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &g
}

// framesOf renders a stack the way the golden files store frames.
func framesOf(s *model.Snapshot, stack int32) [][]any {
	out := [][]any{}
	if stack < 0 {
		return out
	}
	for _, f := range s.Stacks[stack] {
		out = append(out, []any{f.Filename, float64(f.Line), f.Name})
	}
	return out
}

func checkEvent(t *testing.T, s *model.Snapshot, where string, got model.Event, want goldenEvent) {
	t.Helper()
	if got.Action.String() != want.Action || got.Addr != want.Addr || got.Size != want.Size ||
		got.Stream != want.Stream || got.TimeUS != want.TimeUS {
		t.Errorf("%s: got %+v (%s), want %+v", where, got, got.Action, want)
	}
	if f := framesOf(s, got.Stack); !jsonEqual(f, want.Frames) {
		t.Errorf("%s: frames %v, want %v", where, f, want.Frames)
	}
}

func checkSegment(t *testing.T, s *model.Snapshot, where string, got model.Segment, want goldenSeg) {
	t.Helper()
	g := goldenSeg{got.Device, got.Address, got.TotalSize, got.AllocatedSize, got.ActiveSize,
		got.RequestedSize, got.Stream, got.Small, got.PoolID, got.Expandable, len(got.Blocks),
		framesOf(s, got.Stack)}
	if !jsonEqual(g, want) {
		t.Errorf("%s: got %+v, want %+v", where, g, want)
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// compareGolden checks a decoded snapshot against CPython's summary.
func compareGolden(t *testing.T, s *model.Snapshot, g *golden) {
	t.Helper()
	gs := g.Segments
	if len(s.Segments) != gs.Count {
		t.Fatalf("segments: got %d, want %d", len(s.Segments), gs.Count)
	}
	var total, alloc, active, req, bbytes uint64
	blocks := 0
	states := map[string]int{}
	for _, seg := range s.Segments {
		total += seg.TotalSize
		alloc += seg.AllocatedSize
		active += seg.ActiveSize
		req += seg.RequestedSize
		for _, b := range seg.Blocks {
			blocks++
			bbytes += b.Size
			states[b.State.String()]++
		}
	}
	if total != gs.TotalSize || alloc != gs.AllocatedSize || active != gs.ActiveSize || req != gs.RequestedSize {
		t.Errorf("segment sizes: got %d/%d/%d/%d, want %d/%d/%d/%d", total, alloc, active, req,
			gs.TotalSize, gs.AllocatedSize, gs.ActiveSize, gs.RequestedSize)
	}
	if blocks != gs.Blocks || bbytes != gs.BlockBytes || !jsonEqual(states, gs.BlockStates) {
		t.Errorf("blocks: got %d, %d bytes, %v; want %d, %d bytes, %v", blocks, bbytes, states,
			gs.Blocks, gs.BlockBytes, gs.BlockStates)
	}
	for i, want := range gs.First {
		checkSegment(t, s, "segment "+strconv.Itoa(i), s.Segments[i], want)
	}
	for i, want := range gs.Last {
		j := len(s.Segments) - len(gs.Last) + i
		checkSegment(t, s, "segment "+strconv.Itoa(j), s.Segments[j], want)
	}

	if len(s.Traces) != len(g.Traces) {
		t.Fatalf("traces: got %d devices, want %d", len(s.Traces), len(g.Traces))
	}
	for dev, gt := range g.Traces {
		tr := s.Traces[dev]
		if len(tr) != gt.Count {
			t.Fatalf("device %d: got %d events, want %d", dev, len(tr), gt.Count)
		}
		counts := map[string]int{}
		for a := model.ActionAlloc; a <= model.ActionSnapshot; a++ {
			counts[a.String()] = 0
		}
		var size, addr, tus uint64
		withFrames := 0
		for _, ev := range tr {
			counts[ev.Action.String()]++
			size += ev.Size
			addr += ev.Addr
			tus += uint64(ev.TimeUS)
			if ev.Stack >= 0 {
				withFrames++
			}
		}
		if !jsonEqual(counts, gt.Actions) {
			t.Errorf("device %d: action counts %v, want %v", dev, counts, gt.Actions)
		}
		if size != gt.SumSize || addr != gt.SumAddr || tus != gt.SumTimeUS || withFrames != gt.WithFrames {
			t.Errorf("device %d: sums size/addr/time/with-frames %d/%d/%d/%d, want %d/%d/%d/%d", dev,
				size, addr, tus, withFrames, gt.SumSize, gt.SumAddr, gt.SumTimeUS, gt.WithFrames)
		}
		for i, want := range gt.First {
			checkEvent(t, s, "event "+strconv.Itoa(i), tr[i], want)
		}
		for i, want := range gt.Last {
			j := len(tr) - len(gt.Last) + i
			checkEvent(t, s, "event "+strconv.Itoa(j), tr[j], want)
		}
	}
	if len(s.Stacks) != g.Stacks {
		t.Errorf("stacks: got %d distinct, want %d", len(s.Stacks), g.Stacks)
	}

	if g.Settings == nil {
		if s.Settings.Present {
			t.Errorf("settings present, want absent")
		}
	} else {
		st, want := s.Settings, g.Settings
		if !st.Present || st.AllocConf != want.AllocConf || st.MaxSplitSize != want.MaxSplitSize ||
			st.GCThreshold != want.GCThreshold || st.ExpandableSegments != want.ExpandableSegments ||
			st.RoundupPower2Divisions != want.Roundup {
			t.Errorf("settings: got %+v, want %+v", st, *want)
		}
	}
	if len(s.Annotations) != g.Annotations.Count {
		t.Errorf("annotations: got %d, want %d", len(s.Annotations), g.Annotations.Count)
	}
	for i, want := range g.Annotations.First {
		a := s.Annotations[i]
		got := map[string]any{"device": float64(a.Device), "time_us": float64(a.TimeUS)}
		for k, v := range a.Fields {
			got[k] = v
		}
		if !jsonEqual(got, want) {
			t.Errorf("annotation %d: got %v, want %v", i, got, want)
		}
	}
}

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestFixtures(t *testing.T) {
	paths, err := filepath.Glob("../../../testdata/pytorch/*.pickle")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures found (%v)", err)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".pickle")
		t.Run(name, func(t *testing.T) {
			s, err := readFile(p)
			if err != nil {
				t.Fatal(err)
			}
			compareGolden(t, s, readGolden(t, name))
		})
	}
}

// The same snapshot pickled with other protocols (BINPUT, BINUNICODE,
// no FRAME) must decode identically.
func TestProtocols(t *testing.T) {
	g := readGolden(t, "seed_frag")
	for _, name := range []string{"seed_frag_p2", "seed_frag_p3", "seed_frag_p5"} {
		t.Run(name, func(t *testing.T) {
			s, err := readFile(filepath.Join("testdata", name+".pickle"))
			if err != nil {
				t.Fatal(err)
			}
			compareGolden(t, s, g)
		})
	}
}

func TestBareSegmentList(t *testing.T) {
	s, err := readFile(filepath.Join("testdata", "seed_frag_segments.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := readFile("../../../testdata/pytorch/seed_frag.pickle")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(s.Segments, want.Segments, func(a, b model.Segment) bool { return jsonEqual(a, b) }) {
		t.Errorf("segments differ from the full snapshot's")
	}
	if len(s.Traces) != 0 || s.Settings.Present || s.Settings.MaxSplitSize != -1 {
		t.Errorf("bare list: traces %d, settings %+v; want none", len(s.Traces), s.Settings)
	}
}

// Most events of the stacks fixture have frames; identical frame lists
// must share one Stacks entry.
func TestStacksInterned(t *testing.T) {
	s, err := readFile("../../../testdata/pytorch/gpt2_varlen_stacks.pickle")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int32{}
	for i, ev := range s.Traces[0] {
		if ev.Stack == -1 {
			continue
		}
		if ev.Stack < 0 || int(ev.Stack) >= len(s.Stacks) {
			t.Fatalf("event %d: stack %d out of range [0,%d)", i, ev.Stack, len(s.Stacks))
		}
		key := jsonString(s.Stacks[ev.Stack])
		if id, ok := seen[key]; ok && id != ev.Stack {
			t.Fatalf("event %d: identical frames stored as stacks %d and %d", i, id, ev.Stack)
		}
		seen[key] = ev.Stack
	}
	for i, st := range s.Stacks {
		if len(st) == 0 {
			t.Errorf("stack %d is empty", i)
		}
		for _, f := range st {
			if f.Filename == "…" && strings.HasPrefix(f.Name, "… ") {
				continue // a marker for frames left out
			}
			if f.Filename == "" || f.Name == "" || f.Line <= 0 {
				t.Errorf("stack %d: implausible frame %+v", i, f)
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no event has frames")
	}
	if len(seen) != len(s.Stacks) {
		t.Errorf("%d distinct event stacks, %d stored (blocks and segments have none here)", len(seen), len(s.Stacks))
	}
}

// The benchmark's memory budget assumes 40-byte events.
func TestEventSize(t *testing.T) {
	if n := unsafe.Sizeof(model.Event{}); n != 40 {
		t.Errorf("Event is %d bytes, want 40", n)
	}
}

func TestActionString(t *testing.T) {
	want := []string{"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
		"segment_map", "segment_unmap", "oom", "snapshot"}
	for i, w := range want {
		if got := (model.ActionAlloc + model.Action(i)).String(); got != w {
			t.Errorf("Action(%d) = %q, want %q", i+1, got, w)
		}
	}
	if got := model.Action(0).String(); got != "Action(0)" {
		t.Errorf("Action(0) = %q", got)
	}
	if got := model.BlockPendingFree.String(); got != "active_pending_free" {
		t.Errorf("BlockPendingFree = %q", got)
	}
}

func TestFormatErrorText(t *testing.T) {
	for _, c := range []struct {
		e    FormatError
		want string
	}{
		{FormatError{"a.pickle", 12, "bad"}, "a.pickle: byte 12: bad"},
		{FormatError{"", 0, "bad"}, "byte 0: bad"},
		{FormatError{"a.pickle", -1, "bad"}, "a.pickle: bad"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.e, got, c.want)
		}
	}
}
