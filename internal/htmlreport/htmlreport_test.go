package htmlreport

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const (
	MiB = 1 << 20
	GiB = 1 << 30
)

// sample is a small replay that ended in a fragmentation OOM under a cap.
func sample() (*figures.Replay, Extra) {
	var tl []figures.Point
	for i := range 50 {
		al := int64(i%17) * 300 * MiB
		re := max(int64(i/10+1)*GiB, al+64*MiB)
		tl = append(tl, figures.Point{Op: i * 3, Allocated: al, Active: al + int64(i%3)*MiB, Reserved: re})
	}
	segs := []figures.SegmentMap{
		{Address: 0x7f0000000000, Size: 2 * GiB, Blocks: []figures.Block{
			{Size: 1 * GiB, State: figures.Allocated}, {Size: 512 * MiB, State: figures.Free}, {Size: 512 * MiB, State: figures.Allocated}}},
		{Address: 0x7f0080000000, Size: 20 * MiB, Blocks: []figures.Block{
			{Size: 2 * MiB, State: figures.Pending}, {Size: 18 * MiB, State: figures.Free}}},
		{Address: 0x7f0090000000, Size: 2 * MiB, Blocks: []figures.Block{{Size: 2 * MiB, State: figures.Allocated}}},
	}
	r := &figures.Replay{
		Source: "train<1>.pickle", Policy: "pytorch", Settings: "max_split_size_mb:128",
		DeviceMemory: 24 * GiB, Allowed: 6 * GiB, Ops: 150,
		Stats: alloc.Stats{
			ReservedBytes:  [3]alloc.Stat{{Current: 5 * GiB, Peak: 5 * GiB}},
			AllocatedBytes: [3]alloc.Stat{{Current: 4 * GiB, Peak: 4800 * MiB}},
			ActiveBytes:    [3]alloc.Stat{{Current: 4 * GiB}},
		},
		PeakOp: 120, PeakAllocatedAtPeakReserved: 4700 * MiB, LargestFree: 512 * MiB, LowerBound: 4500 * MiB,
		Timeline: tl,
		OOM: &figures.OOM{
			OpIndex: 149, Size: 1536 * MiB, Rounded: 1536 * MiB, AllocSize: 1536 * MiB,
			DeviceTotal: 24 * GiB, DeviceFree: 19 * GiB, Allowed: 6 * GiB,
			Allocated: 4 * GiB, Reserved: 5 * GiB, CachedFree: 1 * GiB, LargestFree: 512 * MiB,
			Segments: segs[:2], Frames: []string{"forward (model.py:12)", "train (train.py:40)"},
		},
	}
	return r, Extra{Detail: figures.Detail{
		PeakSegments: segs,
		Sites: []figures.Site{
			{Frames: "linear (nn.py:3)\nforward (model.py:10)", Bytes: 3 * GiB, Count: 2},
			{Frames: "", Bytes: 1 * GiB, Count: 7},
		},
	}}
}

func write(t testing.TB, r *figures.Replay, e Extra) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, r, e); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	r, e := sample()
	got := write(t, r, e)
	if again := write(t, r, e); again != got {
		t.Fatal("two writes of the same replay differ")
	}
	path := filepath.Join("testdata", "sample.golden.html")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("report differs from %s (run go test -update and review the diff)", path)
	}
}

func TestFigures(t *testing.T) {
	r, e := sample()
	got := write(t, r, e)
	for _, want := range []string{
		`data-peak-reserved="5368709120"`,
		`data-peak-op="120"`,
		`data-cap="6442450944"`,
		`data-oom-op="150"`,
		`data-points="50"`,
		`data-largest-free="536870912"`,
		`data-key="lower-bound" data-value="4718592000"`,
		`data-verdict="fragmentation OOM"`,
		`train&lt;1&gt;.pickle`, // escaped
		"(no stack recorded)",
		"largest free block 512.00 MiB (segment 0x7f0000000000)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(got, "train<1>") {
		t.Error("the source name is not escaped")
	}
	if strings.Contains(got, "http://") && !strings.Contains(got, `"http://www.w3.org/2000/svg"`) || strings.Contains(got, "<script src") || strings.Contains(got, "<link") {
		t.Error("the report refers to something outside itself")
	}
	// one rectangle per block: 6 at the peak, 5 at the OOM
	if n := strings.Count(got, `data-state="`); n != 11 {
		t.Errorf("%d block rectangles, want 11", n)
	}
	if n := strings.Count(got, `data-largest="true"`); n != 2 {
		t.Errorf("%d largest free blocks marked, want 2 (one per map)", n)
	}
	if n := strings.Count(got, `class="site"`); n != 2 {
		t.Errorf("%d sites, want 2", n)
	}
}

