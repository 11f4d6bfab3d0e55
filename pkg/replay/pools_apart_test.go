package replay

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestApartSet checks the set of pairs apart against a map: each pair
// held once however often it is added, partners handed in ascending
// order (from any start), and pairs in the order the labelling rules
// read them, in sparse rows (lists) and dense ones (bitsets) alike.
func TestApartSet(t *testing.T) {
	for _, c := range []struct {
		name     string
		segs, n  int
		hubs     int // segments paired with most others (dense rows)
		complete bool
	}{{"sparse", 5000, 3000, 0, false}, {"hubs", 3000, 20000, 4, false}, {"complete", 300, 0, 0, true}} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(c.segs)))
			var a apartSet
			want := map[[2]int]bool{}
			add := func(x, y int) {
				if x == y {
					return
				}
				isNew := !want[[2]int{min(x, y), max(x, y)}]
				want[[2]int{min(x, y), max(x, y)}] = true
				if got := a.add(x, y); got != isNew {
					t.Fatalf("add(%d, %d) = %v, want %v", x, y, got, isNew)
				}
			}
			for range c.n {
				x, y := rng.IntN(c.segs), rng.IntN(c.segs)
				if c.hubs > 0 {
					x = rng.IntN(c.hubs)
				}
				add(x, y)
				add(y, x) // found again, the other way round
			}
			if c.complete {
				for range 2 {
					for _, k := range rng.Perm(c.segs * c.segs) {
						add(k/c.segs, k%c.segs)
					}
				}
			}
			if a.pairs != len(want) {
				t.Fatalf("%d pairs, want %d", a.pairs, len(want))
			}
			var wantPairs [][2]int
			for p := range want {
				wantPairs = append(wantPairs, p)
			}
			slices.SortFunc(wantPairs, func(p, q [2]int) int {
				if p[0] != q[0] {
					return p[0] - q[0]
				}
				return p[1] - q[1]
			})
			var got [][2]int
			a.eachPair(func(x, y int) { got = append(got, [2]int{x, y}) })
			if !slices.Equal(got, wantPairs) {
				t.Fatalf("eachPair: %d pairs, want %d in order", len(got), len(wantPairs))
			}
			dense := 0
			for x := range c.segs {
				if a.bits(x) != nil {
					dense++
				}
				from := rng.IntN(c.segs+1) - 1
				var part, wantPart []int
				a.each(x, from, func(o int) { part = append(part, o) })
				for o := from + 1; o < c.segs+64; o++ {
					if want[[2]int{min(x, o), max(x, o)}] {
						wantPart = append(wantPart, o)
					}
				}
				if !slices.Equal(part, wantPart) {
					t.Fatalf("each(%d, %d) = %v, want %v", x, from, part, wantPart)
				}
			}
			if c.hubs > 0 && dense < c.hubs {
				t.Fatalf("%d rows became bitsets, want the %d hubs'", dense, c.hubs)
			}
			for x := range c.hubs { // a bit per segment, and a little
				if l := a.list(x); cap(l)+cap(a.bits(x)) > 2*(c.segs/64+1) {
					t.Fatalf("hub %d: %d list entries, %d words", x, cap(l), cap(a.bits(x)))
				}
			}
			// a list of pairs takes 8 bytes each
			if b := a.bytes(); c.complete && b > a.pairs {
				t.Fatalf("%d pairs take %d bytes", a.pairs, b)
			}
		})
	}
}

// TestApartPairsBounded walks a trace whose pairs apart are quadratic in
// its segments: gpt2_varlen_stacks repeated, each copy's segments made
// again at the last copy's addresses (missed frees, whose free blocks
// stay in the model), so that every allocation passes over the free
// blocks of all the copies before it. Each pair is found again and again
// (several times as often as there are pairs); a list of findings, or of
// pairs, grew with those where the set stays within a bit (and a little)
// per pair of segments.
func TestApartPairsBounded(t *testing.T) {
	events, final, snap := repeatTrace(t, "gpt2_varlen_stacks.pickle", 120_000, false)
	f := walkPools(events, final, settingsConfig(snap.Settings))
	f.exclusions()
	n, a := len(f.segs), &f.apart
	t.Logf("%d events, %d segments, %d pairs apart, found %d times, %d bytes", len(events), n, a.pairs, a.found, a.bytes())
	if a.pairs < n*n/10 {
		t.Fatalf("%d pairs apart of %d segments: not the quadratic case this test is for", a.pairs, n)
	}
	if a.found < 2*a.pairs {
		t.Fatalf("%d pairs found %d times: not the repeated findings this test is for", a.pairs, a.found)
	}
	if b := a.bytes(); b > n*(n/4+64) || b > 2*a.pairs {
		t.Fatalf("%d pairs apart of %d segments take %d bytes", a.pairs, n, b)
	}
}
