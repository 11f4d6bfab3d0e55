package pickle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace/model"
)

// evGen writes a snapshot pickle of event dicts as its choices say: by
// default (choice 0) each event is laid out like the one before, as
// PyTorch's pickler writes them, so that the fast paths take them; other
// choices perturb an event in the ways a real or hostile file may: keys
// in another order, missing or given twice, literal or fetched with
// BINGET or LONG_BINGET, values of other types or fetched from the memo
// (an earlier event dict included), BINPUT over slots in use or far
// ahead, frames lists of memoized frame dicts, a dict filled by two
// SETITEMS, batches of APPENDS or single APPENDs.
type evGen struct {
	src  []byte
	i    int
	b    []byte
	used []int        // memo slots set, in order
	set  map[int]bool // the same
	str  map[string]int
	dict []int // memo slots of event dicts
	frd  []int // memo slots of frame dicts
	frl  []int // memo slots of frames lists
	// stacks makes frames lists of memoized frame dicts the usual value
	stacks bool
}

// pick returns a choice in [0, k), 0 once the choices run out.
func (g *evGen) pick(k int) int {
	if g.i >= len(g.src) {
		return 0
	}
	c := int(g.src[g.i]) % k
	g.i++
	return c
}

// rare is a choice that is usually false.
func (g *evGen) rare(k int) bool { return g.pick(k) == k-1 }

func (g *evGen) memoize() int {
	i := len(g.used)
	g.b = append(g.b, opMemoize)
	g.note(i)
	return i
}

func (g *evGen) note(i int) {
	if !g.set[i] {
		g.set[i] = true
		g.used = append(g.used, i)
	}
}

// store writes a store of the value just written: MEMOIZE, or a BINPUT
// over a slot in use or past the end. It returns the slot.
func (g *evGen) store() int {
	switch {
	case g.rare(12) && len(g.used) > 0:
		i := g.used[g.pick(len(g.used))]
		if len(g.str) > 0 && g.pick(2) == 0 {
			// the slot of a string the next events fetch, a key maybe
			i = g.str[[]string{"action", "addr", "size", "stream", "N/A", "", "frames"}[g.pick(7)]]
		}
		g.binput(i)
		return i
	case g.rare(24):
		i := len(g.used) + g.pick(600)
		g.binput(i)
		return i
	}
	return g.memoize()
}

func (g *evGen) binput(i int) {
	g.indexOp(opBinPut, opLongBinPut, i, 4)
	g.note(i)
}

func (g *evGen) get(i int) { g.indexOp(opBinGet, opLongBinGet, i, 6) }

// indexOp writes memo index i with the one-byte opcode short, or with
// long (a four-byte index) when i needs it and once in n times anyway.
func (g *evGen) indexOp(short, long byte, i, n int) {
	if i < 256 && !g.rare(n) {
		g.b = append(g.b, short, byte(i))
	} else {
		g.b = append(g.b, long)
		g.b = binary.LittleEndian.AppendUint32(g.b, uint32(i))
	}
}

// s writes a string, memoized the first time and fetched after, as the
// pickler does (a fresh copy now and then, as for "N/A").
func (g *evGen) s(v string) {
	if i, ok := g.str[v]; ok && !g.rare(10) {
		g.get(i)
		return
	}
	g.b = append(g.b, opShortBinUnicode, byte(len(v)))
	g.b = append(g.b, v...)
	if !g.rare(16) {
		g.str[v] = g.store()
	}
}

// n writes an int as the pickler does, in the shortest opcode.
func (g *evGen) n(v int64) {
	switch {
	case v >= 0 && v < 256:
		g.b = append(g.b, opBinInt1, byte(v))
	case v >= 0 && v < 65536:
		g.b = append(g.b, opBinInt2)
		g.b = binary.LittleEndian.AppendUint16(g.b, uint16(v))
	case v == int64(int32(v)):
		g.b = append(g.b, opBinInt)
		g.b = binary.LittleEndian.AppendUint32(g.b, uint32(v))
	default:
		var le [9]byte
		binary.LittleEndian.PutUint64(le[:], uint64(v))
		k := 8
		if v > 0 {
			for k > 1 && le[k-1] == 0 && le[k-2]&0x80 == 0 {
				k--
			}
			if le[k-1]&0x80 != 0 {
				k++ // a sign byte
			}
		}
		g.b = append(g.b, opLong1, byte(k))
		g.b = append(g.b, le[:k]...)
	}
}

