package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// TestExplorerChanges rebuilds the block list from the explorer's per-op
// changes, as the page does, and checks it against a replay stopped at
// many operations (the state `gpumem replay --stop-at k` ends in),
// including an out-of-memory's release steps, and a replay that follows
// the recording's releases of cached memory (alloc.FlagReleasedBefore,
// the report's replay of oom_survive_resnet under --ignore-addresses).
func TestExplorerChanges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		card    uint64
		noAddrs bool
	}{
		{"gpt2_varlen_stacks.pickle", 0, false},
		{"multistream.pickle", 0, false},
		{"seed_frag.pickle", 0, false},
		{"gpt2_varlen.pickle", 16 << 30, false},
		{"oom_survive_resnet.pickle", 0, true},
	} {
		t.Run(fmt.Sprint(tc.name, tc.card, tc.noAddrs), func(t *testing.T) {
			st := setup.Setup{Card: tc.card, IgnoreAddresses: tc.noAddrs}
			run, err := Replay(context.Background(), Source{Trace: pytorchFixture(tc.name)}, Settings{Setup: st})
			if err != nil {
				t.Fatal(err)
			}
			d, err := run.Detail(nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.noAddrs && !run.plan.ReleasesBefore() {
				t.Fatal("the plan has no allocation after a recorded release: the case tests nothing")
			}
			if len(d.Explorers) != 1 {
				t.Fatalf("%d explorers, want 1", len(d.Explorers))
			}
			e := d.Explorers[0]
			if len(e.Changes) != e.Ops {
				t.Fatalf("%d changes for %d ops", len(e.Changes), e.Ops)
			}
			if (tc.card != 0) != (e.OOMOp >= 0) || (e.OOMOp >= 0 && e.Ops != e.OOMOp+1) {
				t.Fatalf("oom op %d, ops %d", e.OOMOp, e.Ops)
			}
			checks := map[int]bool{e.Ops: true, 1: true, e.PeakOp + 1: true}
			for k := 7; k < e.Ops; k += max(e.Ops/23, 1) {
				checks[k] = true
			}
			var blocks []figures.BlockRec
			keys := e.Keys
			for k := 1; k <= e.Ops; k++ {
				c := e.Changes[k-1]
				blocks = append(blocks[:c.Pos], append(append([]figures.BlockRec(nil), c.Ins...), blocks[int(c.Pos+c.Del):]...)...)
				if len(keys) > 0 && keys[0].Op == k {
					if got, want := describe(keys[0].Blocks, e), describe(blocks, e); got != want {
						t.Fatalf("key after %d ops:\n got %.400s\nwant %.400s", k, got, want)
					}
					keys = keys[1:]
				}
				if !checks[k] {
					continue
				}
				upto := *run.plan
				upto.Ops = run.plan.Ops[:k]
				res, err := replay.Run(&upto, run.opts)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := describe(blocks, e), describeSegs(res.Segments); got != want {
					t.Fatalf("after %d ops:\n got %.400s\nwant %.400s", k, got, want)
				}
			}
			if len(keys) > 0 || (len(e.Keys) == 0 && e.Ops >= 2*minKeyGap) {
				t.Errorf("%d keys, %d left unchecked", len(e.Keys), len(keys))
			}
			if tc.name == "gpt2_varlen_stacks.pickle" && (len(e.Spans) == 0 || len(e.Frames) == 0 || e.TimeUS == nil) {
				t.Errorf("spans %d, frames %d, times %v: the fixture records all three", len(e.Spans), len(e.Frames), e.TimeUS != nil)
			}
		})
	}
}

func describe(blocks []figures.BlockRec, e *figures.Explorer) string {
	s := ""
	for _, b := range blocks {
		if b.First {
			s += fmt.Sprintf(" | %#x:%d", b.Address, b.SegSize)
		}
		id := ""
		if b.Alloc >= 0 {
			id = fmt.Sprintf("@%d", e.Allocs[b.Alloc].Size)
		}
		s += fmt.Sprintf(" %#x+%d:%d%s", b.Address, b.Size, b.State, id)
	}
	return s
}

func describeSegs(segs []alloc.Segment) string {
	s := ""
	for _, seg := range segs {
		s += fmt.Sprintf(" | %#x:%d", seg.Address, seg.TotalSize)
		for _, b := range seg.Blocks {
			st := figures.StateFree
			switch {
			case b.State == alloc.BlockAllocated:
				st = figures.StateAllocated
			case b.State == alloc.BlockPendingFree:
				st = figures.StatePending
			case len(seg.Blocks) > 1:
				st = figures.StateSplit
			}
			id := ""
			if st >= figures.StateAllocated {
				id = fmt.Sprintf("@%d", b.RequestedSize)
			}
			s += fmt.Sprintf(" %#x+%d:%d%s", b.Address, b.Size, st, id)
		}
	}
	return s
}
