package htmlreport

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
)

// unpack reads one packed column back, as explorer.js does.
func unpack(t *testing.T, d exDevice, bin []byte, name string, delta bool) []int64 {
	t.Helper()
	c, ok := d.Cols[name]
	if !ok {
		t.Fatalf("no column %q", name)
	}
	var out []int64
	var u uint64
	var shift uint
	var last int64
	for _, x := range bin[c[0] : c[0]+c[1]] {
		u |= uint64(x&127) << shift
		if x&128 != 0 {
			shift += 7
			continue
		}
		v := int64(u>>1) ^ -int64(u&1)
		if delta {
			last += v
			v = last
		}
		out = append(out, v)
		u, shift = 0, 0
	}
	if c[2] >= 0 && len(out) != c[2] { // -1: as many as there are
		t.Fatalf("column %s: %d values, says %d", name, len(out), c[2])
	}
	return out
}

func testExplorer() *figures.Explorer {
	e := &figures.Explorer{Ops: 6, PeakOp: 3, OOMOp: -1, TimeUS: []int64{10, 20, 20, 35, 50, 51},
		Stacks: [][]int32{{0, 1}}, Frames: []string{"f </script><b>x</b> (a.py:1)", "g (torch/x.py:2)"}, User: []bool{true, false},
		Spans: []figures.Span{{Name: "step", Start: 1, End: 4}}}
	sizes := []uint64{512, 3 << 20, 1000, 7 << 30}
	for i, s := range sizes {
		e.Allocs = append(e.Allocs, figures.Lifetime{Start: int32(i), End: int32(i + 2), Released: int32(i + 2), Size: s,
			Address: 0x7f0000000000 + uint64(i)<<21, Stream: 7, Stack: int32(i%2) - 1})
	}
	for range e.Ops {
		e.Changes = append(e.Changes, figures.Change{})
	}
	e.Changes[0] = figures.Change{Ins: []figures.BlockRec{
		{Address: 0x7f0000000000, Size: 512, State: figures.StateAllocated, First: true, SegSize: 2 << 20, Alloc: 0},
		{Address: 0x7f0000000200, Size: 2<<20 - 512, State: figures.StateSplit, Alloc: -1}}}
	return e
}

// decodeExplorer reads back explorerData's output for one device: its
// description, its deflated columns and what they inflate to (err: they do
// not inflate).
func decodeExplorer(t *testing.T, js template.JS, bs [][][]byte) (d exDevice, z, bin []byte, err error) {
	t.Helper()
	var ds []exDevice
	var bins []string
	if err := json.Unmarshal([]byte(js), &ds); err != nil || len(ds) != 1 {
		t.Fatalf("devices %.100s: %v", js, err)
	}
	var jsBin bytes.Buffer
	if err := writeBins(&jsBin, bs); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(jsBin.Bytes(), &bins); err != nil || len(bins) != 1 {
		t.Fatalf("columns %.100s: %v", jsBin.String(), err)
	}
	z, _ = base64.StdEncoding.DecodeString(bins[0])
	bin, err = io.ReadAll(flate.NewReader(bytes.NewReader(z)))
	return ds[0], z, bin, err
}

