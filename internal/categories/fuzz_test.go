package categories

import (
	"encoding/binary"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// FuzzClassify classifies event sequences built from the input: whatever
// the events and marks, Classify neither panics nor loses a byte (the
// categories sum to the peak it reports).
func FuzzClassify(f *testing.F) {
	snap, _ := training(3, true)
	f.Add(encode(snap))
	snap, _ = training(2, false)
	f.Add(encode(snap))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		snap := decode(data)
		r := Classify(snap, 0)
		var sum uint64
		_, bytes, held := peakOf(r)
		for _, n := range held {
			sum += n
		}
		if sum != bytes {
			t.Fatalf("categories sum to %d, peak %d", sum, bytes)
		}
		for _, b := range r.All() {
			if b.Category >= NumCategories {
				t.Fatalf("block %+v has no category", b)
			}
		}
	})
}

// encode writes snap's events and marks 10 bytes each: kind, address
// slot, size in 512 B units (4 bytes), time step (4 bytes).
func encode(snap *trace.Snapshot) []byte {
	var out []byte
	put := func(kind, slot byte, size uint64, t int64) {
		var b [10]byte
		b[0], b[1] = kind, slot
		binary.LittleEndian.PutUint32(b[2:], uint32(size/512))
		binary.LittleEndian.PutUint32(b[6:], uint32(t))
		out = append(out, b[:]...)
	}
	for _, e := range snap.Traces[0] {
		put(byte(e.Action), byte(e.Addr>>20), e.Size, e.TimeUS)
	}
	for _, a := range snap.Annotations {
		kind := byte(200)
		if a.Fields["name"] != "Optimizer.step#AdamW.step" {
			kind += 2
		}
		if a.Fields["stage"] == "END" {
			kind++
		}
		put(kind, 0, 0, a.TimeUS)
	}
	return out
}

func decode(data []byte) *trace.Snapshot {
	snap := &trace.Snapshot{Traces: [][]trace.Event{nil}}
	names := []string{"Optimizer.step#AdamW.step", "Optimizer.zero_grad#AdamW.zero_grad"}
	for ; len(data) >= 10; data = data[10:] {
		kind, slot := data[0], uint64(data[1])
		size := uint64(binary.LittleEndian.Uint32(data[2:])) * 512
		t := int64(binary.LittleEndian.Uint32(data[6:]))
		if kind >= 200 && kind < 204 {
			stage := "START"
			if kind%2 == 1 {
				stage = "END"
			}
			snap.Annotations = append(snap.Annotations, trace.Annotation{TimeUS: t,
				Fields: map[string]string{"name": names[(kind-200)/2], "stage": stage}})
			continue
		}
		snap.Traces[0] = append(snap.Traces[0], trace.Event{Action: trace.Action(kind%4 + 1), Addr: slot << 20,
			Size: size, Stack: -1, TimeUS: t})
	}
	return snap
}
