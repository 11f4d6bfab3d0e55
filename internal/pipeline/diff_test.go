package pipeline

import (
	"context"
	"testing"

	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// replaySnap replays device 0 of a snapshot held in memory.
func replaySnap(t *testing.T, name string, snap *trace.Snapshot) *Run {
	t.Helper()
	plan := replay.FromSnapshot(snap, 0)
	r, err := replayPlanned(context.Background(), name, 0, snap, plan, eventTimes(snap, 0), nil, Settings{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDiffRanksGrownSites grows the allocations of two sites of a trace
// (neither the largest at the peak) and checks that the diff ranks those
// sites first, grown, and the peak higher.
func TestDiffRanksGrownSites(t *testing.T) {
	path := pytorchFixture("gpt2_varlen_stacks.pickle")
	open := func() *trace.Snapshot {
		s, err := trace.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := replaySnap(t, path, open())
	sites := a.PeakSites(DefaultSiteDepth)
	if len(sites) < 6 {
		t.Fatalf("%d sites at the peak, want a trace with stacks", len(sites))
	}
	grow := map[string]bool{sites[3].Frames: true, sites[5].Frames: true}

	snap := open()
	grown := map[uint64]uint64{} // address → grown size, until freed
	for i := range snap.Traces[0] {
		e := &snap.Traces[0][i]
		switch e.Action {
		case trace.ActionAlloc:
			if grow[siteName(snap, e.Stack, DefaultSiteDepth)] {
				e.Size = (e.Size*3/2 + 511) &^ 511
				grown[e.Addr] = e.Size
			}
		case trace.ActionFreeRequested, trace.ActionFreeCompleted:
			if n, ok := grown[e.Addr]; ok {
				e.Size = n
				if e.Action == trace.ActionFreeCompleted {
					delete(grown, e.Addr)
				}
			}
		}
	}
	b := replaySnap(t, "grown", snap)
	d, err := DiffRuns(a, b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Sites) < 2 {
		t.Fatalf("%d sites", len(d.Sites))
	}
	for _, s := range d.Sites[:2] {
		if !grow[s.Frames] || s.Change() <= 0 {
			t.Errorf("top site %q changed by %d; want one of the grown sites, grown", s.Frames, s.Change())
		}
	}
	for _, s := range d.Sites[2:] {
		if grow[s.Frames] {
			t.Errorf("grown site %q ranked below an unchanged one", s.Frames)
		}
	}
	if len(d.Phases) == 0 || d.Phases[0].Count == 0 || d.Phases[0].PeakAllocatedA == 0 {
		t.Errorf("phases %+v, want the trace's annotated phases (optimizer steps)", d.Phases)
	}
	if d.Growth() <= 0 {
		t.Errorf("peak reserved grew by %v, want more", d.Growth())
	}

	// the same trace against itself: nothing changes, every site even
	same, err := DiffRuns(a, replaySnap(t, path, open()), 0)
	if err != nil || same.Growth() != 0 || same.Sites[0].Change() != 0 {
		t.Errorf("a trace against itself: growth %v, top change %d", same.Growth(), same.Sites[0].Change())
	}
	for _, p := range same.Phases {
		if p.PeakAllocatedA != p.PeakAllocatedB || p.PeakReservedA != p.PeakReservedB {
			t.Errorf("a trace against itself: phase %+v differs", p)
		}
	}
}
