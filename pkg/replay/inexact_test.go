package replay

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// placementTally counts what placementAlike saw.
type placementTally struct {
	checked, settled, moved int // replays the check ran on; settled without a second; with keys moved
	beside                  int // whose second replay ran beside the first (twin)
	agreed                  int // not settled, but the watch of the other placement agreed to the end
}

// streamed is p with its ops in an op log, as a streamed plan keeps them
// (the placement check's second replay then runs beside the first).
func streamed(p *Plan) *Plan {
	q := *p
	ev, st := p.Event, p.Stack
	if ev == nil {
		ev = make([]int32, len(p.Ops))
		for i := range ev {
			ev[i] = int32(i)
		}
	}
	if st == nil {
		st = make([]int32, len(p.Ops))
		for i := range st {
			st[i] = -1
		}
	}
	var l opLog
	l.add(p.Ops, ev, st)
	q.log = &l
	q.Ops, q.Event, q.Stack = nil, nil, nil
	return &q
}

// placementAlike runs p under o as Run does, and again with the placement
// check's second replay forced, and fails when the two differ in any
// figure or named key. A replay that settled its placement without the
// second, or whose watch of the other placement agreed, is replayed on the
// other placement too: every statistic must agree, not only the verdict.
func placementAlike(t *testing.T, name string, p *Plan, o Options, n *placementTally) {
	t.Helper()
	got, err := Run(p, o)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	full, err := run(p.Ops, p.Event, p.Seeds, o, p)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	full.Pools = p.Pools
	full.Inexact = inexact(p, full)
	checks := !o.NoDivergence && full.Addressing != nil && full.Addressing.ModelledFrom >= 0 && full.OOM == nil
	if dev, ok := alloc.SimOtherPlacement(o.Device); checks && ok {
		if err := placementReplay(p, o, full, dev); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n.checked++
		if r, err := runBeside(p.Ops, p.Event, p.Seeds, o, p, newTwin(p, o), nil); err == nil && r.other != nil {
			n.beside++
		}
		settled := got.placementSettled && placementRoom(got.Stats)
		if settled {
			n.settled++
		} else if got.otherAgrees {
			n.agreed++
		}
		if settled || got.otherAgrees {
			oo := o
			oo.Device, oo.Points, oo.Check, oo.NoDivergence = dev, 0, false, true
			other, err := run(p.Ops, p.Event, p.Seeds, oo, p)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if other.OOM != nil || other.Stats != got.Stats {
				t.Errorf("%s: settled without a second replay (watch agreed %v), but the other placement gives oom %v, stats %+v, not %+v",
					name, got.otherAgrees, other.OOM, other.Stats, got.Stats)
			}
		}
		for _, why := range full.Inexact {
			if strings.Contains(why, "CUDA driver") {
				n.moved++
				break
			}
		}
	}
	if got.Stats != full.Stats || !reflect.DeepEqual(got.Inexact, full.Inexact) {
		t.Errorf("%s: inexact %v, the full check's %v", name, got.Inexact, full.Inexact)
	}
}

// Every fixture, under its recorded settings, with its addresses hidden and
// under what-if settings that leave the recording: the check with its
// shortcut names what the check with its second replay names.
// GPUMEM_FIXTURES names one more folder of snapshots.
func TestPlacementShortcutFixtures(t *testing.T) {
	var files []string
	dirs := []string{"testdata", fixtures}
	if d := os.Getenv("GPUMEM_FIXTURES"); d != "" {
		dirs = append(dirs, d)
	}
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(path, ".pickle") {
				files = append(files, path)
			}
			return nil
		})
	}
	if len(files) < 10 {
		t.Fatalf("%d fixtures found", len(files))
	}
	confs := []string{"", "max_split_size_mb:64", "roundup_power2_divisions:4", "expandable_segments:True"}
	var n placementTally
	for _, f := range files {
		snap, err := trace.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		for dev := range snap.Traces {
			plain := FromSnapshot(snap, dev)
			for k, conf := range confs {
				p := plain
				if k%2 == 1 {
					p = streamed(plain)
				}
				cfg := settingsConfig(snap.Settings)
				if conf != "" {
					if cfg, err = alloc.ParseConfig(conf); err != nil {
						t.Fatal(err)
					}
				}
				for _, d := range []alloc.Device{nil, alloc.SimModelled(0)} {
					name := fmt.Sprintf("%s dev %d %q modelled %v", filepath.Base(f), dev, conf, d != nil)
					placementAlike(t, name, p, Options{Config: cfg, Device: d, RecordedCap: true}, &n)
				}
			}
		}
	}
	t.Logf("%d fixtures: %d replays checked, %d settled without a second, %d by the watch, %d with keys moved, %d beside",
		len(files), n.checked, n.settled, n.agreed, n.moved, n.beside)
	if n.settled == 0 || n.checked == n.settled+n.agreed || n.beside == 0 {
		t.Errorf("the fixtures exercise one side of the shortcut only: %+v", n)
	}
}