// value writes a field's value: usually an int from want, sometimes
// anything else.
func (g *evGen) value(want int64) {
	switch g.pick(40) {
	case 1:
		g.n(-want - 1)
	case 2:
		g.b = append(g.b, opNone)
	case 3:
		g.s("N/A")
	case 4:
		if len(g.used) > 0 {
			g.get(g.used[g.pick(len(g.used))])
			return
		}
		g.n(want)
	case 5:
		g.b = append(g.b, opLong1, 9)
		g.b = binary.LittleEndian.AppendUint64(g.b, uint64(want)|1<<63)
		g.b = append(g.b, 0)
	case 6:
		g.b = append(g.b, opLong1, 0)
	case 7:
		g.n(want + 1)
	default:
		g.n(want)
	}
	if g.rare(30) {
		g.store()
	}
}

var genActions = []string{"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot", "bogus"}

func (g *evGen) frames() {
	c := g.pick(12)
	if g.stacks && c == 0 {
		c = 1 // a program recorded with stacks: lists of frames by default
	}
	switch c {
	case 1, 2:
		// a list of frame dicts, most fetched from the memo
		g.b = append(g.b, opEmptyList)
		if !g.rare(10) {
			g.frl = append(g.frl, g.store())
		}
		g.b = append(g.b, opMark)
		for range 1 + g.pick(4) {
			if len(g.frd) > 0 && !g.rare(8) {
				g.get(g.frd[g.pick(len(g.frd))])
				continue
			}
			g.b = append(g.b, opEmptyDict)
			g.frd = append(g.frd, g.memoize())
			g.b = append(g.b, opMark)
			g.s("filename")
			g.s([]string{"a.py", "b.py"}[g.pick(2)])
			g.s("line")
			g.n(int64(g.pick(50)))
			g.s("name")
			g.s("f")
			g.b = append(g.b, opSetItems)
		}
		g.b = append(g.b, opAppends)
	case 3:
		switch {
		case len(g.frd) > 0 && g.rare(4):
			g.get(g.frd[g.pick(len(g.frd))]) // a frame dict, not a list
		case len(g.frl) > 0:
			g.get(g.frl[g.pick(len(g.frl))])
		default:
			g.b = append(g.b, opEmptyList)
		}
	case 4:
		g.b = append(g.b, opNone)
	default:
		g.b = append(g.b, opEmptyList)
		g.store()
	}
}

// event writes one event dict; addr and t make its values.
func (g *evGen) event(addr, t int64) {
	g.b = append(g.b, opEmptyDict)
	if !g.rare(20) {
		g.dict = append(g.dict, g.store())
	}
	g.b = append(g.b, opMark)
	keys := []string{"action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata", "frames"}
	switch g.pick(16) {
	case 1:
		i, j := g.pick(len(keys)), g.pick(len(keys))
		keys[i], keys[j] = keys[j], keys[i]
	case 2:
		i := g.pick(len(keys))
		keys = append(keys[:i], keys[i+1:]...)
	case 3:
		keys = append(keys, keys[g.pick(len(keys))])
	case 4:
		keys = append(keys, []string{"device_free", "extra", "filename"}[g.pick(3)])
	}
	for k, key := range keys {
		if k > 0 && g.rare(40) {
			g.b = append(g.b, opSetItems, opMark) // a second SETITEMS
		}
		g.s(key)
		switch key {
		case "action":
			if g.rare(30) {
				g.value(1)
			} else {
				g.s(genActions[g.pick(len(genActions))])
			}
		case "addr":
			g.value(addr)
		case "size", "device_free":
			g.value(512 * int64(1+g.pick(4)))
		case "stream":
			g.value(int64(g.pick(2)))
		case "time_us":
			g.value(t)
		case "frames":
			g.frames()
		default:
			if g.rare(20) && len(g.dict) > 0 {
				g.get(g.dict[g.pick(len(g.dict))]) // an event dict again
			} else if key == "compile_context" {
				g.s("N/A")
			} else {
				g.s("")
			}
		}
	}
	g.b = append(g.b, opSetItems)
}

// header writes the start of a snapshot: its dict, the items extra
// writes (nil: none), "segments" an empty list, "device_traces" a list
// opened (MARK) for the lists of events.
func (g *evGen) header(extra func()) {
	g.b = append(g.b, opEmptyDict)
	g.memoize()
	g.b = append(g.b, opMark)
	if extra != nil {
		extra()
	}
	g.s("segments")
	g.b = append(g.b, opEmptyList)
	g.memoize()
	g.s("device_traces")
	g.b = append(g.b, opEmptyList)
	g.memoize()
	g.b = append(g.b, opMark)
}

