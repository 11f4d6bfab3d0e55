package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/sweep"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// A distributed job writes one trace per rank (NAME.rank0.pickle, ...), or
// one snapshot holding several devices' traces. A Set is such a job: one
// run per rank, replayed in parallel, each on its own allocator.

// Set is the replays of the ranks of one job.
type Set struct {
	Runs  []*Run
	Ranks []int // each run's rank: from its file name (rank3), else its device; -1 when neither tells
	// Worst indexes the worst run: one that ran out of memory, else the
	// one with the highest peak reserved memory (the first on a tie).
	Worst int
}

// Reports lists the runs' reports, in rank order.
func (s *Set) Reports() []*figures.Replay {
	out := make([]*figures.Replay, len(s.Runs))
	for i, r := range s.Runs {
		out[i] = r.Report
	}
	return out
}

// Figures is the set as the renderers read it.
func (s *Set) Figures() *figures.Ranks {
	return &figures.Ranks{Replays: s.Reports(), Ranks: s.Ranks, Worst: s.Worst}
}

// ExpandTraces turns trace arguments into files: a glob is expanded (a
// pattern matching nothing is an Input error), a folder gives the traces
// in it (*.pickle, *.csv, *.gmtrace, *.txt), a file stays itself. The
// order is the arguments', a glob's and a folder's files sorted by name
// with rank numbers compared as numbers; a file given twice counts once.
func ExpandTraces(args []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(paths []string) {
		slices.SortStableFunc(paths, byRank)
		for _, p := range paths {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	for _, a := range args {
		if fi, err := os.Stat(a); err == nil {
			if !fi.IsDir() {
				add([]string{a})
				continue
			}
			var files []string
			ents, err := os.ReadDir(a)
			if err != nil {
				return nil, &Error{Kind: Input, Err: err}
			}
			for _, e := range ents {
				switch filepath.Ext(e.Name()) {
				case ".pickle", ".pkl", ".csv", ".gmtrace", ".txt":
					if !e.IsDir() {
						files = append(files, filepath.Join(a, e.Name()))
					}
				}
			}
			if len(files) == 0 {
				return nil, &Error{Kind: Input, Err: fmt.Errorf("%s: the folder holds no trace (*.pickle, *.csv, *.gmtrace)", a)}
			}
			add(files)
			continue
		}
		if !strings.ContainsAny(a, "*?[") {
			add([]string{a}) // opening it says what is wrong
			continue
		}
		m, err := filepath.Glob(a)
		if err != nil {
			return nil, usage("%s: %w", a, err)
		}
		if len(m) == 0 {
			return nil, &Error{Kind: Input, Err: fmt.Errorf("%s: no file matches", a)}
		}
		add(m)
	}
	return out, nil
}

// rankNumber is compiled at its first use, not at every process start.
var rankNumber = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`rank[-_]?(\d+)`) })

// RankOf reads the rank from a file name such as train.rank3.pickle; -1
// when it names none.
func RankOf(path string) int {
	m := rankNumber().FindAllStringSubmatch(filepath.Base(path), -1)
	if m == nil {
		return -1
	}
	n, err := strconv.Atoi(m[len(m)-1][1])
	if err != nil {
		return -1
	}
	return n
}

// byRank orders rank2 before rank10: by name without the rank, then by
// rank number.
func byRank(a, b string) int {
	return cmp.Or(strings.Compare(rankless(a), rankless(b)), cmp.Compare(RankOf(a), RankOf(b)), strings.Compare(a, b))
}

// rankless is path with its rank number taken out.
func rankless(path string) string {
	return filepath.Join(filepath.Dir(path), rankNumber().ReplaceAllString(filepath.Base(path), "rank"))
}

// SetSource is what a set replays.
type SetSource struct {
	Paths       []string // from ExpandTraces
	Device      int
	DeviceGiven bool                   // --device picks one device of each file
	Progress    io.Writer              // see Source
	Keep        Keep                   // see Source
	Pack        figures.ExplorerPacker // see Source
	// PlansOnly: the caller reads the plans alone (a sweep): no
	// categories, no event times.
	PlansOnly bool
	// Ahead: plan each rank read whole ahead of its private pools
	// (replay.FromSnapshotAhead), for a caller with a core to spare;
	// rankPlan.settle then settles the plan (the settling starts at once,
	// on its own goroutine).
	Ahead bool
}

// rankPlan is one rank ready to replay.
type rankPlan struct {
	path   string
	device int
	rank   int
	snap   *trace.Snapshot
	plan   *replay.Plan
	times  []int64     // eventTimes
	tlog   *timeLog    // or those packed, when the file was planned as it was read
	others []otherPlan // the file's other devices so planned, for the explorer
	note   string      // why this device, when the file had others
	cls    *categories.Result
	// settle, when the plan was made ahead (SetSource.Ahead), returns
	// the plan to use: plan itself, or one planned with private pools.
	settle func() *replay.Plan
}

