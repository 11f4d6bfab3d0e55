package replay

import (
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// packedOps makes n random ops for a replay of every kind but the pools'
// (IDs of one and two bytes, sizes in the size cache or not, streams,
// recorded out-of-memory errors, free requests and completions), with
// Events and Stacks that follow the op before or not, and packs them.
// Unless stop, the allocations of a size too large to fit (1 TiB) are all
// flagged as recorded out-of-memory errors: a replay goes past them.
func packedOps(seed int64, n int, stop bool) (*opLog, []alloc.Op, []int32) {
	rng := rand.New(rand.NewSource(seed))
	sizes := []uint64{512, 4096, 1 << 20, 3 << 20, 25 << 20}
	live := map[uint32]bool{}
	pending := map[uint32]bool{} // freed, not completed: the ID is not free
	used := map[uint32]bool{}    // on another stream: its free waits too
	var l opLog
	ops, event := make([]alloc.Op, 0, n), make([]int32, 0, n)
	ev, st := int32(0), int32(-1)
	for len(ops) < n {
		var op alloc.Op
		id := uint32(rng.Intn(300))
		switch k := rng.Intn(20); {
		case k < 9 && !live[id] && !pending[id]:
			op = alloc.Op{Kind: alloc.OpAlloc, ID: id, Size: sizes[rng.Intn(len(sizes))]}
			if rng.Intn(10) == 0 {
				op.Size = uint64(rng.Intn(40 << 20))
			}
			if rng.Intn(500) == 0 {
				op.Size = 1 << 40 // out of memory, recorded or not
			}
			if rng.Intn(10) == 0 {
				op.Stream = uint64(rng.Intn(3))
			}
			if rng.Intn(3) > 0 || op.Size == 1<<40 && (!stop || rng.Intn(4) > 0) {
				op.Flags = alloc.FlagRecordedOOM
			}
			live[id] = true
		case k < 17 && live[id]:
			op = alloc.Op{Kind: alloc.OpFree, ID: id}
			if rng.Intn(8) == 0 {
				op.Kind = alloc.OpFreeRequest
			}
			pending[id] = op.Kind == alloc.OpFreeRequest || used[id]
			delete(live, id)
			delete(used, id)
		case k == 17 && pending[id]:
			op = alloc.Op{Kind: alloc.OpFreeComplete, ID: id}
			delete(pending, id)
		case k == 18 && live[id]:
			op = alloc.Op{Kind: alloc.OpRecordStream, ID: id, Stream: 1}
			used[id] = true
		case k == 19 && rng.Intn(20) == 0:
			op = alloc.Op{Kind: alloc.OpEmptyCache}
		default:
			continue
		}
		switch rng.Intn(10) {
		case 0: // the same Event
		case 1:
			ev += int32(rng.Intn(1000))
		default:
			ev++
		}
		switch rng.Intn(10) {
		case 0:
			st = -1
		case 1:
			st = int32(rng.Intn(1 << 20))
		}
		l.put(&op, ev, st)
		ops, event = append(ops, op), append(event, ev)
	}
	return &l, ops, event
}

// runPackedAgrees: a replay of a packed log by applyPacked, in batches
// of random lengths across its chunks, ends as Run of the same ops does:
// the same results (out-of-memory errors survived or stopped at, the
// error of an invalid op), statistics, extra figures and timeline, and
// the ops and Events unpacked as Unpack gives them; the allocator checked
// after every op.
func TestRunPackedAgrees(t *testing.T) {
	for _, p := range alloc.Policies() {
		for seed := int64(1); seed <= 3; seed++ { // 1: to the end, 2: a small card, 3: an invalid op
			l, ops, event := packedOps(seed, 6000, seed > 1)
			if seed == 3 { // an invalid op: the free of an ID not allocated
				ops[5000] = alloc.Op{Kind: alloc.OpFree, ID: 1000}
				l = &opLog{}
				l.add(ops, event, make([]int32, len(ops)))
			}
			if len(l.chunks) < 2 {
				t.Fatalf("%d ops in one chunk: the test wants batches across chunks", len(ops))
			}
			conf := alloc.DefaultConfig()
			conf.Policy = p
			newAlloc := func() *alloc.Allocator {
				card := uint64(4 << 30)
				if seed == 2 {
					card = 256 << 20
				}
				a, err := alloc.New(alloc.Options{Config: conf, Device: alloc.Sim(card), Check: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(a.Close)
				return a
			}
			want, got := newAlloc(), newAlloc()
			tlWant, tlGot := alloc.NewTimeline(len(ops), 50), alloc.NewTimeline(len(ops), 50)
			wantRes, wantErr := want.Run(ops, 0, tlWant)

			rng := rand.New(rand.NewSource(seed))
			r := logReader{l: l}
			var res alloc.Result
			var err error
			var gotOps []alloc.Op
			var gotEvent []int32
			for {
				k := 1 + rng.Intn(700)
				bo, be := make([]alloc.Op, k), make([]int32, k)
				var sz []uint64
				if rng.Intn(2) == 0 {
					sz = make([]uint64, k)
				}
				part, e := r.applyPacked(got, res.Done, tlGot, bo, be, sz)
				gotOps, gotEvent = append(gotOps, bo[:part.Done]...), append(gotEvent, be[:part.Done]...)
				addRun(&res, part)
				if part.OOM != nil || e != nil || part.Done < k {
					err = e
					if part.OOM != nil || e != nil {
						// the op that stopped it, unpacked too
						gotOps, gotEvent = append(gotOps, bo[part.Done]), append(gotEvent, be[part.Done])
					}
					break
				}
			}
			name := fmt.Sprintf("%s seed %d", p, seed)
			if res.Done != wantRes.Done || !reflect.DeepEqual(res.OOM, wantRes.OOM) || !reflect.DeepEqual(res.Survived, wantRes.Survived) {
				t.Errorf("%s: applyPacked %d ops, OOM %+v, %d survived; Run %d, %+v, %d", name,
					res.Done, res.OOM, len(res.Survived), wantRes.Done, wantRes.OOM, len(wantRes.Survived))
			}
			var ge, we *alloc.OpError
			if errors.As(err, &ge) != errors.As(wantErr, &we) || ge != nil && (ge.Index != we.Index || ge.Op != we.Op || ge.Error() != we.Error()) {
				t.Errorf("%s: applyPacked's error %v, Run's %v", name, err, wantErr)
			}
			if seed == 1 && res.Done != len(ops) || seed == 3 && wantErr == nil && wantRes.OOM == nil {
				t.Errorf("%s: Run stopped at op %d (%v), or went by the invalid op", name, wantRes.Done, wantErr)
			}
			m := min(len(gotOps), len(ops))
			if !slices.Equal(gotOps, ops[:m]) || !slices.Equal(gotEvent, event[:m]) || m < min(res.Done+1, len(ops)) {
				t.Errorf("%s: the ops or Events unpacked as they ran differ from those packed", name)
			}
			if got.Stats() != want.Stats() || got.Extra() != want.Extra() || !reflect.DeepEqual(tlGot, tlWant) {
				t.Errorf("%s: the statistics, extra figures or timeline differ", name)
			}
		}
	}
}

// RunPacked of a log cut inside an op panics, as Unpack does, and
// applies nothing of it.
func TestRunPackedCut(t *testing.T) {
	var l opLog
	l.putAlloc(300, 1<<40, 1, -1) // a uvarint of 6 bytes for the size
	c := l.bytes(0)
	a, err := alloc.New(alloc.Options{Config: alloc.DefaultConfig(), Device: alloc.Sim(0), Check: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer func() {
		if recover() == nil {
			t.Error("a cut log ran without a panic")
		}
		if a.Extra().Ops != 0 {
			t.Error("the cut op was applied")
		}
	}()
	var u alloc.Unpacker
	a.RunPacked(&u, c[:len(c)-2], 1, 0, nil, make([]alloc.Op, 1), make([]int32, 1), nil)
}
