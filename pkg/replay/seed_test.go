package replay

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// A trace cut to its last n events, as a ring buffer of max_entries=n keeps
// it, replays to the snapshot's own final segments and blocks, with the
// peaks the whole run had over the kept window.
func TestTruncatedTraces(t *testing.T) {
	for _, name := range []string{"gpt2_varlen", "resnet50_fp32", "seed_frag"} {
		snap, err := trace.Open(filepath.Join(fixtures, name+".pickle"))
		if err != nil {
			t.Fatal(err)
		}
		all := snap.Traces[0]
		full := FromSnapshot(snap, 0)
		if full.Truncated || len(full.Seeds) != 0 {
			t.Fatalf("%s: the whole trace is seen as truncated (%d seeds)", name, len(full.Seeds))
		}
		for _, keep := range []int{len(all) * 9 / 10, len(all) / 2, len(all) / 7, 101} {
			t.Run(fmt.Sprintf("%s/last%d", name, keep), func(t *testing.T) {
				cut := *snap
				cut.Traces = [][]trace.Event{all[len(all)-keep:]}
				p := FromSnapshot(&cut, 0)
				if !p.Truncated {
					t.Fatal("not seen as truncated")
				}
				res, err := Run(p, Options{Check: true})
				if err != nil {
					t.Fatal(err)
				}
				compareSegments(t, res.Segments, snap.Segments)
				if d := res.Divergence; d != nil {
					t.Errorf("diverged: %s", d.Describe())
				}

				// the whole run's peaks over the same window
				a, err := alloc.New(alloc.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				start := windowStart(full, len(all)-keep, all)
				if _, err := a.Run(full.Ops[:start], 0, nil); err != nil {
					t.Fatal(err)
				}
				a.ResetPeak()
				if _, err := a.Run(full.Ops[start:], start, nil); err != nil {
					t.Fatal(err)
				}
				want := a.Stats()
				for _, k := range []string{"reserved_bytes.all.peak", "segment.all.peak", "allocated_bytes.all.current", "reserved_bytes.all.current"} {
					if g, w := res.Stats.Map()[k], want.Map()[k]; g != w {
						t.Errorf("%s = %d, the whole run had %d over the window", k, g, w)
					}
				}
				// allocated bytes at the start are rebuilt from requests, so
				// their peak may differ by a block's rounding
				g, w := res.Stats.AllocatedBytes[alloc.All].Peak, want.AllocatedBytes[alloc.All].Peak
				if d := g - w; d < -(4<<20) || d > 4<<20 { // small-pool slack cannot be told from a free neighbour
					t.Errorf("allocated peak %d, the whole run had %d over the window", g, w)
				}
			})
		}
	}
}

// windowStart is the index of the first op made from event first or later.
func windowStart(p *Plan, first int, all []trace.Event) int {
	// count the alloc/free_completed events before the window
	before := int32(0)
	for _, e := range all[:first] {
		if e.Action == trace.ActionAlloc || e.Action == trace.ActionFreeCompleted {
			before++
		}
	}
	for i, ev := range p.Event {
		if ev >= before {
			return i
		}
	}
	return len(p.Ops)
}

func compareSegments(t *testing.T, got []alloc.Segment, want []trace.Segment) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d segments, the snapshot has %d", len(got), len(want))
	}
	state := map[trace.BlockState]alloc.BlockState{
		trace.BlockInactive: alloc.BlockInactive, trace.BlockAllocated: alloc.BlockAllocated,
		trace.BlockPendingFree: alloc.BlockPendingFree,
	}
	bad := 0
	for i := range want {
		g, w := got[i], want[i]
		if g.Address != w.Address || g.TotalSize != w.TotalSize || len(g.Blocks) != len(w.Blocks) {
			bad++
			if bad < 4 {
				t.Errorf("segment %d: %#x+%d with %d blocks, snapshot %#x+%d with %d", i,
					g.Address, g.TotalSize, len(g.Blocks), w.Address, w.TotalSize, len(w.Blocks))
			}
			continue
		}
		for j := range w.Blocks {
			gb, wb := g.Blocks[j], w.Blocks[j]
			if gb.Address != wb.Address || gb.Size != wb.Size || gb.State != state[wb.State] {
				bad++
				if bad < 4 {
					t.Errorf("segment %#x block %d: %#x+%d %v, snapshot %#x+%d %v", g.Address, j,
						gb.Address, gb.Size, gb.State, wb.Address, wb.Size, wb.State)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d differences", bad)
	}
}

// Every policy replays a truncated trace from its seeded start under the
// checker: the seeded segments hold several live blocks each, which the
// trace then frees (nocache once freed a whole seeded segment per block,
// a double free).
func TestTruncatedTracesEveryPolicy(t *testing.T) {
	p := halfGPT2(t)
	multi := false
	for _, s := range p.Seeds {
		multi = multi || len(s.Blocks) > 1
	}
	if !p.Truncated || !multi {
		t.Fatalf("the cut trace has no seeded segment with several blocks (truncated %v)", p.Truncated)
	}
	for _, pol := range alloc.Policies() {
		t.Run(string(pol), func(t *testing.T) {
			conf := alloc.DefaultConfig()
			conf.Policy = pol
			res, err := Run(p, Options{Config: conf, Check: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.Done != len(p.Ops) {
				t.Fatalf("replayed %d of %d ops", res.Done, len(p.Ops))
			}
		})
	}
}

// A truncated trace whose rebuilt start state does not fit the card ends
// in an out-of-memory before its first op, under every policy: a report,
// not a failure (a sweep over small cards and fragcheck --must-fit rely on
// it).
func TestTruncatedStartDoesNotFit(t *testing.T) {
	p := halfGPT2(t)
	for _, pol := range alloc.Policies() {
		conf := alloc.DefaultConfig()
		conf.Policy = pol
		res, err := Run(p, Options{Config: conf, Device: alloc.Sim(1 << 30), DeviceTotal: 1 << 30, Check: true})
		if err != nil {
			t.Fatalf("%s: %v", pol, err)
		}
		if !res.SeedOOM || res.OOM == nil || res.OOMOp != 0 || res.Done != 0 {
			t.Errorf("%s: seed oom %v, oom %+v at op %d, %d ops done", pol, res.SeedOOM, res.OOM, res.OOMOp, res.Done)
		}
	}
}

// halfGPT2 plans the second half of gpt2_varlen, as a ring buffer of half
// its events keeps it: its start state is seeded.
func halfGPT2(t *testing.T) *Plan {
	t.Helper()
	snap, err := trace.Open(filepath.Join(fixtures, "gpt2_varlen.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	all := snap.Traces[0]
	cut := *snap
	cut.Traces = [][]trace.Event{all[len(all)/2:]}
	return FromSnapshot(&cut, 0)
}

// A full history recorded under expandable segments starts from nothing:
// its final ranges are pages the trace mapped, not a ring buffer's cut
// (the walk back does not undo pages). Cut to its last events, the same
// trace unmaps pages it never mapped and is truncated.
func TestExpandableFullHistoryNotTruncated(t *testing.T) {
	snap, err := trace.Open(filepath.Join("testdata", "heldout", "oom_then_empty_cache_expandable.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	if p := FromSnapshot(snap, 0); p.Truncated || p.Skipped[SkipExpandableSeed] != 0 {
		t.Fatalf("full history read as truncated (skipped %v)", p.Skipped)
	}
	all := snap.Traces[0]
	cut := *snap
	cut.Traces = [][]trace.Event{all[len(all)/2:]}
	if p := FromSnapshot(&cut, 0); !p.Truncated {
		t.Fatal("the trace's second half is not seen as truncated")
	}
}
