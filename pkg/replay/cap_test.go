package replay

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// The capped recording shows its cap: one retry bounds it from above and
// the reserved peak from below, and PyTorch's cap lies in between.
// Replayed with no card or fraction given, it reproduces that run.
func TestInferredCap(t *testing.T) {
	snap := readFixture(t, "gpt2_varlen_capped95.pickle")
	tr := loadTruth(t, "gpt2_varlen_capped95")
	p := FromSnapshot(snap, 0)
	c := p.Cap
	if c == nil {
		t.Fatal("no cap inferred")
	}
	allowed := uint64(tr.Fraction * float64(tr.RecordedWith.DeviceTotal)) // PyTorch's allowed_memory_maximum
	if c.Low > allowed || allowed > c.High {
		t.Errorf("cap [%d, %d] misses PyTorch's %d", c.Low, c.High, allowed)
	}
	if want := uint64(tr.MemoryStats["reserved_bytes.all.peak"]); c.Low != want {
		t.Errorf("low %d, want the reserved peak %d", c.Low, want)
	}
	if c.Retries != 1 || c.OOMs != 0 || !strings.Contains(c.Describe(), "1 retry") {
		t.Errorf("evidence %+v: %s", c, c.Describe())
	}

	res, err := Run(p, Options{Config: settingsConfig(snap.Settings), RecordedCap: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cap != c || res.Allowed != c.Low {
		t.Errorf("replayed under cap %d (%+v), want %d", res.Allowed, res.Cap, c.Low)
	}
	got := res.Stats.Map()
	for k, want := range tr.MemoryStats {
		if got[k] != want {
			t.Errorf("%s = %d, PyTorch reported %d", k, got[k], want)
		}
	}
	if len(res.Segments) != len(p.Final) || res.Divergence != nil {
		t.Errorf("%d segments at the end, the snapshot has %d; divergence %+v", len(res.Segments), len(p.Final), res.Divergence)
	}

	// without RecordedCap, or with a fraction given, the replay is uncapped
	// or capped as told
	for _, o := range []Options{{}, {RecordedCap: true, DeviceTotal: 1 << 40, MemoryFraction: 0.5}} {
		res, err := Run(p, o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Cap != nil || res.Allowed == c.Low {
			t.Errorf("options %+v: replayed under the inferred cap", o)
		}
	}
}

// A fixture recorded under a cap (its truth gives a memory fraction for
// the run it was recorded in) shows one that holds PyTorch's; no other
// shows any.
func TestNoCapInferred(t *testing.T) {
	names, _ := filepath.Glob(filepath.Join(fixtures, "*.pickle"))
	for _, name := range names {
		base := filepath.Base(name)
		c := FromSnapshot(readFixture(t, base), 0).Cap
		var want uint64
		if _, err := os.Stat(strings.TrimSuffix(name, ".pickle") + ".truth.json"); err == nil {
			if tr := loadTruth(t, strings.TrimSuffix(base, ".pickle")); tr.Fraction > 0 {
				want = uint64(tr.Fraction * float64(tr.RecordedWith.DeviceTotal))
			}
		}
		switch {
		case want == 0 && c != nil:
			t.Errorf("%s: %s", base, c.Describe())
		case want > 0 && (!c.Capped() || c.Low > want || c.High < want):
			t.Errorf("%s: recorded under a cap of %d, inferred %+v", base, want, c)
		}
	}
}

// The cap rules (docs/pytorch-allocator.md §10.1, §19.5) on hand-made traces.
func TestInferCapRules(t *testing.T) {
	const mib = 1 << 20
	const a, b, c = 0x7f0000000000, 0x7f0002000000, 0x7f0004000000
	alloc1 := func(addr, size uint64) []trace.Event {
		return []trace.Event{ev(trace.ActionSegmentAlloc, addr, size), ev(trace.ActionAlloc, addr, size)}
	}
	free1 := func(addr, size uint64) []trace.Event {
		return []trace.Event{ev(trace.ActionFreeRequested, addr, size), ev(trace.ActionFreeCompleted, addr, size)}
	}
	cat := func(parts ...[]trace.Event) []trace.Event {
		var out []trace.Event
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	// 20 MiB and 30 MiB live, the 30 MiB freed; a 40 MiB request releases
	// it and gets its segment: reserved went 50 → 20 → 60
	retry := cat(alloc1(a, 20*mib), alloc1(b, 30*mib), free1(b, 30*mib),
		[]trace.Event{ev(trace.ActionSegmentFree, b, 30*mib)}, alloc1(c, 40*mib))
	for _, tc := range []struct {
		name      string
		events    []trace.Event
		gc        float64
		low, high uint64 // 0, 0: no cap
	}{
		// 50 + 40 would have been over any cap admitting the peak of 60
		{"retry", retry, 0, 60 * mib, 90*mib - 1},
		// with a garbage collection threshold the release may be a
		// collection instead, when 50 > 0.5 × cap
		{"gc", retry, 0.5, 60 * mib, 100 * mib},
		// an earlier peak of 100 MiB admits 50 + 40: an empty_cache
		{"empty_cache", cat(alloc1(c+64*mib, 100*mib), free1(c+64*mib, 100*mib),
			[]trace.Event{ev(trace.ActionSegmentFree, c+64*mib, 100*mib)}, retry), 0, 0, 0},
		// the released segment would have held the request: an empty_cache
		{"cached room", cat(alloc1(c+64*mib, 100*mib), free1(c+64*mib, 100*mib),
			[]trace.Event{ev(trace.ActionSegmentFree, c+64*mib, 100*mib)}, alloc1(a, 20*mib)), 0, 0, 0},
		// a release run that ends the trace was an empty_cache
		{"trailing release", retry[:len(retry)-2], 0, 0, 0},
		// the segment was not the next allocation's: no retry of it
		{"other segment", cat(retry[:len(retry)-1], []trace.Event{ev(trace.ActionAlloc, c, 20*mib)}), 0, 0, 0},
		// an out-of-memory the device had room for: 20 reserved + 64
		{"oom under a cap", cat(alloc1(a, 20*mib), []trace.Event{ev(trace.ActionOOM, 1<<30, 64*mib)}), 0, 20 * mib, 84*mib - 1},
		// one the device itself could not meet bounds no cap (its card had
		// 20 reserved + 32 free: TestInferDeviceRoom)
		{"device oom", cat(alloc1(a, 20*mib), []trace.Event{ev(trace.ActionOOM, 32*mib, 64*mib)}), 0, 0, 0},
		// garbage collection stayed quiet with a whole free segment
		// cached: 20 MiB reserved <= 0.25 × cap, so the cap is >= 80 MiB
		{"quiet collection", cat(alloc1(a, 20*mib), free1(a, 20*mib), alloc1(b, 30*mib),
			[]trace.Event{ev(trace.ActionOOM, 1<<30, 64*mib)}), 0.25, 80 * mib, 114*mib - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := inferCap(tc.events, trace.Settings{GCThreshold: tc.gc}, 0)
			switch {
			case tc.high == 0 && c.Capped():
				t.Errorf("inferred %+v, want none", c)
			case tc.high != 0 && (!c.Capped() || c.Low != tc.low || c.High != tc.high):
				t.Errorf("inferred %+v, want [%d, %d]", c, tc.low, tc.high)
			}
		})
	}
}

// An out-of-memory the device raised (device_free below the request) shows
// the card: reserved plus device_free, the least over such errors. A
// recorded segment beyond it (the card's other tenants let go of memory)
// makes it unknown.
func TestInferDeviceRoom(t *testing.T) {
	const mib = 1 << 20
	a, b := uint64(0x7f0000000000), uint64(0x7f0010000000)
	alloc1 := func(addr, size uint64) []trace.Event {
		return []trace.Event{ev(trace.ActionSegmentAlloc, addr, size), ev(trace.ActionAlloc, addr, size)}
	}
	cat := func(parts ...[]trace.Event) []trace.Event { return slices.Concat(parts...) }
	two := cat(alloc1(a, 20*mib), []trace.Event{ev(trace.ActionOOM, 32*mib, 64*mib), ev(trace.ActionOOM, 30*mib, 64*mib)})
	if c := inferCap(two, trace.Settings{}, 0); c == nil || c.Capped() || c.Device != 50*mib || c.DeviceOOMs != 2 {
		t.Errorf("two device errors: inferred %+v, want a 50 MiB card from 2 errors and no cap", c)
	}
	beyond := cat(two, alloc1(b, 40*mib)) // 60 MiB reserved on a 50 MiB card
	if c := inferCap(beyond, trace.Settings{}, 0); c != nil {
		t.Errorf("a segment beyond the card: inferred %+v, want none", c)
	}
	// the replay meets the error on a card of that size, and goes on
	p := Build(two)
	p.Cap = inferCap(two, trace.Settings{}, 0)
	res, err := Run(p, Options{RecordedCap: true, Check: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.NumOOMs != 2 || res.DeviceTotal != 50*mib || res.Allowed != 0 {
		t.Errorf("ooms %d on a card of %d (allowed %d): want 2 on the 50 MiB card, no cap", res.Stats.NumOOMs, res.DeviceTotal, res.Allowed)
	}
}

// Runs recorded under a cap with other settings (see
// testdata/recorded/README.md): the cap inferred holds PyTorch's, and the
// replay under it follows the recording and reproduces its figures.
func TestRecordedUnderACap(t *testing.T) {
	for _, name := range recordings(t, "recorded", "*.pickle", 4) {
		t.Run(filepath.Base(name), func(t *testing.T) {
			var want struct {
				AllocConf   string           `json:"alloc_conf"`
				Allowed     uint64           `json:"allowed_bytes"`
				Reached     bool             `json:"cap_reached"` // the run hit its cap
				MemoryStats map[string]int64 `json:"memory_stats"`
			}
			readJSON(t, strings.TrimSuffix(name, ".pickle")+".json", &want)
			snap, err := trace.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			p := FromSnapshot(snap, 0)
			// a cap the run never reached leaves no trace; one it reached must show
			switch c := p.Cap; {
			case c == nil && want.Reached:
				t.Fatal("no cap inferred")
			case c != nil && (c.Low > want.Allowed || want.Allowed > c.High):
				t.Errorf("cap [%d, %d] misses PyTorch's %d", c.Low, c.High, want.Allowed)
			}
			res, err := Run(p, Options{Config: settingsConfig(snap.Settings), RecordedCap: true, Check: true})
			if err != nil {
				t.Fatal(err)
			}
			if d := res.Divergence; d != nil {
				t.Errorf("diverged: %s", d.Describe())
			}
			got := res.Stats.Map()
			for k, v := range want.MemoryStats {
				if got[k] != v {
					t.Errorf("%s = %d, PyTorch reported %d", k, got[k], v)
				}
			}
		})
	}
}

// The cap a plan infers from the events it keeps (device events and the
// one after each, with the garbage collection watch's counts) is the one
// the whole trace gives, on every recorded snapshot and on each cut short.
func TestCapFromKeptEvents(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtures, "*.pickle"))
	for _, dir := range []string{"recorded", "heldout"} {
		more, _ := filepath.Glob(filepath.Join("testdata", dir, "*.pickle"))
		files = append(files, more...)
	}
	capped := 0
	for _, f := range files {
		snap, err := trace.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		for d, events := range snap.Traces {
			for _, k := range []int{0, len(events) / 3} {
				if len(events[k:]) == 0 {
					continue
				}
				c := *snap
				c.Traces = slices.Clone(snap.Traces)
				c.Traces[d] = events[k:]
				p := FromSnapshot(&c, d)
				var added, final int64
				for _, e := range c.Traces[d] {
					switch e.Action {
					case trace.ActionSegmentAlloc, trace.ActionSegmentMap:
						added += int64(e.Size)
					case trace.ActionSegmentFree, trace.ActionSegmentUnmap:
						added -= int64(e.Size)
					}
				}
				for _, s := range c.Segments {
					if s.Device == d {
						final += int64(s.TotalSize)
					}
				}
				want := inferCapFrom(traceEvents(c.Traces[d]), c.Settings, uint64(max(final-added, 0)), nil,
					func(k int) bool { return p.entering[k] })
				if !reflect.DeepEqual(p.Cap, want) {
					t.Errorf("%s device %d from %d: cap %+v, the whole trace's %+v", filepath.Base(f), d, k, p.Cap, want)
				}
				if want != nil {
					capped++
				}
			}
		}
	}
	if capped < 5 {
		t.Errorf("%d traces show a cap: too few to compare", capped)
	}
}
