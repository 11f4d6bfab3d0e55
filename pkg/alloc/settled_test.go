package alloc

import "testing"

// A release leaves a default pool settled when it finds nothing there to
// give back; it skips a settled pool (gm_policy_pytorch.c, release_blocks).
// These tests settle a pool with an empty_cache, bring into it a block a
// release gives back, and check that the checker (I3: a settled pool holds
// no such block) passes and that the next empty_cache gives it back.

// A seed's free gaps enter the free set: a segment seeded whole free into a
// settled pool goes at the next empty_cache.
func TestSettledPoolSeed(t *testing.T) {
	a := withConfig(t, "")
	if err := a.EmptyCache(); err != nil { // settles the empty default pools
		t.Fatal(err)
	}
	if err := a.Seed(0x7f0000000000, 20*mib, 0, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(); err != nil {
		t.Fatalf("after the seed: %v", err)
	}
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 20 * mib, "segment.all.current": 1})
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 0, "segment.all.current": 0, "num_device_free": 1})
}

// With expandable segments, an allocation in a settled pool maps a page
// (map_block) and leaves the rest of it a free mapped block: the next
// empty_cache unmaps the page once the allocation is freed.
func TestSettledPoolExpandableMap(t *testing.T) {
	a := withConfig(t, "expandable_segments:True")
	if err := a.EmptyCache(); err != nil { // settles the empty default pools
		t.Fatal(err)
	}
	mustAlloc(t, a, 1, 2*mib, 0) // one 20 MiB page: 18 MiB of it free
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 20 * mib, "inactive_split_bytes.all.current": 0})
	if err := a.EmptyCache(); err != nil { // no whole page free: nothing goes
		t.Fatal(err)
	}
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 20 * mib})
	mustFree(t, a, 1)
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	expectStats(t, a, map[string]int64{"reserved_bytes.all.current": 0})
}
