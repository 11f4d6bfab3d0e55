package pickle

import (
	"github.com/gpumem/gpumem/pkg/trace/model"

	"bytes"
	"errors"
	"os"
	"testing"
)

func FuzzReadPickle(f *testing.F) {
	for _, p := range []string{
		"../../../testdata/pytorch/seed_frag.pickle",
		"testdata/seed_frag_p2.pickle",
		"testdata/seed_frag_segments.pickle",
	} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	frame := pdict{{"filename", "a.py"}, {"line", 3}, {"name", "f"}}
	ev := event("alloc", 4096, 512)
	ev[6].v = []any{frame, frame}
	f.Add(pickleOf(snapshotOf(ev, event("free_requested", 4096, 512))))
	f.Add(pickleOf(pdict{{"segments", []any{pdict{{"address", 1}, {"total_size", 2}, {"segment_pool_id", ptuple{0, 0}},
		{"blocks", []any{pdict{{"address", 1}, {"size", 2}, {"state", "inactive"}, {"frames", []any{frame}}}}}}}},
		{"allocator_settings", pdict{{"roundup_power2_divisions", pdict{{"2", 4}}}, {"garbage_collection_threshold", 0.5}}},
		{"external_annotations", []any{pdict{{"name", "x"}, {"time_us", 3}}}}}))
	f.Add(memoized())
	f.Add([]byte{opProto, 4, opLong4, 3, 0, 0, 0, 1, 2, 3, opStop})
	f.Add([]byte{opProto, 2, opMark, opNone, opNewTrue, opList, opMark, opDict, opTuple3, opStop})

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int64{int64(len(data)), -1} {
			s, err := Read(bytes.NewReader(data), "", size)
			if err != nil {
				if _, ok := errors.AsType[*FormatError](err); !ok {
					t.Fatalf("size %d: %T %v, want *FormatError", size, err, err)
				}
				continue
			}
			checkIndexes(t, s)
		}
	})
}

// checkIndexes verifies that every stack index and enum is in range.
func checkIndexes(t *testing.T, s *model.Snapshot) {
	t.Helper()
	ok := func(stack int32) bool { return stack == -1 || stack >= 0 && int(stack) < len(s.Stacks) }
	for d, tr := range s.Traces {
		for i, ev := range tr {
			if ev.Action < model.ActionAlloc || ev.Action > model.ActionSnapshot || !ok(ev.Stack) {
				t.Fatalf("device %d event %d: %+v", d, i, ev)
			}
		}
	}
	for i, seg := range s.Segments {
		if !ok(seg.Stack) {
			t.Fatalf("segment %d: stack %d", i, seg.Stack)
		}
		for j, b := range seg.Blocks {
			if !ok(b.Stack) || b.State > model.BlockPendingFree {
				t.Fatalf("segment %d block %d: %+v", i, j, b)
			}
		}
	}
	for i, st := range s.Stacks {
		if len(st) == 0 {
			t.Fatalf("stack %d is empty", i)
		}
	}
}
