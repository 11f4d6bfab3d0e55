package alloc

/*
#cgo noescape gm_unpack
#cgo nocallback gm_unpack
#cgo noescape gm_run_packed
#cgo nocallback gm_run_packed
#include "gm_alloc.h"
*/
import "C"

import "unsafe"

// Unpacker reads a packed op log, the replay's compact form of a plan's
// operations (its format: gm_alloc.h, "The packed op log"); it carries
// the last op's event and stack and a cache of sizes from one op to the
// next. The zero Unpacker is at a log's start.
type Unpacker struct {
	c C.gm_unpack_t
}

// Unpack unpacks the ops packed in b, those after the ones u has read,
// into ops, event and stack (each op, its event and its stack; event and
// stack at least as long as ops) until b or ops ends, and returns how
// many it unpacked and the bytes of b they took. b must hold whole ops,
// and u have read every op of the log before them, in order: Unpack
// panics when the last op it reads runs past b's end.
func (u *Unpacker) Unpack(b []byte, ops []Op, event, stack []int32) (n, used int) {
	if len(b) == 0 || len(ops) == 0 {
		return 0, 0
	}
	if len(event) < len(ops) || len(stack) < len(ops) {
		panic("alloc: Unpack's event or stack is shorter than its ops")
	}
	var done, nb C.size_t
	// Op has gm_op_t's layout (checked by a test) and no Go pointers
	rc := C.gm_unpack(&u.c, (*C.uint8_t)(unsafe.Pointer(&b[0])), C.size_t(len(b)), C.size_t(len(ops)),
		(*C.gm_op_t)(unsafe.Pointer(&ops[0])), (*C.int32_t)(unsafe.Pointer(&event[0])), (*C.int32_t)(unsafe.Pointer(&stack[0])),
		&done, &nb)
	if rc != C.GM_OK {
		panic("alloc: a packed op log cut short or garbled")
	}
	return int(done), int(nb)
}

// RunPacked is RunSized of the ops packed in b, those after the ones u
// has read: it applies up to n of them (from op index base), each as C
// reads it into ops and event (as Unpack does, but for the stacks; each
// at least n long), without a pass that unpacks them first, and returns with Run's
// result and error the bytes of b the ops applied took. It stops at b's
// end, after n ops, or where Run would stop; ops[Result.Done] is then the
// op that stopped it (an out-of-memory or an error), and u reads the log
// no further. sizes is RunSized's (nil: none). b must hold whole ops, and
// u have read every op of the log before them, in order: RunPacked
// panics when an op runs past b's end, as Unpack does.
func (a *Allocator) RunPacked(u *Unpacker, b []byte, n, base int, tl *Timeline, ops []Op, event []int32, sizes []uint64) (res Result, used int, err error) {
	if len(b) == 0 || n <= 0 {
		return Result{}, 0, nil
	}
	if len(ops) < n || len(event) < n || sizes != nil && len(sizes) < n {
		panic("alloc: RunPacked's ops, event or sizes is shorter than n")
	}
	var csz *C.uint64_t
	if sizes != nil {
		csz = (*C.uint64_t)(unsafe.Pointer(&sizes[0]))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var nb C.size_t
	res, rc := a.runWindowLocked(n, base, tl, func(ctl *C.gm_timeline_t, done *C.size_t, oom *C.gm_oom_t) C.int {
		// Op has gm_op_t's layout (checked by a test) and no Go pointers
		return C.gm_run_packed(a.c, &u.c, (*C.uint8_t)(unsafe.Pointer(&b[0])), C.size_t(len(b)), C.size_t(n),
			done, &nb, oom, ctl, (*C.gm_op_t)(unsafe.Pointer(&ops[0])),
			(*C.int32_t)(unsafe.Pointer(&event[0])), csz)
	})
	if int(nb) > len(b) {
		panic("alloc: a packed op log cut short or garbled")
	}
	if rc != C.GM_OK && rc != C.GM_ENOMEM {
		err = a.opErrorLocked(rc, ops[:min(res.Done+1, n)], base, res.Done)
	}
	return res, int(nb), err
}
