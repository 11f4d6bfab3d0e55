package sweep

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/progress"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// An Outcome is what one replay ended with.
type Outcome struct {
	Card    uint64 // the simulated card's size; 0 = an unlimited device
	Allowed uint64 // the memory-fraction cap in bytes; 0 = none
	Stats   alloc.Stats
	// AllocatedAtPeak is the most allocated bytes while reserved memory
	// stood at its peak.
	AllocatedAtPeak int64
	// LargestFree is the largest free cached block at the end.
	LargestFree uint64
	// LowerBound is the peak of live bytes (each request rounded up to
	// 512 B): no setting can reserve less.
	LowerBound int64
	// Fragmentation holds the report's ratios; AtPeak is the one that
	// decides whether a program fits.
	Fragmentation figures.Fragmentation
	Ops           int // operations applied
	// OOM is the allocation that failed, nil when the replay ran to the
	// end. Its OpIndex is the plan's event index (replay.Plan.Event), or
	// the op index for plans without events.
	OOM *alloc.OOM
}

// PeakReserved is reserved_bytes.all.peak.
func (o *Outcome) PeakReserved() int64 { return figures.PeakReserved(o.Stats) }

// DeviceAllocs is num_device_alloc: segments obtained from the device.
func (o *Outcome) DeviceAllocs() int64 { return o.Stats.NumDeviceAlloc }

// Fits reports whether the replay ran to the end.
func (o *Outcome) Fits() bool { return o.OOM == nil }

// A Row is one setting (or case) of a sweep.
type Row struct {
	Label   string
	Setting Setting
	// Outcome is the headline replay: on an unlimited device, or on the
	// largest card when cards were given.
	Outcome
	// Cards holds one replay per card, in the order the cards were given.
	Cards []Outcome
}

// FitsAll reports whether the row's replays all ran to the end.
func (r *Row) FitsAll() bool {
	if !r.Fits() {
		return false
	}
	for i := range r.Cards {
		if !r.Cards[i].Fits() {
			return false
		}
	}
	return true
}

// A Case is one plan under one setting, for sweeps across plans.
type Case struct {
	Label   string
	Plan    *replay.Plan
	Setting Setting
}

// Run replays plan under every setting of grid, on each card (simulated
// devices of those sizes; none = one unlimited device), with up to
// workers replays at once, each through its own allocator. The rows come
// back sorted as [Sort] does.
func Run(ctx context.Context, plan *replay.Plan, grid []Setting, cards []uint64, workers int) ([]Row, error) {
	cases := make([]Case, len(grid))
	for i, s := range grid {
		cases[i] = Case{Label: s.Label, Plan: plan, Setting: s}
	}
	return RunCases(ctx, cases, cards, workers)
}

// RunCases is [Run] for cases that each bring their own plan.
func RunCases(ctx context.Context, cases []Case, cards []uint64, workers int) ([]Row, error) {
	return RunCasesBeside(ctx, cases, cards, workers)
}

// RunCasesBeside is [RunCases] with more jobs, beside, which the workers
// take before any replay, in their order: a long job started first keeps
// every worker busy to the end (longest job first), where one started
// beside them would share their cores and finish last alone. They are
// not run when the sweep fails before it starts.
func RunCasesBeside(ctx context.Context, cases []Case, cards []uint64, workers int, beside ...func()) ([]Row, error) {
	if err := check(cases, cards); err != nil {
		return nil, err
	}
	rows := make([]Row, len(cases))
	for i, c := range cases {
		rows[i] = Row{Label: c.Label, Setting: c.Setting, Cards: make([]Outcome, len(cards))}
	}
	// One job per case and card; without cards, one per case. Case -1 is
	// beside[k].
	type job struct{ c, k int }
	var jobs []job
	for k := range beside {
		jobs = append(jobs, job{-1, k})
	}
	// Longest first here too, and the shortest last, so that the workers
	// run out of jobs at nearly the same time (see replayWeight).
	order := make([]int, len(cases))
	for c := range order {
		order[c] = c
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(replayWeight(cases[b].Setting), replayWeight(cases[a].Setting))
	})
	for _, c := range order {
		if len(cards) == 0 {
			jobs = append(jobs, job{c, -1})
		}
		for k := range cards {
			jobs = append(jobs, job{c, k})
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
		next     = make(chan job)
	)
	for range min(max(workers, 1), len(jobs)) {
		wg.Go(func() {
			for j := range next {
				if j.c < 0 {
					beside[j.k]()
					continue
				}
				var card uint64
				if j.k >= 0 {
					card = cards[j.k]
				}
				out, err := replayOne(cases[j.c], card)
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
					continue
				}
				progress.Tick(ctx) // a bar the caller put in ctx
				if j.k < 0 {
					rows[j.c].Outcome = out
				} else {
					rows[j.c].Cards[j.k] = out
				}
			}
		})
	}
