package pickle

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace/model"
)

// maxFuzzInput caps what the fuzzer feeds the decoder: big inputs make
// every execution (and minimizing them) slow without reaching new code.
const maxFuzzInput = 8 << 10

func FuzzReadPickle(f *testing.F) {
	// Prefixes of real snapshots: the opcodes, memo use and dict shapes
	// PyTorch writes, cut short (the decoder must say where).
	paths, _ := filepath.Glob("../../../testdata/pytorch/*.pickle")
	more, _ := filepath.Glob("testdata/*.pickle")
	for _, p := range append(paths, more...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, n := range []int{512, 2 << 10, maxFuzzInput} {
			f.Add(b[:min(n, len(b))])
		}
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
	f.Add(synthetic()[:maxFuzzInput])
	f.Add([]byte{opProto, 4, opLong4, 3, 0, 0, 0, 1, 2, 3, opStop})
	f.Add([]byte{opProto, 2, opMark, opNone, opNewTrue, opList, opMark, opDict, opTuple3, opStop})

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			return
		}
		for _, size := range []int64{int64(len(data)), -1} {
			s, err := Read(bytes.NewReader(data), "f", size)
			if err != nil {
				if _, ok := errors.AsType[*FormatError](err); !ok {
					t.Fatalf("size %d: %T %v, want *FormatError", size, err, err)
				}
				checkMessage(t, err.Error())
				continue
			}
			checkIndexes(t, s)
			checkBounded(t, s)
		}
		// the fast path for event dicts and Stream read what the general
		// decoder reads
		want, werr := readGeneral(data)
		got, gerr := Read(bytes.NewReader(data), "", int64(len(data)))
		streamed, serr := streamAll(data)
		if (werr == nil) != (gerr == nil) || (werr == nil) != (serr == nil) {
			t.Fatalf("general: %v; fast: %v; stream: %v", werr, gerr, serr)
		}
		if werr == nil && (!reflect.DeepEqual(got, want) || !reflect.DeepEqual(streamed, want)) {
			t.Fatal("the fast path or Stream read another snapshot than the general decoder")
		}
	})
}

// checkMessage verifies that an error is one short line: it quotes at
// most a prefix of the input, with control characters escaped.
func checkMessage(t *testing.T, msg string) {
	t.Helper()
	if len(msg) > 300 || strings.ContainsFunc(msg, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		t.Fatalf("error of %d bytes, or with control characters: %.400q", len(msg), msg)
	}
}

// checkBounded verifies what the decoder promises about the snapshot:
// stacks and frames of bounded size, segments a replay can rebuild.
func checkBounded(t *testing.T, s *model.Snapshot) {
	t.Helper()
	for i, st := range s.Stacks {
		if len(st) > maxFrames+1 {
			t.Fatalf("stack %d has %d frames", i, len(st))
		}
		for _, fr := range st {
			if len(fr.Filename) > maxFrameString+len("…") || len(fr.Name) > maxFrameString+len("…") {
				t.Fatalf("stack %d: frame of %d+%d bytes", i, len(fr.Filename), len(fr.Name))
			}
		}
	}
	for i := range s.Segments {
		if msg := model.CheckSegment(&s.Segments[i]); msg != "" {
			t.Fatalf("segment %d: %s", i, msg)
		}
	}
	if i, msg := model.CheckOverlap(s.Segments); i >= 0 {
		t.Fatalf("segment %d: %s", i, msg)
	}
	for _, tr := range s.Traces {
		for i, e := range tr {
			if e.Action != model.ActionOOM && e.Action != model.ActionSnapshot {
				if msg := eventProblem(&e); msg != "" {
					t.Fatalf("event %d: %s", i, msg)
				}
			}
		}
	}
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