// genSnapshot writes a snapshot pickle of events as src chooses.
func genSnapshot(src []byte, events int) []byte {
	g := &evGen{src: src, b: []byte{opProto, 4}, set: map[int]bool{}, str: map[string]int{}}
	g.stacks = g.pick(2) == 1
	g.header(nil)
	for range 1 + g.pick(2) {
		g.b = append(g.b, opEmptyList)
		g.memoize()
		addr := int64(1 << 40)
		for e := 0; e < events; {
			if g.rare(8) {
				g.event(addr, int64(e))
				g.b = append(g.b, opAppend)
				e++
				continue
			}
			g.b = append(g.b, opMark)
			for k := 1 + g.pick(64); k > 0 && e < events; k-- {
				addr += 512 * int64(g.pick(5)-2)
				g.event(addr, 1_700_000_000_000_000+int64(e))
				e++
			}
			g.b = append(g.b, opAppends)
		}
	}
	g.b = append(g.b, opAppends, opSetItems, opStop)
	return g.b
}

// checkSame requires Read and Stream, fast paths on, to give what the
// general decoder gives: the same snapshot or the same error.
func checkSame(t *testing.T, data []byte) {
	t.Helper()
	want, werr := readGeneral(data)
	got, gerr := Read(bytes.NewReader(data), "", int64(len(data)))
	streamed, serr := streamAll(data)
	if fmt.Sprint(werr) != fmt.Sprint(gerr) || fmt.Sprint(werr) != fmt.Sprint(serr) {
		t.Fatalf("general: %v\nRead: %v\nStream: %v", werr, gerr, serr)
	}
	if werr == nil && (!reflect.DeepEqual(got, want) || !reflect.DeepEqual(streamed, want)) {
		t.Fatal("the fast paths read another snapshot than the general decoder")
	}
}

func FuzzFastMatchesGeneral(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0, 0, 11, 0, 0, 0, 0, 0, 0, 23, 0, 0, 0, 5})
	f.Add(bytes.Repeat([]byte{0, 1, 0, 0, 0, 39, 0, 0, 2}, 40))
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > 4<<10 {
			return // longer choices reach no new code, and slow minimizing
		}
		checkSame(t, genSnapshot(src, 1500))
	})
}

// Random perturbations of event sequences, as the fuzz target makes
// them, read alike with the fast paths on and off.
func TestFastMatchesGeneral(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 300
	if testing.Short() {
		n = 50
	}
	for i := range n {
		src := randomChoices(r)
		data := genSnapshot(src, 2000)
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkSame(t, data) })
	}
}

// randomChoices makes choices for genSnapshot: mostly the usual layout,
// so that the template is used, with perturbations dense or sparse.
func randomChoices(r *rand.Rand) []byte {
	src := make([]byte, 1+r.IntN(20000))
	density := []int{4, 40, 400}[r.IntN(3)]
	for j := range src {
		if r.IntN(density) == 0 {
			src[j] = byte(r.IntN(256))
		}
	}
	src[0] = byte(r.IntN(2)) // with stacks or without
	return src
}

// A key's memo slot written again by a dict the general path reads: the
// template learned before must not stand for the next event. The third
// event (frames: the general path) stores its "N/A" over the slot of
// "addr", so the fourth, laid out like the second, has no address.
func TestTemplateSeesSlotWrittenAgain(t *testing.T) {
	frame := pdict{{"filename", "a.py"}, {"line", 1}, {"name", "f"}}
	evs := []pdict{ptEvent("alloc", 512, 512, nil), ptEvent("alloc", 1024, 512, nil),
		ptEvent("alloc", 1536, 512, []any{frame}), ptEvent("alloc", 2048, 512, nil)}
	for i := range 10 { // the template wants bytes after a dict
		evs = append(evs, ptEvent("alloc", 4096+512*i, 512, nil))
	}
	data := memoPickle([][]pdict{evs})
	const addrSlot, naSlot = 9, 14 // memoPickle's numbering of the first event's strings
	if !bytes.Contains(data, []byte{opShortBinUnicode, 4, 'a', 'd', 'd', 'r', opMemoize}) || bytes.Count(data, []byte{opBinGet, naSlot}) != 13 {
		t.Fatal("memoPickle lays the events out otherwise: update the slots")
	}
	third := 0
	for range 2 {
		third += 2 + bytes.Index(data[third:], []byte{opBinGet, naSlot})
	}
	third += bytes.Index(data[third:], []byte{opBinGet, naSlot})
	data = append(data[:third+2:third+2], append([]byte{opBinPut, addrSlot}, data[third+2:]...)...)
	_, want := readGeneral(data)
	if want == nil || !strings.Contains(want.Error(), `no "addr" key`) {
		t.Fatalf("the general decoder: %v, want the fourth event without an address", want)
	}
	checkSame(t, data)
}

