package alloc

/*
#cgo noescape gm_unpack
#cgo nocallback gm_unpack
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
