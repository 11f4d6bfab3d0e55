package figures

import (
	"cmp"
	"slices"
	"strings"
)

// Categories is what allocated memory was made of at its peak
// (package categories decides each allocation's category).
type Categories struct {
	// Op is the operation after which allocated memory first peaked;
	// Total the allocated bytes then: the sum of Shares' bytes.
	Op    int
	Total uint64
	// Method says how the categories were decided, such as "lifetimes
	// and annotations"; Steps counts the optimizer steps found.
	Method string
	Steps  int
	// Shares lists every category, in the order reports show them
	// (parameter ... workspace, unknown last), even when it held nothing.
	Shares []CategoryShare
	// Remedies are upper bounds, from the shares, of what common
	// remedies could save at the peak.
	Remedies []Remedy
	// KeptPastStep is the part of the activations that was kept past the
	// step it was born in (results held with their graphs: a leak).
	KeptPastStep uint64
	// Timeline is, for each point of Replay.Timeline, what each category
	// held after its operation, in Shares' order: bytes as asked (the
	// requests of the live allocations, not their blocks); nil when not
	// computed.
	Timeline [][]uint64
}

// CategoryShare is what one category held at the peak.
type CategoryShare struct {
	Name  string // "parameter", "optimizer_state", ...
	Bytes uint64
	// Sites are its allocation sites holding the most bytes, named by
	// their top user frames or, without any, by phase ("backward, no
	// Python frame (autograd engine)").
	Sites []Site
}

// Remedy is an upper bound on what a remedy could save at the peak.
type Remedy struct {
	Name  string // such as "activation checkpointing"
	Bytes uint64 // at most this many bytes
	Basis string // what the bound counts
}

// Bytes is what the category named name held, 0 if none.
func (c *Categories) Bytes(name string) uint64 {
	for _, s := range c.Shares {
		if s.Name == name {
			return s.Bytes
		}
	}
	return 0
}

// CategoryDelta is what one category held at each run's peak of
// allocated memory.
type CategoryDelta struct {
	Name string
	A, B uint64
}

// Change is B − A.
func (c CategoryDelta) Change() int64 { return int64(c.B) - int64(c.A) }

// DiffCategories compares two runs' categories, the largest change
// first (ties: the larger B first, then by name); nil when either run
// has none.
func DiffCategories(a, b *Categories) []CategoryDelta {
	if a == nil || b == nil {
		return nil
	}
	out := make([]CategoryDelta, 0, len(a.Shares))
	for _, s := range a.Shares {
		out = append(out, CategoryDelta{Name: s.Name, A: s.Bytes, B: b.Bytes(s.Name)})
	}
	abs := func(n int64) int64 { return max(n, -n) }
	slices.SortStableFunc(out, func(x, y CategoryDelta) int {
		return cmp.Or(cmp.Compare(abs(y.Change()), abs(x.Change())), cmp.Compare(y.B, x.B), strings.Compare(x.Name, y.Name))
	})
	return out
}