// replaceOnce replaces the n'th (from 0) occurrence of old in b.
func replaceOnce(t *testing.T, b, old, new []byte, n int) []byte {
	t.Helper()
	at := 0
	for range n + 1 {
		i := bytes.Index(b[at:], old)
		if i < 0 {
			t.Fatalf("occurrence %d of % x missing: memoPickle lays the events out otherwise", n, old)
		}
		at += i + len(old)
	}
	at -= len(old)
	return slices.Concat(b[:at], new, b[at+len(old):])
}

// An event dict's memo slot written again before its list takes it
// keeps what was written (the general path's closed leaves it): the
// second event stores "alloc" over the first's slot, and the third
// takes its action from there.
func TestTakenEventKeepsSlotWrittenAgain(t *testing.T) {
	data := memoPickle([][]pdict{{ptEvent("alloc", 512, 512, nil), ptEvent("alloc", 1024, 512, nil)},
		{ptEvent("alloc", 1536, 512, nil)}})
	const dictSlot, allocSlot, naSlot = 6, 8, 14 // memoPickle's numbering of the first event
	data = replaceOnce(t, data, []byte{opBinGet, naSlot}, []byte{opBinGet, allocSlot, opBinPut, dictSlot}, 0)
	data = replaceOnce(t, data, []byte{opBinGet, 7, opBinGet, allocSlot}, []byte{opBinGet, 7, opBinGet, dictSlot}, 1)
	want, err := readGeneral(data)
	if err != nil || len(want.Traces[1]) != 1 || want.Traces[1][0].Action != model.ActionAlloc {
		t.Fatalf("the general decoder: %v, want the third event an alloc", err)
	}
	checkSame(t, data)
}

// A MEMOIZE after a BINPUT over a slot the same dict stored: the memo
// count must not take the BINPUT for a new slot. "device_traces" is
// stored far ahead, so that the memo reaches past the first event's
// slots; the first event stores "user_metadata" over its own "addr"; the
// second, fetching its keys, finds no address there.
func TestFastStoreOverOwnSlot(t *testing.T) {
	evs := []pdict{ptEvent("alloc", 512, 512, nil), ptEvent("alloc", 1024, 512, nil)}
	for i := range 10 {
		evs = append(evs, ptEvent("alloc", 4096+512*i, 512, nil))
	}
	data := memoPickle([][]pdict{evs})
	const addrSlot = 9
	key := append([]byte{opShortBinUnicode, 13}, "device_traces"...)
	data = replaceOnce(t, data, append(key, opMemoize), append(key, opBinPut, 30), 0)
	key = append([]byte{opShortBinUnicode, 13}, "user_metadata"...)
	data = replaceOnce(t, data, append(key, opMemoize), append(key, opBinPut, addrSlot), 0)
	_, want := readGeneral(data)
	if want == nil || !strings.Contains(want.Error(), `no "addr" key`) {
		t.Fatalf("the general decoder: %v, want the second event without an address", want)
	}
	checkSame(t, data)
}

// The action a fixed layout keeps for a BINGET index (template.facts) is
// not kept past a write of its slot: the thirteenth event stores
// "free_requested" over the slot of "alloc", which the events after it
// fetch as their action.
func TestFixedActionSeesSlotWrittenAgain(t *testing.T) {
	evs := []pdict{ptEvent("alloc", 512, 512, nil), ptEvent("free_requested", 512, 512, nil)}
	for i := range 20 {
		evs = append(evs, ptEvent("alloc", 1024+512*i, 512, nil))
	}
	data := memoPickle([][]pdict{evs})
	const actionSlot, allocSlot, freeSlot = 7, 8, 20 // memoPickle's numbering
	data = replaceOnce(t, data, []byte{opBinGet, actionSlot, opBinGet, allocSlot},
		[]byte{opBinGet, actionSlot, opBinGet, freeSlot, opBinPut, allocSlot}, 10)
	want, err := readGeneral(data)
	if err != nil || len(want.Traces[0]) != len(evs) || want.Traces[0][11].Action != model.ActionAlloc ||
		want.Traces[0][12].Action != model.ActionFreeRequested || want.Traces[0][20].Action != model.ActionFreeRequested {
		t.Fatalf("the general decoder: %v, want the events from the thirteenth free_requested", err)
	}
	checkSame(t, data)
}