func TestCompleted(t *testing.T) {
	r, e := sample()
	r.OOM, r.Allowed, r.DeviceMemory = nil, 0, 0
	e.Sites = nil
	got := write(t, r, e)
	for _, absent := range []string{`id="oom"`, `data-oom-op`, `id="segmap-oom"`, `id="sites"`, `class="hl `} {
		if strings.Contains(got, absent) {
			t.Errorf("completed replay without cap or stacks shows %q", absent)
		}
	}
	if !strings.Contains(got, `id="segmap-peak"`) {
		t.Error("no segment map at the peak")
	}
}

func TestNoTimeline(t *testing.T) {
	r, _ := sample()
	r.Timeline, r.OOM = nil, nil
	got := write(t, r, Extra{})
	if strings.Contains(got, `id="timeline"`) || !strings.Contains(got, "const DATA = null;") {
		t.Error("a replay without a timeline drew one")
	}
}

func TestErrors(t *testing.T) {
	r, _ := sample()
	for name, err := range map[string]error{
		"nil replay":   Write(new(bytes.Buffer), nil, Extra{}),
		"frag too few": Write(new(bytes.Buffer), r, Extra{Frag: []float64{0.5}}),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestFragGiven checks that given fragmentation figures are the ones drawn.
func TestFragGiven(t *testing.T) {
	r, _ := sample()
	frag := make([]float64, len(r.Timeline))
	for i := range frag {
		frag[i] = 0.25
	}
	frag[3] = math.NaN()
	got := write(t, r, Extra{Frag: frag})
	m := regexp.MustCompile(`"fr":\[([^\]]*)\]`).FindStringSubmatch(got)
	if m == nil {
		t.Fatal("no fragmentation data")
	}
	vals := strings.Split(m[1], ",")
	if len(vals) != len(frag) || vals[0] != "0.2500" || vals[3] != "null" {
		t.Errorf("fragmentation data %.60s…, want 0.2500 each and null at 3", m[1])
	}
	// the line breaks at the NaN: two pieces
	d := regexp.MustCompile(`d="([^"]*)" data-series="fragmentation"`).FindStringSubmatch(got)
	if d == nil || strings.Count(d[1], "M") != 2 {
		t.Errorf("fragmentation path %q, want two pieces", d)
	}
}

// walk is a timeline of n points whose memory wanders, with one spike
// and one dip planted at known places.
func walk(n int) []figures.Point {
	rng := rand.New(rand.NewPCG(1, 2))
	pts := make([]figures.Point, n)
	var al int64 = 8 * GiB
	for i := range pts {
		al = min(max(al+rng.Int64N(64*MiB)-32*MiB, 0), 16*GiB)
		pts[i] = figures.Point{Op: i, Allocated: al, Active: al + rng.Int64N(MiB), Reserved: 17*GiB + int64(i/1000)*MiB}
	}
	pts[123457].Allocated = 40 * GiB
	pts[876543].Allocated = -1
	return pts
}

func TestDownsample(t *testing.T) {
	pts := walk(1_000_000)
	thin := Downsample(pts, MaxPoints)
	if len(thin) > MaxPoints || len(thin) < MaxPoints/4 {
		t.Fatalf("%d points, want at most %d and not far fewer", len(thin), MaxPoints)
	}
	if thin[0] != pts[0] || thin[len(thin)-1] != pts[len(pts)-1] {
		t.Error("the ends are lost")
	}
	for i := 1; i < len(thin); i++ {
		if thin[i].Op <= thin[i-1].Op {
			t.Fatalf("ops out of order at %d: %d after %d", i, thin[i].Op, thin[i-1].Op)
		}
	}
	has := func(op int) bool {
		for _, p := range thin {
			if p.Op == op {
				return true
			}
		}
		return false
	}
	if !has(123457) || !has(876543) {
		t.Error("the spike or the dip is lost")
	}
	// every series keeps its extremes
	for name, v := range map[string]func(figures.Point) int64{
		"allocated": func(p figures.Point) int64 { return p.Allocated },
		"active":    func(p figures.Point) int64 { return p.Active },
		"reserved":  func(p figures.Point) int64 { return p.Reserved },
	} {
		lo, hi := extremes(pts, v)
		tlo, thi := extremes(thin, v)
		if lo != tlo || hi != thi {
			t.Errorf("%s: extremes %d..%d became %d..%d", name, lo, hi, tlo, thi)
		}
	}
	if short := pts[:MaxPoints]; len(Downsample(short, MaxPoints)) != MaxPoints {
		t.Error("a timeline within the limit was thinned")
	}
}

func extremes(pts []figures.Point, v func(figures.Point) int64) (lo, hi int64) {
	lo, hi = math.MaxInt64, math.MinInt64
	for _, p := range pts {
		lo, hi = min(lo, v(p)), max(hi, v(p))
	}
	return lo, hi
}

// TestLargeTimeline checks that a million-point timeline makes a small
// report, drawn from at most MaxPoints points. With HTMLREPORT_LARGE set
// it also writes the report there, for test/html_check.sh to time in a
// browser.
func TestLargeTimeline(t *testing.T) {
	r, _ := sample()
	r.OOM = nil
	r.Timeline = walk(1_000_000)
	start := time.Now()
	got := write(t, r, Extra{})
	t.Logf("%d bytes in %v", len(got), time.Since(start))
	if path := os.Getenv("HTMLREPORT_LARGE"); path != "" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) > 1<<20 {
		t.Errorf("report of %d bytes, want under 1 MiB", len(got))
	}
	m := regexp.MustCompile(`id="timeline"[^>]* data-points="(\d+)"`).FindStringSubmatch(got)
	if m == nil {
		t.Fatal("no timeline")
	}
	if n, _ := strconv.Atoi(m[1]); n > MaxPoints || n < 100 {
		t.Errorf("timeline of %d points, want at most %d", n, MaxPoints)
	}
	if !strings.Contains(got, `"x1":999999}`) {
		t.Error("the zoom range does not reach the last operation")
	}
}

// TestManyBlocks checks that a map with more blocks than maxRects merges
// neighbours of one state, keeps every byte and the largest free block.
func TestManyBlocks(t *testing.T) {
	var seg figures.SegmentMap
	seg.Size = 0
	for i := range 3 * maxRects {
		st := figures.Allocated
		if i%7 == 6 {
			st = figures.Free
		}
		size := uint64(512 * (1 + i%5))
		if i == 5000 {
			st, size = figures.Free, 1*MiB // the largest free block, next to an allocated one
		}
		seg.Blocks = append(seg.Blocks, figures.Block{Size: size, State: st})
		seg.Size += size
	}
	m := newSegMap("m", "t", "n", []figures.SegmentMap{seg, seg})
	if m.Rects > 2*maxRects || m.Rects < 10 {
		t.Errorf("%d rectangles for %d blocks", m.Rects, m.Blocks)
	}
	if m.Largest == nil || m.Largest.Size != MiB || m.Largest.Count != 1 {
		t.Errorf("largest free block %+v, want a lone 1 MiB block", m.Largest)
	}
	for _, s := range m.Segs {
		var total uint64
		n := 0
		for _, b := range s.Blocks {
			total += b.Size
			n += b.Count
		}
		if total != seg.Size || n != len(seg.Blocks) {
			t.Errorf("segment %s: %d bytes in %d blocks, want %d in %d", s.Address, total, n, seg.Size, len(seg.Blocks))
		}
	}
}

func TestByteAxis(t *testing.T) {
	for _, tt := range []struct {
		top    int64
		labels string
	}{
		{19302187008, "0 GiB 5 GiB 10 GiB 15 GiB 20 GiB"},
		{3 * GiB / 2, "0 GiB 0.5 GiB 1 GiB 1.5 GiB"},
		{700 * MiB, "0 MiB 200 MiB 400 MiB 600 MiB 800 MiB"},
		{3, "0 B 1 B 2 B 3 B"},
		{0, "0 B 1 B"},
	} {
		c := &chart{PlotY: 10, PlotH: 100}
		c.byteAxis(tt.top)
		var ls []string
		for _, tk := range c.YTicks {
			ls = append(ls, tk.Label)
		}
		if got := strings.Join(ls, " "); got != tt.labels {
			t.Errorf("byteAxis(%d) = %q, want %q", tt.top, got, tt.labels)
		}
		if c.YTop < float64(tt.top) {
			t.Errorf("byteAxis(%d): top %v is below the data", tt.top, c.YTop)
		}
	}
}

func BenchmarkWriteMillion(b *testing.B) {
	r, _ := sample()
	r.Timeline = walk(1_000_000)
	for b.Loop() {
		if err := Write(new(bytes.Buffer), r, Extra{}); err != nil {
			b.Fatal(err)
		}
	}
}

// The explorer's segment map opens at the peak: the page then shows the
// peak's segments there alone, not again as a static map under another
// legend; the map of the out-of-memory's holes stays.
func TestPeakMapOnce(t *testing.T) {
	r, e := sample()
	e.Explorers = []*figures.Explorer{testExplorer()}
	got := write(t, r, e)
	if strings.Contains(got, `id="segmap-peak"`) || strings.Count(got, `id="segmap-live"`) != 1 {
		t.Error("the peak's segments are not shown once, in the explorer")
	}
	if !strings.Contains(got, `id="segmap-oom"`) {
		t.Error("the out-of-memory's map is gone")
	}
}