// randomPlan is a trace of n operations whose addresses are hidden (no
// hints: every segment placed by the driver model), drawn so that free
// blocks of equal size in different segments are common: few sizes, two
// streams, empty_cache calls, private pools, survived OOMs.
func randomPlan(rng *rand.Rand, n int) *Plan {
	sizes := []uint64{512, 4096, 100 << 10, 1 << 20, 2 << 20, 3 << 20, 6 << 20, 8 << 20, 12 << 20, 20 << 20, 24 << 20, 40 << 20}
	sizes = sizes[:2+rng.IntN(len(sizes)-1)]
	var ops []alloc.Op
	type liveAlloc struct {
		id   uint32
		pend bool
	}
	var live []liveAlloc
	next, pool, pools, used := uint32(0), uint32(0), uint32(0), false
	for len(ops) < n {
		switch k := rng.IntN(100); {
		case k < 50 || len(live) == 0:
			op := alloc.Op{Kind: alloc.OpAlloc, ID: next, Size: sizes[rng.IntN(len(sizes))] - uint64(rng.IntN(2))*100,
				Stream: uint64(rng.IntN(2)), Pool: pool}
			if rng.IntN(20) == 0 {
				op.Flags = alloc.FlagRecordedOOM
			}
			ops = append(ops, op)
			used = used || pool != 0
			live = append(live, liveAlloc{id: next})
			next++
		case k < 92:
			i := rng.IntN(len(live))
			a := live[i]
			switch {
			case a.pend:
				ops = append(ops, alloc.Op{Kind: alloc.OpFreeComplete, ID: a.id})
			case rng.IntN(8) == 0:
				ops = append(ops, alloc.Op{Kind: alloc.OpFreeRequest, ID: a.id})
				live[i].pend = true
				continue
			default:
				ops = append(ops, alloc.Op{Kind: alloc.OpFree, ID: a.id})
			}
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		case k < 94:
			ops = append(ops, alloc.Op{Kind: alloc.OpEmptyCache})
		case k < 96 && pool == 0 && rng.IntN(2) == 0:
			pools++
			pool = pools
		case k < 96 && pool != 0 && used: // a pool is made by its first allocation
			ops = append(ops, alloc.Op{Kind: alloc.OpPoolRelease, Pool: pool})
			pool, used = 0, false
		}
	}
	return &Plan{Ops: ops}
}

// Random traces with hidden addresses, under random settings and card
// sizes: the check with its shortcut names what the check with its second
// replay names, and a replay it settles gives every statistic alike on
// the other placement.
func TestPlacementShortcutRandom(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 60
	}
	if s := os.Getenv("GPUMEM_PLACEMENT_SEEDS"); s != "" {
		fmt.Sscan(s, &seeds)
	}
	confs := []string{"", "", "", "max_split_size_mb:30", "roundup_power2_divisions:4",
		"garbage_collection_threshold:0.6", "expandable_segments:True"}
	// and three where equal blocks of one segment hide those of another
	// from the one after the lower bound (found at 30,000 seeds)
	list := []int{7627, 19561, 25921}
	for seed := range seeds {
		list = append(list, seed)
	}
	var n placementTally
	for _, seed := range list {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		size := 50 + rng.IntN(400)
		if rng.IntN(8) == 0 {
			size += runBatch // more than one batch
		}
		p := randomPlan(rng, size)
		if rng.IntN(2) == 0 {
			p = streamed(p)
		}
		conf := confs[rng.IntN(len(confs))]
		cfg, err := alloc.ParseConfig(conf)
		if err != nil {
			t.Fatal(err)
		}
		o := Options{Config: cfg, Check: true}
		switch rng.IntN(3) {
		case 0:
			o.Device = alloc.Sim(uint64(64+rng.IntN(192)) << 20)
		case 1:
			o.Device = alloc.Sim(256 << 20)
			o.MemoryFraction = 0.5 + rng.Float64()/2
		}
		placementAlike(t, fmt.Sprintf("seed %d %q", seed, conf), p, o, &n)
	}
	t.Logf("%d traces: %d checked, %d settled without a second replay, %d by the watch, %d with keys moved, %d beside",
		len(list), n.checked, n.settled, n.agreed, n.moved, n.beside)
	if n.settled == 0 || n.agreed == 0 || n.moved == 0 || n.beside == 0 {
		t.Errorf("the traces exercise one side of the shortcut only: %+v", n)
	}
}