// TestExplorerData packs an explorer and reads it back: the columns hold
// the figures given, a frame's "</script>" cannot end the script element,
// and above the band limit the largest allocations keep their bands.
func TestExplorerData(t *testing.T) {
	js, jsBin, err := explorerData([]*figures.Explorer{testExplorer()}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "</script") || strings.Contains(string(js), "<b>") {
		t.Fatalf("raw markup in the script element: %.200s", js)
	}
	d, _, bin, err := decodeExplorer(t, js, jsBin)
	if err != nil {
		t.Fatal(err)
	}
	if d.Bands != 4 || d.Aggregated != 0 || d.Frames[0] != "f </script><b>x</b> (a.py:1)" || d.Unit != 512 {
		t.Errorf("bands %d, aggregated %d, frame %q, unit %d", d.Bands, d.Aggregated, d.Frames[0], d.Unit)
	}
	if got := unpack(t, d, bin, "size", false); got[2] != 1000 || got[3] != 7<<30 {
		t.Errorf("sizes %v", got)
	}
	if got := unpack(t, d, bin, "addr", true); got[3] != (0x7f0000000000+3<<21)/512 { // in units
		t.Errorf("addresses %x", got)
	}
	if got := unpack(t, d, bin, "time", true); got[5] != 51 {
		t.Errorf("times %v", got)
	}
	// the first change: an allocated block (band 0, one back from the one
	// band made so far; its size less its allocation's, in units) and the
	// rest of its segment
	if got := unpack(t, d, bin, "bsize", false); len(got) != 2 || got[0] != 0 || got[1] != (2<<20-512)/512 {
		t.Errorf("block sizes %v", got)
	}
	// 8 × band + state, a segment's first block adding 4 to its state
	if got := unpack(t, d, bin, "bstate", false); len(got) != 2 || got[0] != 1<<3|int64(figures.StateAllocated)|4 || got[1] != int64(figures.StateSplit) {
		t.Errorf("block states and bands %v", got)
	}
	if got := unpack(t, d, bin, "bseg", false); got[0] != 0x7f0000000000/512 || got[1] != (2<<20)/512 {
		t.Errorf("segment records %x", got)
	}

	js, jsBin, err = explorerData([]*figures.Explorer{testExplorer()}, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	d, _, bin, _ = decodeExplorer(t, js, jsBin)
	if got := unpack(t, d, bin, "size", false); d.Bands != 2 || d.Aggregated != 2 || len(got) != 2 || got[0] != 3<<20 || got[1] != 7<<30 {
		t.Errorf("limit 2: bands %d (%v), aggregated %d", d.Bands, got, d.Aggregated)
	}
	// the aggregate: +512 at op 0, +1000 at 2, -512 at 2, -1000 at 4
	if got := unpack(t, d, bin, "agg", false); len(got) != 6 || got[0] != 512 || got[2] != 488 || got[4] != -1000 {
		t.Errorf("aggregate %v", got)
	}
	// the block of an aggregated allocation names no band
	if got := unpack(t, d, bin, "bstate", false); got[0]>>3 != 0 {
		t.Errorf("block bands %v", got)
	}
}

// TestExplorerBlockColumns reads back the columns of the block list's
// changes and keys: each op's deletes and inserts as one value (inserts
// past 2 in their own column), and a key's bands counted from the first.
func TestExplorerBlockColumns(t *testing.T) {
	e := testExplorer()
	seg := uint64(0x7f0000000000)
	four := make([]figures.BlockRec, 4)
	for i := range four {
		four[i] = figures.BlockRec{Address: seg + uint64(i)<<9, Size: 512, State: figures.StateAllocated, Alloc: int32(i % 2)}
	}
	four[0].First, four[0].SegSize = true, 2<<20
	e.Changes[2] = figures.Change{Pos: 0, Del: 2, Ins: four}
	e.Changes[4] = figures.Change{Pos: 3, Del: 1}
	e.Keys = []figures.Keyframe{{Op: 3, Blocks: four}}
	js, jsBin, err := explorerData([]*figures.Explorer{e}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	d, _, bin, err := decodeExplorer(t, js, jsBin)
	if err != nil {
		t.Fatal(err)
	}
	if got := unpack(t, d, bin, "insdel", false); !slices.Equal(got, []int64{2, 0, 2<<2 | 3, 0, 1 << 2, 0}) {
		t.Errorf("deletes and inserts %v", got)
	}
	if got := unpack(t, d, bin, "insx", false); !slices.Equal(got, []int64{1}) {
		t.Errorf("inserts past 3 %v", got)
	}
	// op 2's blocks: bands 0 and 1 of the 3 made by then, counted back
	st := unpack(t, d, bin, "bstate", false)
	if got := st[2:]; !slices.Equal(got, []int64{3<<3 | 6, 2<<3 | 2, 3<<3 | 2, 2<<3 | 2}) {
		t.Errorf("op 2's blocks' states and bands %v", got)
	}
	// a used block's size less its allocation's (512 B, 3 MiB), in units
	if got := unpack(t, d, bin, "bsize", false)[2:]; !slices.Equal(got, []int64{0, 1 - 6144, 0, 1 - 6144}) {
		t.Errorf("op 2's blocks' sizes %v", got)
	}
	// the key's: 1 + the band
	if got := unpack(t, d, bin, "kstate", false); !slices.Equal(got, []int64{1<<3 | 6, 2<<3 | 2, 1<<3 | 2, 2<<3 | 2}) {
		t.Errorf("the key's states and bands %v", got)
	}
}

// previewPixels reads a preview's runs back, as explorer.js does: each
// column a column back that it copies from, then runs of its rows.
func previewPixels(vals []int64) []int64 {
	var img []int64
	for i := 0; i < len(vals); {
		from, end := int(vals[i])*previewH, len(img)+previewH
		for i++; len(img) < end && i+1 < len(vals); i += 2 {
			for range vals[i+1] {
				v := vals[i] - 1
				if v < 0 {
					v = img[len(img)-from]
				}
				img = append(img, v)
			}
		}
	}
	return img
}

// TestPreviewRuns writes pixels as previewRuns does and reads them back:
// the same pixels, and a column like one before it refers to it.
func TestPreviewRuns(t *testing.T) {
	img := make([]int32, 5*previewH)
	for c := range 5 {
		for r := range previewH {
			img[c*previewH+r] = int32((r / 7 * (1 + c%2)) % 5)
		}
	}
	img[3*previewH+100] = 9
	runs := previewRuns(img, &column{})
	vals := unpack(t, exDevice{Cols: map[string][3]int{"p": {0, len(runs.b), -1}}}, runs.b, "p", false)
	got := previewPixels(vals)
	if len(got) != len(img) {
		t.Fatalf("%d pixels, want %d", len(got), len(img))
	}
	for i := range img {
		if got[i] != int64(img[i]) {
			t.Fatalf("pixel %d: %d, want %d", i, got[i], img[i])
		}
	}
	// column 2 copies column 0; 3 copies 1 but for one pixel (three runs)
	if vals[0] != 0 {
		t.Errorf("column 0 refers back %d", vals[0])
	}
	k, col := 0, 0
	for i := 0; i < len(vals); col++ {
		from, n, rows := vals[i], 0, int64(0)
		for i++; rows < previewH; i += 2 {
			rows += vals[i+1]
			n++
		}
		if col == 2 && (from != 2 || n != 1) || col == 3 && (from != 2 || n != 3) {
			t.Errorf("column %d: refers %d back in %d runs", col, from, n)
		}
		k++
	}
	if k != 5 {
		t.Errorf("%d columns", k)
	}
}

// TestExplorerFirstView checks what the page draws before its columns are
// decoded: the preview covers the whole image, shows at the op with the
// 7 GiB allocation that allocation's site from the top row down and
// nothing where nothing is live, and the first segment map is the block
// list after the peak's op.
func TestExplorerFirstView(t *testing.T) {
	js, _, err := explorerData([]*figures.Explorer{testExplorer()}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ds []exDevice
	if err := json.Unmarshal([]byte(js), &ds); err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	runs, _ := base64.StdEncoding.DecodeString(d.Preview)
	vals := unpack(t, exDevice{Cols: map[string][3]int{"p": {0, len(runs), -1}}}, runs, "p", false)
	img := previewPixels(vals) // column after column
	if d.PreviewW != previewW || d.PreviewH != previewH || len(img) != previewW*previewH {
		t.Fatalf("preview %dx%d with %d pixels", d.PreviewW, d.PreviewH, len(img))
	}
	at := func(op, row int) int64 { return img[(op*previewW/6+previewW/12)*previewH+row] }
	// op 3: the 7 GiB block (stack 0, palette 3) under the top; op 5: nothing
	if at(3, 0) != 3 || at(3, previewH/2) != 3 || at(5, 0) != 0 || at(5, previewH-1) != 0 {
		t.Errorf("op 3 rows 0 and %d: %d %d; op 5: %d %d", previewH/2, at(3, 0), at(3, previewH/2), at(5, 0), at(5, previewH-1))
	}
	want := [][6]int64{{0x7f0000000000, 512, int64(figures.StateAllocated), 1, 2 << 20, 0}, {0x7f0000000200, 2<<20 - 512, int64(figures.StateSplit), 0, 0, -1}}
	if d.First.Op != 4 || !slices.Equal(d.First.Blocks, want) {
		t.Errorf("first map after op %d: %v", d.First.Op, d.First.Blocks)
	}
}

// Columns that grew past spillAt are deflated as they grow, each apart;
// the parts, one after the other, still inflate to the columns' bytes one
// after the other, as the page reads them.
func TestColumnsDeflatedAsTheyGrow(t *testing.T) {
	var cols [4]column
	var want []byte
	x := uint64(1)
	for k := range cols {
		n := []int{10, 3 * spillAt / 2, 7, spillAt + 5}[k] // small, spilled once, small, spilled
		for range n {
			x = x*6364136223846793005 + 1442695040888963407
			cols[k].add(int64(x>>60)-8, k%2 == 1)
		}
	}
	ptrs := make([]*column, len(cols))
	for k := range cols {
		ptrs[k] = &cols[k]
		if (k%2 == 1) != (cols[k].zs != nil) {
			t.Fatalf("column %d: spilled %v", k, cols[k].zs != nil)
		}
	}
	// what the columns hold, written out again without spilling
	for k := range cols {
		var c column
		c.last = 0
		x := uint64(1)
		for j := 0; j <= k; j++ {
			n := []int{10, 3 * spillAt / 2, 7, spillAt + 5}[j]
			for range n {
				x = x*6364136223846793005 + 1442695040888963407
				if j == k {
					d := int64(x>>60) - 8
					if k%2 == 1 {
						d, c.last = d-c.last, d
					}
					u := uint64(d<<1) ^ uint64(d>>63)
					for u >= 0x80 {
						want = append(want, byte(u)|0x80)
						u >>= 7
					}
					want = append(want, byte(u))
				}
			}
		}
	}
	got, err := io.ReadAll(flate.NewReader(bytes.NewReader(bytes.Join(deflateColumns(ptrs), nil))))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("inflated %d bytes, want %d", len(got), len(want))
	}
}

// bigExplorer is an explorer whose columns run to some kilobytes: n
// allocations, one an op, each freed a few ops later, with a change
// of a block or two per op and a key list now and then.
func bigExplorer(n int) *figures.Explorer {
	e := &figures.Explorer{Ops: n, PeakOp: n / 2, OOMOp: -1, Stacks: [][]int32{{0}, {1}}, Frames: []string{"f (a.py:1)", "g (b.py:2)"},
		User: []bool{true, true}}
	x := uint64(7)
	rnd := func(k uint64) uint64 {
		x = x*6364136223846793005 + 1442695040888963407
		return (x >> 33) % k
	}
	var list []figures.BlockRec
	for i := range n {
		size := (1 + rnd(64)) * 512
		if rnd(4) == 0 {
			size = (1 + rnd(8)) << 20
		}
		addr := 0x7f0000000000 + uint64(i%97)<<21
		end := int32(min(n, i+1+int(rnd(9))))
		e.Allocs = append(e.Allocs, figures.Lifetime{Start: int32(i), End: end, Released: end, Size: size,
			Address: addr, Stream: rnd(2), Stack: int32(rnd(2))})
		ch := figures.Change{Ins: []figures.BlockRec{
			{Address: addr, Size: size, State: figures.StateAllocated, First: true, SegSize: 2 << 20, Alloc: int32(i)}}}
		if rnd(2) == 0 {
			ch.Ins = append(ch.Ins, figures.BlockRec{Address: addr + size, Size: 2<<20 - size, State: figures.StateSplit, Alloc: -1})
		}
		ch.Pos = int32(rnd(uint64(len(list) + 1)))
		if len(list) > 200 { // the list stays about this long
			ch.Del = int32(min(len(ch.Ins), len(list)-int(ch.Pos)))
		}
		list = slices.Replace(list, int(ch.Pos), int(ch.Pos+ch.Del), ch.Ins...)
		e.Changes = append(e.Changes, ch)
		e.TimeUS = append(e.TimeUS, int64(i)*3+int64(rnd(3)))
		if i%500 == 499 {
			e.Keys = append(e.Keys, figures.Keyframe{Op: i + 1, Blocks: slices.Clone(list)})
		}
	}
	return e
}

// The page's columns inflate to the same bytes whether they were deflated
// in one go or part by part as they grew (each part reading back into the
// last), and those bytes are the explorer's figures.
func TestExplorerSpilledColumnsInflate(t *testing.T) {
	e := bigExplorer(20000)
	page := func(spill int) (exDevice, []byte, []byte) {
		defer func(s int) { spillAt = s }(spillAt)
		spillAt = spill
		js, jsBin, err := explorerData([]*figures.Explorer{e}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		d, z, bin, err := decodeExplorer(t, js, jsBin)
		if err != nil {
			t.Fatalf("spilling at %d: %v", spill, err)
		}
		return d, z, bin
	}
	// the parts at level, as one stream is; at the columns' own levels
	// (the packer's), they inflate to the same bytes
	defer func() { columnLevels = true }()
	columnLevels = false
	d, z, bin := page(1 << 30) // one stream
	if len(bin) < 100<<10 {
		t.Fatalf("only %d bytes of columns", len(bin))
	}
	for _, spill := range []int{4 << 10, 40 << 10, 64 << 10} { // parts shorter and longer than the window
		ds, zs, bins := page(spill)
		// each part reads back into the last: 4 KB parts deflate within
		// 1% of one stream (which, unlike them, mixes the columns in its
		// blocks). Longer parts refer back less (a window, half of one
		// stream's reach), and each part's blocks take tables of their
		// own: within 4%.
		if limit := len(z) + len(z)/100*min(4, 1+3*(spill>>12-1)); len(zs) > limit {
			t.Errorf("spilling at %d: %d bytes deflated, one stream %d", spill, len(zs), len(z))
		}
		if bytes.Equal(z, zs) {
			t.Errorf("spilling at %d: the same deflated bytes as one stream", spill)
		}
		columnLevels = true
		if _, _, binl := page(spill); !bytes.Equal(bin, binl) {
			t.Errorf("spilling at %d, each column at its level: inflated %d bytes, not the %d of one stream", spill, len(binl), len(bin))
		}
		columnLevels = false
		if !bytes.Equal(bin, bins) {
			t.Errorf("spilling at %d: inflated %d bytes, not the %d of one stream", spill, len(bins), len(bin))
		}
		if len(ds.Cols) != len(d.Cols) {
			t.Fatalf("spilling at %d: columns %v, want %v", spill, ds.Cols, d.Cols)
		}
		for k, c := range d.Cols {
			if ds.Cols[k] != c {
				t.Errorf("spilling at %d: column %s at %v, want %v", spill, k, ds.Cols[k], c)
			}
		}
		// back from the bytes to the figures
		sizes, times, bsize := unpack(t, ds, bins, "size", false), unpack(t, ds, bins, "time", true), unpack(t, ds, bins, "bsize", false)
		for i, a := range e.Allocs {
			if sizes[i] != int64(a.Size) || times[i] != e.TimeUS[i] {
				t.Fatalf("spilling at %d: allocation %d: size %d time %d, want %d %d", spill, i, sizes[i], times[i], a.Size, e.TimeUS[i])
			}
		}
		k := 0
		for _, ch := range e.Changes {
			for _, b := range ch.Ins {
				want := int64(b.Size / 512) // less its allocation's, every one a band
				if b.Alloc >= 0 {
					want -= int64((e.Allocs[b.Alloc].Size + 511) / 512)
				}
				if bsize[k] != want {
					t.Fatalf("spilling at %d: block %d: %d units, want %d", spill, k, bsize[k], want)
				}
				k++
			}
		}
		if k != len(bsize) {
			t.Errorf("spilling at %d: %d blocks, want %d", spill, len(bsize), k)
		}
	}
}