// busiestDevice is the device of devs with the most alloc events in snap.
func busiestDevice(snap *trace.Snapshot, devs []int) int {
	best, most := devs[0], -1
	for _, d := range devs {
		n := 0
		for _, e := range snap.Traces[d] {
			if e.Action == trace.ActionAlloc {
				n++
			}
		}
		if n > most {
			best, most = d, n
		}
	}
	return best
}

// otherDevices lists devs other than own, as "0, 2".
func otherDevices(devs []int, own int) string {
	var s []string
	for _, d := range devs {
		if d != own {
			s = append(s, strconv.Itoa(d))
		}
	}
	return strings.Join(s, ", ")
}

// devicesWithEvents lists the devices whose trace holds events.
func devicesWithEvents(snap *trace.Snapshot) []int {
	var ds []int
	for d, tr := range snap.Traces {
		if len(tr) > 0 {
			ds = append(ds, d)
		}
	}
	return ds
}

// openRanks opens every file of src, several at once, and plans each
// rank: every device with events (or --device's), each its own rank.
func openRanks(ctx context.Context, src SetSource) ([]rankPlan, error) {
	if len(src.Paths) == 0 {
		return nil, usage("no trace given")
	}
	if len(src.Paths) > 1 {
		src.Progress = nil // bars of files read at once would draw over each other
	}
	perFile := make([][]rankPlan, len(src.Paths))
	errs := make([]error, len(src.Paths))
	parallel(len(src.Paths), func(i int) { perFile[i], errs[i] = openRank(ctx, src, src.Paths[i]) })
	var ranks []rankPlan
	for i := range src.Paths {
		if errs[i] != nil {
			return nil, errs[i]
		}
		ranks = append(ranks, perFile[i]...)
	}
	return ranks, nil
}

// openRank opens one file of a set and plans its ranks.
func openRank(ctx context.Context, src SetSource, p string) ([]rankPlan, error) {
	if src.Keep == KeepReport || src.Keep == KeepDetail {
		if ranks, ok, err := streamRank(ctx, src, p); ok || err != nil {
			return ranks, err
		}
	}
	snap, err := openSetTrace(ctx, src, p)
	if err != nil {
		return nil, err
	}
	devs := []int{src.Device}
	note := ""
	if !src.DeviceGiven {
		if ds := devicesWithEvents(snap); len(ds) > 0 {
			devs = ds
		}
		// A file named for a rank is one process: its rank's device is the
		// one it allocated on most; a few events on another (a tensor made
		// before set_device, a library's context) are no rank of their own.
		if RankOf(p) >= 0 && len(devs) > 1 {
			own := busiestDevice(snap, devs)
			note = fmt.Sprintf("%s: replaying device %d, where the rank allocated most; its trace also has events on device(s) %s (give --device to replay one of them)",
				p, own, otherDevices(devs, own))
			devs = []int{own}
		}
	}
	if err := checkDevice(p, snap, devs[0]); err != nil {
		return nil, err
	}
	var ranks []rankPlan
	for _, d := range devs {
		r := RankOf(p)
		if r < 0 || len(devs) > 1 {
			r = d
		}
		rp := rankPlan{path: p, device: d, rank: r, snap: snap, note: note}
		if src.Ahead {
			// the settling on a spare core while this one plans ahead
			ahead, settle := replay.FromSnapshotAhead(snap, d)
			go settle()
			rp.plan, rp.settle = ahead(), settle
		} else {
			rp.plan = replay.FromSnapshot(snap, d)
		}
		if !src.PlansOnly {
			rp.times, rp.cls = timesFor(snap, d, src.Keep == KeepDetail), categories.Classify(snap, d)
		}
		ranks = append(ranks, rp)
	}
	if len(devs) == 1 {
		snap.Traces = nil // the plans hold what the replays need; with several devices the HTML explorer replays them all
	}
	return ranks, nil
}

// openSetTrace is OpenTrace for a file of src. A sweep (PlansOnly) reads
// a plain snapshot pickle in place, as a streamed replay does (see
// mapped.go): its decoding comes before any replay can start, on one
// core, and the copy from the page cache into the decoder's buffer was
// a tenth of it. The snapshot is the same.
func openSetTrace(ctx context.Context, src SetSource, p string) (*trace.Snapshot, error) {
	if src.PlansOnly {
		if m, ok := openMapped(ctx, p); ok {
			defer m.Close()
			if src.Progress == nil || m.size < progressFrom { // a mapped file draws no bar
				var snap *trace.Snapshot
				err := readMapped(m, func(r io.Reader) error {
					var err error
					snap, err = trace.ReadPickle(r, p, m.size)
					return err
				})
				if cerr := ctx.Err(); cerr != nil {
					return nil, cerr
				}
				if err != nil {
					return nil, &Error{Kind: Input, Err: err}
				}
				return snap, nil
			}
		}
	}
	return OpenTrace(ctx, p, src.Progress)
}