feed:
	for _, j := range jobs {
		select {
		case next <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(cards) > 0 {
		big := 0
		for k, c := range cards {
			if c > cards[big] {
				big = k
			}
		}
		for i := range rows {
			rows[i].Outcome = rows[i].Cards[big]
		}
	}
	Sort(rows)
	return rows, nil
}

// replayWeight ranks the time a replay under s takes against the others
// of a grid, for the order the workers take them in (the rows keep the
// cases' order): the longest first and the shortest last, so that the
// worker that takes the last job makes the other wait the least. A
// replay without a cache asks the device for every allocation and takes
// about four times the others' time; cupy's and cuda-async's pools take
// about one and a half times theirs; bfc about nine tenths, and
// expandable segments about two thirds, the cheapest. gpt2_varlen, alone
// on a core: nocache 4.5 ms, cuda-async 2.2, cupy 2.1, the others
// 1.3-1.6, bfc 1.3, expandable segments 1.0; the same order on
// resnet50_fp32, gpt2_varlen_stacks and oom_survive_resnet.
func replayWeight(s Setting) int {
	switch c := s.Config; {
	case c.Policy == alloc.PolicyNoCache:
		return 4
	case c.Policy == alloc.PolicyCuPy || c.Policy == alloc.PolicyCUDAAsync:
		return 3
	case c.ExpandableSegments:
		return 0
	case c.Policy == alloc.PolicyBFC:
		return 1
	}
	return 2
}

func check(cases []Case, cards []uint64) error {
	if len(cases) == 0 {
		return errors.New("no settings to sweep")
	}
	for _, c := range cards {
		if c == 0 {
			return errors.New("a card of 0 bytes")
		}
	}
	for _, c := range cases {
		if c.Plan == nil {
			return fmt.Errorf("%s: no plan", c.Label)
		}
		f := c.Setting.Fraction
		if err := setup.CheckFraction(f); err != nil {
			return fmt.Errorf("%s: memory fraction %w", c.Label, err)
		}
		if (f > 0 || c.Setting.Config.MemoryFraction > 0) && len(cards) == 0 {
			return fmt.Errorf("%s: a memory fraction needs a card size", c.Label)
		}
	}
	return nil
}

// replayOne replays a case on a card of the given size (0 = unlimited).
func replayOne(c Case, card uint64) (Outcome, error) {
	cfg := c.Setting.Config
	o, err := setup.Setup{Config: &cfg, Card: card, Fraction: c.Setting.Fraction}.Options(nil)
	if err != nil {
		return Outcome{}, fmt.Errorf("%s: %w", c.Label, err)
	}
	o.NoDivergence = true
	res, err := replay.Run(c.Plan, o)
	if err != nil {
		where := "an unlimited device"
		if card > 0 {
			where = fmt.Sprintf("a %s card", units.FormatUBytes(card))
		}
		return Outcome{}, fmt.Errorf("%s on %s: %w", c.Label, where, err)
	}
	out := Outcome{
		Card: card, Allowed: res.Allowed, Stats: res.Stats,
		AllocatedAtPeak: res.Extra.AllocatedAtPeak, LargestFree: res.LargestFree,
		LowerBound: res.Extra.LiveBytesPeak, Ops: res.Done, OOM: res.OOM,
	}
	out.Fragmentation = figures.FragmentationOf(res.Stats, out.AllocatedAtPeak, out.LargestFree)
	return out, nil
}

// Sort orders rows by peak reserved memory, then by device allocations;
// rows whose headline replay ran out of memory (their peaks stop short)
// come last. Equal rows keep their order.
func Sort(rows []Row) {
	slices.SortStableFunc(rows, func(a, b Row) int {
		if a.Fits() != b.Fits() {
			if a.Fits() {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(a.PeakReserved(), b.PeakReserved()); c != 0 {
			return c
		}
		return cmp.Compare(a.DeviceAllocs(), b.DeviceAllocs())
	})
}
