package htmlreport

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/pipeline"
)

// nodeDevice is what testdata/decode_explorer.js prints of one device:
// what explorer.js decoded from the page. A block is address, size,
// state, 1 when first of its segment, the segment's size, band or -1.
type nodeDevice struct {
	Device, Unit, Ops, Bands                        int
	Start, End, Rel, Size, Addr, Stream, Stack, Agg []int64
	Cat, Time                                       []int64
	Keys                                            []int
	KeyLists                                        [][][6]int64
	Pos, Del                                        []int64
	Ins                                             [][][6]int64
	States                                          map[string][][6]int64
}

// TestExplorerDecodedByPage writes pages and has node run explorer.js's
// own decoding on them (testdata/decode_explorer.js): what the page reads
// back must be the explorers the pages were made of, to the byte, for
// replays of fixtures as they are and moved to addresses far past 2^32,
// one of them to odd addresses (columns in bytes, not units of 512),
// several devices to a page, with every allocation a band and with most
// aggregated. Without node the test is skipped, unless
// GPUMEM_REQUIRE_NODE=1 (CI) makes that a failure.
func TestExplorerDecodedByPage(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("GPUMEM_REQUIRE_NODE") == "1" {
			t.Fatal("node is not on PATH, and GPUMEM_REQUIRE_NODE=1")
		}
		t.Skip("node is not on PATH")
	}
	ex := func(name string) *figures.Explorer {
		run, err := pipeline.Replay(context.Background(), pipeline.Source{Trace: "../../testdata/pytorch/" + name, Keep: pipeline.KeepDetail},
			pipeline.Settings{Points: 2000})
		if err != nil {
			t.Fatal(err)
		}
		d, err := run.Detail(nil)
		if err != nil || len(d.Explorers) == 0 {
			t.Fatalf("%s: %d explorers, %v", name, len(d.Explorers), err)
		}
		return d.Explorers[0]
	}
	seed, multi, graph := ex("seed_frag.pickle"), ex("multistream.pickle"), ex("graph_convnet.pickle")
	pool, compiled, oom := ex("mempool_single.pickle"), ex("compile_reduce_overhead.pickle"), ex("oom_survive_resnet.pickle")
	if len(oom.Keys) < 2 {
		t.Fatalf("oom_survive_resnet: %d keys, want some", len(oom.Keys))
	}
	for _, tc := range []struct {
		name     string
		exs      []*figures.Explorer
		maxBands int
		units    []int
	}{
		{"bands", []*figures.Explorer{seed, moved(multi, 1, 1<<50), moved(graph, 2, 1<<40+3), moved(oom, 3, 0)}, 0, []int{512, 512, 1, 512}},
		{"aggregated", []*figures.Explorer{moved(pool, 4, 1<<36), moved(compiled, 5, 5<<32+1000), moved(oom, 6, 1<<45+512*3+7)}, 7, []int{512, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := filepath.Join(t.TempDir(), "page.html")
			var b bytes.Buffer
			if err := Write(&b, &figures.Replay{Source: "x.pickle", Policy: "pytorch"},
				Extra{Detail: figures.Detail{Explorers: tc.exs}, MaxBands: tc.maxBands}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			const every = 7 // the whole block list after every 7th op
			cmd := exec.Command(node, "testdata/decode_explorer.js", page, strconv.Itoa(every))
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node: %v", err)
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<30)
			k := 0
			for ; sc.Scan(); k++ {
				var got nodeDevice
				if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
					t.Fatal(err)
				}
				if k >= len(tc.exs) {
					t.Fatalf("device %d decoded, of %d", k, len(tc.exs))
				}
				if got.Unit != tc.units[k] {
					t.Errorf("device %d: unit %d, want %d", k, got.Unit, tc.units[k])
				}
				checkDecoded(t, tc.exs[k], tc.maxBands, every, &got)
			}
			if k != len(tc.exs) {
				t.Fatalf("%d devices decoded, of %d", k, len(tc.exs))
			}
		})
	}
}

// moved is a copy of e as device dev, every address off bytes higher.
func moved(e *figures.Explorer, dev int, off uint64) *figures.Explorer {
	c := *e
	c.Device = dev
	c.Allocs = slices.Clone(e.Allocs)
	for i := range c.Allocs {
		c.Allocs[i].Address += off
	}
	blocks := func(bs []figures.BlockRec) []figures.BlockRec {
		bs = slices.Clone(bs)
		for i := range bs {
			bs[i].Address += off
		}
		return bs
	}
	c.Changes = slices.Clone(e.Changes)
	for i := range c.Changes {
		c.Changes[i].Ins = blocks(c.Changes[i].Ins)
	}
	c.Keys = slices.Clone(e.Keys)
	for i := range c.Keys {
		c.Keys[i].Blocks = blocks(c.Keys[i].Blocks)
	}
	return &c
}

