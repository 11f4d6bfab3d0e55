package replay

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// FromSnapshotAhead's settled plan is
// FromSnapshot's, for every recorded fixture: the plan made ahead itself
// when the trace used no private pool, or when its final segments name
// one (graph_convnet: then the plan ahead is planned with them), a new
// one when it used pools that its end does not show (mempool_single); the
// snapshot's events may be dropped once FromSnapshotAhead returns, and
// settle may run before, after or while the plan ahead is made.
func TestFromSnapshotAhead(t *testing.T) {
	names, _ := filepath.Glob(filepath.Join(fixtures, "*.pickle"))
	if len(names) == 0 {
		t.Fatal("no fixtures")
	}
	pooled, named := 0, 0
	for _, path := range names {
		for _, apart := range []bool{false, true} {
			t.Run(map[bool]string{false: "ahead/", true: "apart/"}[apart]+filepath.Base(path), func(t *testing.T) {
				snap, err := trace.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				if len(snap.Traces) == 0 {
					t.Skip("no trace")
				}
				want := FromSnapshot(snap, 0)
				ahead, got := plannedAhead(snap, apart)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("settled plan differs from FromSnapshot's (%d vs %d ops, %d vs %d pools)", len(got.Ops), len(want.Ops), len(got.Pools), len(want.Pools))
				}
				if len(want.Pools) == 0 && got != ahead {
					t.Errorf("no private pool, yet settle planned again")
				}
				if len(want.Pools) > 0 {
					pooled++
					if namesPool(t, path) {
						named++
						if got != ahead {
							t.Errorf("the final segments name a private pool, yet the plan ahead was made without them")
						}
					} else if got == ahead {
						t.Errorf("%d private pools, yet settle kept the plan made without them", len(want.Pools))
					}
				}
			})
		}
	}
	if pooled == named || named == 0 {
		t.Errorf("%d fixtures used private pools, %d of them named at the end: a path went untested", pooled, named)
	}
}

// plannedAhead plans snap's device 0 ahead and settles the plan: one
// after the other, or (apart) settling on another goroutine while the
// plan is made ahead; either way the snapshot's events are dropped once
// FromSnapshotAhead returns, as a caller that keeps only the plans does.
func plannedAhead(snap *trace.Snapshot, apart bool) (ahead, settled *Plan) {
	aheadF, settle := FromSnapshotAhead(snap, 0)
	snap.Traces = nil
	if !apart {
		ahead = aheadF()
		return ahead, settle()
	}
	done := make(chan *Plan)
	go func() { done <- settle() }()
	ahead = aheadF()
	return ahead, <-done
}

// namesPool reports whether the snapshot at path ends with a segment of a
// private pool.
func namesPool(t *testing.T, path string) bool {
	snap, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snap.Segments {
		if s.Device == 0 && s.PoolID != [2]int64{} {
			return true
		}
	}
	return false
}
