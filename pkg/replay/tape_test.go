package replay

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// A tape gives back every field of the events it was given, in order:
// addresses that go down as well as up, stacks that go to -1 and back,
// actions beyond a nibble, addresses and sizes in units of 512 bytes or
// not, addresses and sizes seen before (a slot of their caches) and
// not, extreme values.
func TestTapeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var events []trace.Event
	for i := range 20000 {
		e := trace.Event{Action: trace.Action(1 + rng.IntN(9)), Stack: int32(rng.IntN(50)) - 1,
			Addr: 0x7f0000000000 + uint64(rng.IntN(1<<30)), Size: uint64(rng.IntN(1 << 26)),
			Stream: uint64(rng.IntN(3)), TimeUS: 1700000000000000 + int64(i*3-rng.IntN(5))}
		if i%3 != 0 { // most addresses and sizes are multiples of 512
			e.Addr &^= 511
			e.Size &^= 511
		}
		if i%4 != 0 { // and most are sizes and addresses seen before
			e.Size = uint64(1+rng.IntN(300)) << (rng.IntN(2) * 9)
			e.Addr = 0x7f0000000000 + uint64(rng.IntN(300))<<(rng.IntN(2)*9)
		}
		switch i % 997 {
		case 1:
			e.Action = trace.ActionEmptyCache
		case 2:
			e.Addr, e.Size, e.Stream, e.TimeUS, e.Stack = math.MaxUint64, math.MaxUint64, math.MaxUint64, math.MinInt64, math.MaxInt32
		case 3:
			e = trace.Event{}
		case 4: // steps of 2^63 and more, aligned and not
			e.Addr, e.Size = 1<<63, 1<<63
		case 5:
			e.Addr, e.Size = 1, 1<<63|1
		case 6:
			e.Addr, e.Size = 1<<63|512, math.MaxUint64&^511
		}
		events = append(events, e)
	}
	var tp tape
	for i := range events {
		tp.add(&events[i])
	}
	if tp.n != len(events) {
		t.Fatalf("%d events taped, want %d", tp.n, len(events))
	}
	for _, drop := range []bool{false, true} {
		k := 0
		err := tp.each(drop, func(e *trace.Event) error {
			if k >= len(events) || *e != events[k] {
				t.Fatalf("event %d: %+v, want %+v", k, *e, events[min(k, len(events)-1)])
			}
			k++
			return nil
		})
		if err != nil || k != len(events) {
			t.Fatalf("drop %v: %d events back, want %d (%v)", drop, k, len(events), err)
		}
	}
	if tp.n != 0 || len(tp.chunks) != 0 {
		t.Errorf("a tape read with drop keeps %d events in %d chunks", tp.n, len(tp.chunks))
	}
}
