package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpumem/gpumem/internal/workload"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

const fixtures = "../../testdata/pytorch"

type truth struct {
	Name         string
	Replay       string           `json:"replay"`
	AllocConf    string           `json:"alloc_conf"`
	Fraction     float64          `json:"per_process_memory_fraction"`
	MemoryStats  map[string]int64 `json:"memory_stats"`
	RecordedWith struct {
		DeviceTotal uint64 `json:"device_total_bytes"`
	} `json:"recorded_with"`
}

func loadTruth(t testing.TB, name string) truth {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name+".truth.json"))
	if err != nil {
		t.Fatal(err)
	}
	tr := truth{Name: name}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tr
}

// The gpt2_varlen fixture's plan, read once: several tests share it.
var gpt2 = sync.OnceValues(func() (*replay.Plan, error) {
	snap, err := trace.Open(filepath.Join(fixtures, "gpt2_varlen.pickle"))
	if err != nil {
		return nil, err
	}
	return replay.FromSnapshot(snap, 0), nil
})

func gpt2Plan(t testing.TB) *replay.Plan {
	t.Helper()
	p, err := gpt2()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func find(t testing.TB, rows []Row, label string) *Row {
	t.Helper()
	for i := range rows {
		if rows[i].Label == label {
			return &rows[i]
		}
	}
	t.Fatalf("no row %q", label)
	return nil
}

// The keys a replay of gpt2_varlen must reproduce exactly under each
// setting a fixture was recorded with.
var exactKeys = []string{
	"reserved_bytes.all.peak", "allocated_bytes.all.peak", "active_bytes.all.peak",
	"segment.all.peak", "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
	"reserved_bytes.all.current", "inactive_split_bytes.all.peak", "num_sync_all_streams",
}

// A sweep over gpt2_varlen under the settings the fixtures record (the
// defaults, roundup_power2_divisions:4, and the 95% cap by memory
// fraction on the recorded card) gives exactly what PyTorch reported.
func TestMatchesPyTorch(t *testing.T) {
	var grid []Setting
	var truths []truth
	var card uint64
	for _, name := range []string{"gpt2_varlen", "gpt2_varlen_pow2div4", "gpt2_varlen_capped95"} {
		tr := loadTruth(t, name)
		if tr.Replay != "gpt2_varlen.pickle" {
			t.Fatalf("%s replays %s", name, tr.Replay)
		}
		s, err := ParseSetting(tr.AllocConf)
		if err != nil {
			t.Fatal(err)
		}
		s.Label, s.Fraction = name, tr.Fraction
		grid = append(grid, s)
		truths = append(truths, tr)
		card = tr.RecordedWith.DeviceTotal
	}
	rows, err := Run(context.Background(), gpt2Plan(t), grid, []uint64{card}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(grid) {
		t.Fatalf("%d rows for %d settings", len(rows), len(grid))
	}
	for _, tr := range truths {
		r := find(t, rows, tr.Name)
		got := r.Stats.Map()
		for _, k := range exactKeys {
			if got[k] != tr.MemoryStats[k] {
				t.Errorf("%s: %s = %d, PyTorch reported %d", tr.Name, k, got[k], tr.MemoryStats[k])
			}
		}
		if !r.FitsAll() || r.Card != card {
			t.Errorf("%s: fits %v on card %d, want a fit on %d", tr.Name, r.FitsAll(), r.Card, card)
		}
		if want := uint64(tr.Fraction * float64(card)); r.Allowed != want {
			t.Errorf("%s: cap %d, want %d", tr.Name, r.Allowed, want)
		}
	}
	// Without a card, the uncapped settings give the same figures.
	rows, err = Run(context.Background(), gpt2Plan(t), grid[:2], nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range truths[:2] {
		r := find(t, rows, tr.Name)
		if got, want := r.PeakReserved(), tr.MemoryStats["reserved_bytes.all.peak"]; got != want {
			t.Errorf("%s on an unlimited device: peak reserved %d, PyTorch reported %d", tr.Name, got, want)
		}
		if r.Card != 0 || r.Allowed != 0 || len(r.Cards) != 0 {
			t.Errorf("%s: card %d, cap %d, %d card replays on an unlimited device", tr.Name, r.Card, r.Allowed, len(r.Cards))
		}
	}
}

// Cards: a card smaller than the peak fails at the op where reserved
// memory runs out, and the headline figures are the largest card's.
func TestCards(t *testing.T) {
	p := gpt2Plan(t)
	const small, big = 16 << 30, 40 << 30
	grid := []Setting{Defaults(), mustSetting(t, "expandable_segments:True")}
	rows, err := Run(context.Background(), p, grid, []uint64{small, big}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if len(r.Cards) != 2 || r.Cards[0].Card != small || r.Cards[1].Card != big {
			t.Fatalf("%s: cards %+v", r.Label, r.Cards)
		}
		if r.Card != big || r.PeakReserved() != r.Cards[1].PeakReserved() {
			t.Errorf("%s: headline on card %d, want the largest (%d)", r.Label, r.Card, uint64(big))
		}
		oom := r.Cards[0].OOM
		if oom == nil {
			t.Fatalf("%s fits in 16 GiB, whose peak allocated is over 16 GiB", r.Label)
		}
		if r.FitsAll() || !r.Cards[1].Fits() {
			t.Errorf("%s: FitsAll %v, fits 40 GiB %v", r.Label, r.FitsAll(), r.Cards[1].Fits())
		}
		// The same replay alone on that card fails at the same event.
		res, err := replay.Run(p, replay.Options{Config: r.Setting.Config, Device: alloc.Sim(small), DeviceTotal: small})
		if err != nil {
			t.Fatal(err)
		}
		if res.OOM == nil || res.OOM.OpIndex != oom.OpIndex {
			t.Errorf("%s: sweep says OOM at event %d, a lone replay %+v", r.Label, oom.OpIndex, res.OOM)
		}
		if oom.OpIndex <= 0 || oom.OpIndex >= p.Events {
			t.Errorf("%s: OOM at event %d of %d", r.Label, oom.OpIndex, p.Events)
		}
	}
}

// The grid's rows do not depend on how many workers ran them.
func TestWorkers(t *testing.T) {
	p := gpt2Plan(t)
	one, err := Run(context.Background(), p, DefaultGrid(false), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	many, err := Run(context.Background(), p, DefaultGrid(false), nil, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != len(DefaultGrid(false)) || len(one) != len(many) {
		t.Fatalf("%d and %d rows", len(one), len(many))
	}
	for i := range one {
		if one[i].Label != many[i].Label || one[i].Stats != many[i].Stats {
			t.Errorf("row %d: %s %d with 1 worker, %s %d with 5", i,
				one[i].Label, one[i].PeakReserved(), many[i].Label, many[i].PeakReserved())
		}
		if i > 0 && one[i].PeakReserved() < one[i-1].PeakReserved() {
			t.Errorf("rows not sorted: %s %d after %s %d", one[i].Label, one[i].PeakReserved(),
				one[i-1].Label, one[i-1].PeakReserved())
		}
	}
	// The policies that differ do differ: nocache asks the device for
	// every allocation.
	nc := find(t, one, "nocache")
	def := find(t, one, DefaultsLabel)
	if nc.DeviceAllocs() <= def.DeviceAllocs() || nc.Setting.Settable() {
		t.Errorf("nocache: %d device allocations (defaults %d), settable %v", nc.DeviceAllocs(), def.DeviceAllocs(), nc.Setting.Settable())
	}
}

// Each job beside the replays runs once, whatever the workers (one worker
// takes them in their order), and the rows are the same with them; a
// sweep refused before it starts runs none.
func TestRunCasesBeside(t *testing.T) {
	p := &replay.Plan{Ops: []alloc.Op{{Kind: alloc.OpAlloc, ID: 0, Size: 1 << 20}, {Kind: alloc.OpFree, ID: 0}}}
	var cases []Case
	for _, s := range DefaultGrid(false) {
		cases = append(cases, Case{Label: s.Label, Plan: p, Setting: s})
	}
	plain, err := RunCases(context.Background(), cases, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{1, 3} {
		var runs, second atomic.Int32
		rows, err := RunCasesBeside(context.Background(), cases, nil, workers, func() { runs.Add(1) },
			func() { second.Store(runs.Load()*10 + second.Load() + 1) })
		if err != nil {
			t.Fatal(err)
		}
		if runs.Load() != 1 || second.Load()%10 != 1 {
			t.Errorf("%d workers: the jobs beside ran %d and %d times", workers, runs.Load(), second.Load()%10)
		}
		if workers == 1 && second.Load() != 11 {
			t.Errorf("one worker ran the second job beside before the first")
		}
		for i := range rows {
			if rows[i].Label != plain[i].Label || rows[i].Stats != plain[i].Stats {
				t.Errorf("%d workers: row %d differs with a job beside", workers, i)
			}
		}
	}
	ran := false
	if _, err := RunCasesBeside(context.Background(), nil, nil, 2, func() { ran = true }); err == nil || ran {
		t.Errorf("no cases: error %v, beside ran %v", err, ran)
	}
}

// The workers take the replay without a cache first, then cupy's and
// cuda-async's, and bfc and expandable segments last, expandable
// segments the very last; every other setting of the grid, the defaults
// among them, in between.
func TestReplayWeight(t *testing.T) {
	w := func(text string) int { return replayWeight(mustSetting(t, text)) }
	def := w(DefaultsLabel)
	if !(w("nocache") > w("cupy") && w("cupy") == w("cuda-async") && w("cupy") > def &&
		def > w("bfc") && w("bfc") > w("expandable_segments:True")) {
		t.Errorf("weights: nocache %d, cupy %d, cuda-async %d, defaults %d, bfc %d, expandable segments %d",
			w("nocache"), w("cupy"), w("cuda-async"), def, w("bfc"), w("expandable_segments:True"))
	}
	for _, s := range DefaultGrid(true) {
		c := s.Config
		switch c.Policy {
		case alloc.PolicyNoCache, alloc.PolicyCuPy, alloc.PolicyCUDAAsync, alloc.PolicyBFC:
			continue
		}
		if got := replayWeight(s); c.ExpandableSegments != (got < def) || (!c.ExpandableSegments && got != def) {
			t.Errorf("%s: weight %d, the defaults' %d", s.Label, got, def)
		}
	}
}

// garbage_collection_threshold acts only under a cap: without one its
// rows equal the defaults, which is why DefaultGrid adds it only then.
func TestGCNeedsCap(t *testing.T) {
	p := gpt2Plan(t)
	tr := loadTruth(t, "gpt2_varlen_capped95")
	card := tr.RecordedWith.DeviceTotal
	gc := mustSetting(t, "garbage_collection_threshold:0.6")
	rows, err := Run(context.Background(), p, []Setting{Defaults(), gc}, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].Stats != rows[1].Stats {
		t.Errorf("without a cap, garbage collection changed the figures")
	}
	d, g := Defaults(), gc
	d.Fraction, g.Fraction = tr.Fraction, tr.Fraction
	rows, err = Run(context.Background(), p, []Setting{d, g}, []uint64{card}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].Stats == rows[1].Stats {
		t.Errorf("under a cap, garbage collection changed nothing")
	}
	if got := len(DefaultGrid(true)) - len(DefaultGrid(false)); got != 3 {
		t.Errorf("the capped grid adds %d settings, want 3", got)
	}
}

func TestRunErrors(t *testing.T) {
	p := &replay.Plan{Ops: []alloc.Op{{Kind: alloc.OpAlloc, ID: 0, Size: 1 << 20}}}
	frac := Defaults()
	frac.Fraction = 0.5
	bad := Defaults()
	bad.Fraction = 1.5
	for _, c := range []struct {
		grid  []Setting
		cards []uint64
		want  string
	}{
		{nil, nil, "no settings"},
		{[]Setting{frac}, nil, "needs a card"},
		{[]Setting{bad}, []uint64{1 << 30}, "not in (0, 1]"},
		{[]Setting{Defaults()}, []uint64{0}, "0 bytes"},
	} {
		if _, err := Run(context.Background(), p, c.grid, c.cards, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("grid %v cards %v: error %v, want %q", c.grid, c.cards, err, c.want)
		}
	}
	if _, err := RunCases(context.Background(), []Case{{Label: "x", Setting: Defaults()}}, nil, 1); err == nil {
		t.Error("a case without a plan ran")
	}
	// A freed id that was never allocated is an invalid op, named.
	inv := &replay.Plan{Ops: []alloc.Op{{Kind: alloc.OpFree, ID: 7}}}
	if _, err := Run(context.Background(), inv, []Setting{Defaults()}, nil, 1); err == nil || !strings.Contains(err.Error(), "defaults on an unlimited device") {
		t.Errorf("invalid op: error %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, p, DefaultGrid(false), nil, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled sweep: error %v", err)
	}
}

func row(label, conf string, peak, allocs int64, fits ...bool) Row {
	s, err := ParseSetting(conf)
	if err != nil {
		panic(err)
	}
	r := Row{Label: label, Setting: s}
	r.Stats.ReservedBytes[alloc.All].Peak = peak
	r.Stats.NumDeviceAlloc = allocs
	for _, f := range fits {
		o := Outcome{}
		if !f {
			o.OOM = &alloc.OOM{}
		}
		r.Cards = append(r.Cards, o)
	}
	if n := len(r.Cards); n > 0 {
		r.Outcome = r.Cards[n-1] // the headline is the largest card's, given last here
	}
	r.Stats.ReservedBytes[alloc.All].Peak = peak
	r.Stats.NumDeviceAlloc = allocs
	return r
}

func TestRecommend(t *testing.T) {
	rows := []Row{
		row("defaults", "", 1000, 10, true, true),
		row("nocache", "nocache", 500, 900, true, true),
		row("a", "max_split_size_mb:64", 800, 12, true, false), // lowest settable, but OOMs on a card
		row("b", "max_split_size_mb:128", 900, 11, true, true),
		row("c", "roundup_power2_divisions:4", 900, 9, true, true), // ties b, fewer device allocations
		row("d", "backend:cudaMallocAsync", 100, 1, true, true),    // not simulated: never advised
	}
	rec := Recommend(rows)
	if rec.Best == nil || rec.Best.Label != "c" {
		t.Fatalf("best %+v, want c", rec.Best)
	}
	if rec.Baseline == nil || rec.Baseline.Label != "defaults" {
		t.Fatalf("baseline %+v", rec.Baseline)
	}
	if rec.Saved != 100 || math.Abs(rec.Percent-10) > 1e-9 {
		t.Errorf("saved %d (%.2f%%), want 100 (10%%)", rec.Saved, rec.Percent)
	}
	if len(rec.Unsettable) != 2 || rec.Unsettable[0].Label != "nocache" || rec.Unsettable[1].Label != "d" {
		t.Errorf("unsettable %v", rec.Unsettable)
	}
	// Nothing fits: no advice, no savings.
	rec = Recommend([]Row{row("defaults", "", 1000, 10, false)})
	if rec.Best != nil || rec.Saved != 0 || rec.Baseline == nil {
		t.Errorf("nothing fits: %+v", rec)
	}
	// A card no settable row fits is left out of the choice.
	rec = Recommend([]Row{
		row("defaults", "", 1000, 10, false, true),
		row("e", "expandable_segments:True", 900, 10, false, false),
		row("f", "max_split_size_mb:64", 950, 10, false, true),
		row("nocache", "nocache", 500, 900, true, true),
	})
	if rec.Best == nil || rec.Best.Label != "f" || len(rec.TooSmall) != 1 || rec.TooSmall[0] != 0 {
		t.Errorf("one card too small: best %v, too small %v; want f, [0]", rec.Best, rec.TooSmall)
	}
	if Lowest(rows, nil).Label != "d" {
		t.Errorf("lowest of all: %s", Lowest(rows, nil).Label)
	}
}

func TestSort(t *testing.T) {
	rows := []Row{row("x", "", 5, 1), row("y", "", 3, 2), row("z", "", 3, 1), row("w", "", 1, 1)}
	rows[3].OOM = &alloc.OOM{} // stopped short: last whatever its peak
	Sort(rows)
	var got []string
	for _, r := range rows {
		got = append(got, r.Label)
	}
	if s := strings.Join(got, " "); s != "z y x w" {
		t.Errorf("order %q, want %q", s, "z y x w")
	}
}

func mustSetting(t testing.TB, s string) Setting {
	t.Helper()
	x, err := ParseSetting(s)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// The transformer workload set to GPT-2 small with the fixture's batch and
// sequence lengths lands within 15% of the real gpt2_varlen run's peak
// reserved memory.
func TestTransformerMatchesGPT2Varlen(t *testing.T) {
	tr := loadTruth(t, "gpt2_varlen")
	w, err := workload.Lookup("transformer", map[string]string{
		"seq": "512,1024,256,768,1024,384,896,640", "batch": "8",
		"layers": "12", "hidden": "768", "heads": "12", "vocab": "50257",
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := Run(context.Background(), &replay.Plan{Ops: w.Ops}, []Setting{Defaults()}, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, want := rows[0].PeakReserved(), tr.MemoryStats["reserved_bytes.all.peak"]
	off := math.Abs(float64(got)/float64(want) - 1)
	t.Logf("transformer: peak reserved %d, PyTorch %d (%.2f%% off)", got, want, 100*off)
	if off > 0.15 {
		t.Errorf("transformer peak reserved %d is %.1f%% off PyTorch's %d", got, 100*off, want)
	}
}

// BenchmarkDefaultGrid sweeps gpt2_varlen's default grid on every core;
// the trace is parsed once, outside the timing.
func BenchmarkDefaultGrid(b *testing.B) {
	p := gpt2Plan(b)
	grid := DefaultGrid(false)
	for b.Loop() {
		if _, err := Run(context.Background(), p, grid, nil, runtime.GOMAXPROCS(0)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(grid)), "settings")
}

// BenchmarkDefaultGridCards is the capped grid on three cards.
func BenchmarkDefaultGridCards(b *testing.B) {
	p := gpt2Plan(b)
	grid := DefaultGrid(true)
	for i := range grid {
		grid[i].Fraction = 0.95
	}
	cards := []uint64{24 << 30, 40 << 30, 80 << 30}
	for b.Loop() {
		if _, err := Run(context.Background(), p, grid, cards, runtime.GOMAXPROCS(0)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(grid)*len(cards)), "replays")
}
