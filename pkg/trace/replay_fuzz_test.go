package trace_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// FuzzReplayText replays every text trace the reader accepts, under the
// allocator's checker: what the reader lets through must never reach the
// allocator as an invalid operation (issue #12 item 8), whatever the
// segments, blocks and events say.
func FuzzReplayText(f *testing.F) {
	f.Add([]byte("# gpumem-trace v1\nsegment 0x200000 2097152\nblock 0x200000 512 active_allocated requested=500\n" +
		"block 0x200200 1024 active_pending_free\nfree 0x200000 512\nalloc 0x200200 1024\nsegment_free 0x600000 2097152\n" +
		"free_completed 0x600000 512\nalloc 0x800000 4096\n"))
	f.Add([]byte("# gpumem-trace v1\nsegment 0x0 1024 small\nblock 0x200 512 active_allocated\nfree 0x200\n" +
		"segment 0x400 1024 device=1\ndevice 1\nfree 0x600 512\noom 5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4<<10 {
			return
		}
		s, err := trace.ReadText(bytes.NewReader(data), "f", int64(len(data)))
		if err != nil {
			return
		}
		for d := range s.Traces {
			_, err := replay.Run(replay.FromSnapshot(s, d), replay.Options{Config: alloc.DefaultConfig(), Check: true})
			if errors.Is(err, alloc.ErrInvalidOp) || errors.Is(err, alloc.ErrCorrupt) {
				t.Fatalf("device %d: %v", d, err)
			}
		}
	})
}