// checkDecoded compares what the page decoded of device e with e.
func checkDecoded(t *testing.T, e *figures.Explorer, maxBands, every int, got *nodeDevice) {
	t.Helper()
	// the allocations with bands: all, or the largest maxBands (ties to the earliest)
	bandOf := make([]int, len(e.Allocs))
	var bands []int
	if maxBands > 0 && len(e.Allocs) > maxBands {
		byRank := make([]int, len(e.Allocs))
		for i := range byRank {
			byRank[i] = i
		}
		slices.SortStableFunc(byRank, func(a, b int) int { return cmp.Compare(e.Allocs[b].Size, e.Allocs[a].Size) })
		keep := make([]bool, len(e.Allocs))
		for _, i := range byRank[:maxBands] {
			keep[i] = true
		}
		for i := range e.Allocs {
			bandOf[i] = -1
			if keep[i] {
				bandOf[i] = len(bands)
				bands = append(bands, i)
			}
		}
	} else {
		for i := range e.Allocs {
			bandOf[i] = i
			bands = append(bands, i)
		}
	}
	dev := fmt.Sprintf("device %d", e.Device)
	if got.Device != e.Device || got.Ops != e.Ops || got.Bands != len(bands) {
		t.Fatalf("%s: device %d, %d ops, %d bands; want %d ops, %d bands", dev, got.Device, got.Ops, got.Bands, e.Ops, len(bands))
	}
	same := func(what string, got, want []int64) {
		t.Helper()
		if !slices.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s: %s differs at %d of %d/%d:\ngot  %v\nwant %v", dev, what, i, len(got), len(want),
				got[i:min(len(got), i+5)], want[i:min(len(want), i+5)])
		}
	}
	band := func(f func(a figures.Lifetime) int64) []int64 {
		out := make([]int64, len(bands))
		for j, i := range bands {
			out[j] = f(e.Allocs[i])
		}
		return out
	}
	same("start", got.Start, band(func(a figures.Lifetime) int64 { return int64(a.Start) }))
	same("end", got.End, band(func(a figures.Lifetime) int64 { return int64(a.End) }))
	same("released", got.Rel, band(func(a figures.Lifetime) int64 { return int64(a.Released) }))
	same("size", got.Size, band(func(a figures.Lifetime) int64 { return int64(a.Size) }))
	same("address", got.Addr, band(func(a figures.Lifetime) int64 { return int64(a.Address) }))
	same("stream", got.Stream, band(func(a figures.Lifetime) int64 { return int64(a.Stream) }))
	same("stack", got.Stack, band(func(a figures.Lifetime) int64 { return int64(a.Stack) }))
	if e.Categories != nil && len(bands) > 0 {
		same("category", got.Cat, band(func(a figures.Lifetime) int64 { return int64(a.Category) }))
	}
	if e.TimeUS != nil && e.Ops > 0 {
		same("time", got.Time, e.TimeUS[:e.Ops])
	}
	// the aggregate: the bytes of the allocations without a band live after each op
	agg := make([]int64, e.Ops+1)
	for i, a := range e.Allocs {
		if bandOf[i] < 0 {
			agg[a.Start] += int64(a.Size)
			agg[a.End] -= int64(a.Size)
		}
	}
	for i := 1; i < len(agg); i++ {
		agg[i] += agg[i-1]
	}
	same("aggregate", got.Agg, agg[:e.Ops])

	rec := func(bs []figures.BlockRec) [][6]int64 {
		out := make([][6]int64, len(bs))
		for i, b := range bs {
			out[i] = [6]int64{int64(b.Address), int64(b.Size), int64(b.State), 0, 0, -1}
			if b.First {
				out[i][3], out[i][4] = 1, int64(b.SegSize)
			}
			if b.Alloc >= 0 {
				out[i][5] = int64(bandOf[b.Alloc])
			}
		}
		return out
	}
	sameBlocks := func(what string, got, want [][6]int64) {
		t.Helper()
		if !slices.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s: %s: %d blocks, want %d; first difference at %d:\ngot  %v\nwant %v", dev, what, len(got), len(want), i,
				got[i:min(len(got), i+2)], want[i:min(len(want), i+2)])
		}
	}
	var keys []figures.Keyframe
	for _, k := range e.Keys {
		if k.Op <= e.Ops && e.Ops > 0 {
			keys = append(keys, k)
		}
	}
	if len(got.Keys) != len(keys) || len(got.KeyLists) != len(keys) {
		t.Fatalf("%s: %d keys, %d lists; want %d", dev, len(got.Keys), len(got.KeyLists), len(keys))
	}
	for j, k := range keys {
		if got.Keys[j] != k.Op {
			t.Errorf("%s: key %d after op %d, want %d", dev, j, got.Keys[j], k.Op)
		}
		sameBlocks(fmt.Sprintf("key %d", j), got.KeyLists[j], rec(k.Blocks))
	}
	if len(got.Pos) != e.Ops || len(got.Del) != e.Ops || len(got.Ins) != e.Ops {
		t.Fatalf("%s: %d/%d/%d changes, want %d", dev, len(got.Pos), len(got.Del), len(got.Ins), e.Ops)
	}
	for i, ch := range e.Changes[:e.Ops] {
		if got.Pos[i] != int64(ch.Pos) || got.Del[i] != int64(ch.Del) {
			t.Errorf("%s: op %d deletes %d blocks at %d, want %d at %d", dev, i, got.Del[i], got.Pos[i], ch.Del, ch.Pos)
		}
		sameBlocks(fmt.Sprintf("op %d's blocks", i), got.Ins[i], rec(ch.Ins))
	}
	n := 0
	for k := 0; k <= e.Ops; k++ {
		if k%every == 0 || k == e.Ops {
			n++
			sameBlocks(fmt.Sprintf("the blocks after %d ops", k), got.States[strconv.Itoa(k)], rec(blocksAt(e, k)))
		}
	}
	if n != len(got.States) {
		t.Errorf("%s: %d block lists, want %d", dev, len(got.States), n)
	}
}
