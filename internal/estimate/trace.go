package estimate

import (
	"bufio"
	"fmt"
	"strconv"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// writeSettings writes the text trace's setting lines: the settings the
// virtual card ran under, so that a replay of the trace uses them.
func writeSettings(w *bufio.Writer, c alloc.Config, conf string) {
	if conf != "" {
		fmt.Fprintf(w, "setting alloc_conf %s\n", conf)
	}
	split := int64(-1)
	if c.MaxSplitSize != 0 {
		split = int64(c.MaxSplitSize)
	}
	fmt.Fprintf(w, "setting max_split_size %d\n", split)
	fmt.Fprintf(w, "setting garbage_collection_threshold %s\n", strconv.FormatFloat(c.GCThreshold, 'g', -1, 64))
	fmt.Fprintf(w, "setting expandable_segments %t\n", c.ExpandableSegments)
	w.WriteString("setting roundup_power2_divisions")
	for _, d := range c.RoundupPower2Divisions {
		fmt.Fprintf(w, " %d", d)
	}
	w.WriteString("\n")
}

// writeSegments writes the final segments and their blocks.
func writeSegments(w *bufio.Writer, segs []alloc.Segment) {
	for _, s := range segs {
		fmt.Fprintf(w, "segment %#x %d", s.Address, s.TotalSize)
		if s.Stream != 0 {
			fmt.Fprintf(w, " stream=%#x", s.Stream)
		}
		if s.Small {
			w.WriteString(" small")
		}
		if s.Expandable {
			w.WriteString(" expandable")
		}
		w.WriteString("\n")
		for _, b := range s.Blocks {
			fmt.Fprintf(w, "block %#x %d %s", b.Address, b.Size, b.State)
			if b.State != alloc.BlockInactive {
				fmt.Fprintf(w, " requested=%d", b.RequestedSize)
			}
			w.WriteString("\n")
		}
	}
}

// segment is one entry of torch.cuda.memory_snapshot()["segments"].
type segment struct {
	Device        int     `json:"device"`
	Address       uint64  `json:"address"`
	TotalSize     uint64  `json:"total_size"`
	Stream        uint64  `json:"stream"`
	SegmentType   string  `json:"segment_type"`
	AllocatedSize uint64  `json:"allocated_size"`
	ActiveSize    uint64  `json:"active_size"`
	RequestedSize uint64  `json:"requested_size"`
	Expandable    bool    `json:"expandable"`
	SegmentPoolID [2]int  `json:"segment_pool_id"`
	Blocks        []block `json:"blocks"`
}

type block struct {
	Address       uint64 `json:"address"`
	Size          uint64 `json:"size"`
	RequestedSize uint64 `json:"requested_size"`
	State         string `json:"state"`
	ID            uint32 `json:"id"` // the emulator's allocation id; dropped from its snapshot
}

func segmentsOf(segs []alloc.Segment) []segment {
	out := make([]segment, 0, len(segs))
	for _, s := range segs {
		t := "large"
		if s.Small {
			t = "small"
		}
		g := segment{Address: s.Address, TotalSize: s.TotalSize, Stream: s.Stream, SegmentType: t,
			AllocatedSize: s.AllocatedSize, ActiveSize: s.ActiveSize, RequestedSize: s.RequestedSize,
			Expandable: s.Expandable, SegmentPoolID: [2]int{0, int(s.Pool)}, Blocks: []block{}}
		for _, b := range s.Blocks {
			g.Blocks = append(g.Blocks, block{Address: b.Address, Size: b.Size, RequestedSize: b.RequestedSize, State: b.State.String(), ID: b.ID})
		}
		out = append(out, g)
	}
	return out
}