// parallel calls f(0) to f(n-1), as many at once as there are CPUs.
func parallel(n int, f func(i int)) {
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// ReplaySet replays every rank of src under s, in parallel; once ctx is
// done it stops with ctx's error.
func ReplaySet(ctx context.Context, src SetSource, s Settings) (*Set, error) {
	ranks, err := openRanks(ctx, src)
	if err != nil {
		return nil, err
	}
	set := &Set{Runs: make([]*Run, len(ranks)), Ranks: make([]int, len(ranks))}
	errs := make([]error, len(ranks))
	parallel(len(ranks), func(i int) {
		rp := ranks[i]
		set.Ranks[i] = rp.rank
		var step *explorerStep
		if len(ranks) == 1 { // one run, whose page is the HTML report's
			step = stepFor(src.Pack, src.Keep, rp.tlog, rp.cls)
		}
		set.Runs[i], errs[i] = replayPlanned(ctx, rp.path, rp.device, rp.snap, rp.plan, rp.times, rp.cls, s, step)
		if errs[i] == nil {
			set.Runs[i].tlog, set.Runs[i].others = rp.tlog, rp.others
		}
		if errs[i] == nil {
			errs[i] = set.Runs[i].addCategories(rp.cls)
		}
		if errs[i] == nil && rp.note != "" {
			set.Runs[i].Notes = append(set.Runs[i].Notes, rp.note)
		}
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	set.Worst = figures.Worst(set.Reports())
	return set, nil
}

// rankSweepCases makes a case of every rank under every setting; merge
// folds the rows back into one per setting, each the worst of its ranks.
// With more than one worker the ranks are planned ahead of their private
// pools: settles holds, per rank, the plan made ahead and its settle.
func rankSweepCases(ctx context.Context, rep *sweep.Report, in SweepInput) (cases []sweep.Case, merge func([]sweep.Row) []sweep.Row, settles []settling, err error) {
	ranks, err := openRanks(ctx, SetSource{Paths: in.Traces, Device: in.Device, DeviceGiven: in.DeviceGiven, Progress: in.Progress,
		PlansOnly: true, Ahead: in.Workers > 1})
	if err != nil {
		return nil, nil, nil, err
	}
	for _, rp := range ranks {
		if rp.settle != nil {
			settles = append(settles, settling{rp.plan, rp.settle})
		}
	}
	grid := in.Grid
	rec := setup.Recorded(ranks[0].snap.Settings)
	if grid == nil {
		grid = defaultTraceGrid(in, rec)
	}
	grid = markRecorded(withBaseline(grid), rec)
	if len(ranks) == 1 {
		rp := ranks[0]
		rep.Source, rep.Ops, rep.Baseline = rp.path, len(rp.plan.Ops), sweep.DefaultsLabel
		return onePlan(rp.plan, grid), nil, settles, nil
	}
	rep.Source = fmt.Sprintf("%d ranks (%s, ...)", len(ranks), ranks[0].path)
	rep.Baseline = sweep.DefaultsLabel
	for _, rp := range ranks {
		rep.Ops = max(rep.Ops, len(rp.plan.Ops))
		for _, s := range grid {
			// the rank in the label keeps the cases apart until merge
			cases = append(cases, sweep.Case{Label: s.Label + "\x00" + strconv.Itoa(rp.rank), Plan: rp.plan, Setting: s})
		}
	}
	merge = func(rows []sweep.Row) []sweep.Row {
		by := map[string]int{}
		var out []sweep.Row
		for _, r := range rows {
			label, _, _ := strings.Cut(r.Label, "\x00")
			r.Label = label
			i, ok := by[label]
			if !ok {
				by[label] = len(out)
				out = append(out, r)
				continue
			}
			w := &out[i]
			w.Outcome = worseOutcome(w.Outcome, r.Outcome)
			for k := range w.Cards {
				w.Cards[k] = worseOutcome(w.Cards[k], r.Cards[k])
			}
		}
		sweep.Sort(out)
		return out
	}
	return cases, merge, settles, nil
}

// worseOutcome is the worse of two ranks' replays: one that ran out of
// memory, else the higher peak reserved memory.
func worseOutcome(a, b sweep.Outcome) sweep.Outcome {
	if a.Fits() != b.Fits() {
		if !a.Fits() {
			return a
		}
		return b
	}
	if b.PeakReserved() > a.PeakReserved() {
		return b
	}
	return a
}
