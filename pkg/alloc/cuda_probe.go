package alloc

/*
#include <stdlib.h>
#include <string.h>
#include "gm_cuda_probe.h"

// Go cannot call C function pointers; these do it for cudaProbe.
static int gm_p_malloc(gm_backend_t *b, uint64_t size, uint64_t hint, uint64_t *addr) { return b->malloc(b->ctx, size, hint, addr); }
static int gm_p_free(gm_backend_t *b, uint64_t addr, uint64_t size) { return b->free(b->ctx, addr, size); }
static int gm_p_va_reserve(gm_backend_t *b, uint64_t size, uint64_t page, uint64_t *addr) { return b->va_reserve(b->ctx, size, page, addr); }
static int gm_p_va_release(gm_backend_t *b, uint64_t addr, uint64_t size) { return b->va_release(b->ctx, addr, size); }
static int gm_p_map(gm_backend_t *b, uint64_t addr, uint64_t size, uint64_t page) { return b->map(b->ctx, addr, size, page); }
static int gm_p_unmap(gm_backend_t *b, uint64_t addr, uint64_t size, uint64_t page) { return b->unmap(b->ctx, addr, size, page); }
static int gm_p_mem_info(gm_backend_t *b, uint64_t *f, uint64_t *t) { return b->mem_info(b->ctx, f, t); }
static void gm_p_destroy(gm_backend_t *b) { b->destroy(b->ctx); }
*/
import "C"

import "unsafe"

// cudaProbe drives the CUDA backend's entry points one by one, below the
// allocator, and looks at its bookkeeping: for cuda_test.go only (a Go
// test file cannot use cgo).
type cudaProbe struct{ b *C.gm_backend_t }

// openCUDAProbe opens the backend for device; rc is gm_cuda_backend's,
// msg its message.
func openCUDAProbe(device int, msgLen int) (p *cudaProbe, rc int, msg string) {
	b := (*C.gm_backend_t)(C.calloc(1, C.sizeof_gm_backend_t))
	var buf *C.char
	if msgLen > 0 {
		buf = (*C.char)(C.calloc(C.size_t(msgLen), 1))
		defer C.free(unsafe.Pointer(buf))
		C.memset(unsafe.Pointer(buf), 'x', C.size_t(msgLen))
	}
	rc = int(C.gm_cuda_backend(C.int(device), b, buf, C.size_t(msgLen)))
	if buf != nil {
		raw := C.GoBytes(unsafe.Pointer(buf), C.int(msgLen))
		msg = string(raw)
		for i, c := range raw {
			if c == 0 {
				msg = string(raw[:i])
				break
			}
		}
	}
	if rc != C.GM_OK {
		C.free(unsafe.Pointer(b))
		return nil, rc, msg
	}
	return &cudaProbe{b}, rc, msg
}

func (p *cudaProbe) malloc(size, hint uint64) (uint64, int) {
	var a C.uint64_t
	rc := C.gm_p_malloc(p.b, C.uint64_t(size), C.uint64_t(hint), &a)
	return uint64(a), int(rc)
}

func (p *cudaProbe) free(addr, size uint64) int {
	return int(C.gm_p_free(p.b, C.uint64_t(addr), C.uint64_t(size)))
}

func (p *cudaProbe) vaReserve(size, page uint64) (uint64, int) {
	var a C.uint64_t
	rc := C.gm_p_va_reserve(p.b, C.uint64_t(size), C.uint64_t(page), &a)
	return uint64(a), int(rc)
}

func (p *cudaProbe) vaRelease(addr, size uint64) int {
	return int(C.gm_p_va_release(p.b, C.uint64_t(addr), C.uint64_t(size)))
}

func (p *cudaProbe) mapPages(addr, size, page uint64) int {
	return int(C.gm_p_map(p.b, C.uint64_t(addr), C.uint64_t(size), C.uint64_t(page)))
}

func (p *cudaProbe) unmapPages(addr, size, page uint64) int {
	return int(C.gm_p_unmap(p.b, C.uint64_t(addr), C.uint64_t(size), C.uint64_t(page)))
}

func (p *cudaProbe) memInfo() (free, total uint64, rc int) {
	var f, t C.uint64_t
	rc = int(C.gm_p_mem_info(p.b, &f, &t))
	return uint64(f), uint64(t), rc
}

// state is the backend's bookkeeping: granularity, live segments,
// reservations and mapped pages, and the last error.
func (p *cudaProbe) state() (gran uint64, segs, resv, pages int, err string) {
	var s C.gm_cuda_probe_t
	C.gm_cuda_probe(p.b.ctx, &s)
	return uint64(s.gran), int(s.segs), int(s.resv), int(s.pages), C.GoString(s.err)
}

func (p *cudaProbe) lastErr() string { _, _, _, _, e := p.state(); return e }

// touch writes v over [addr, addr+n) on the device and reads back the ends
// of every stride: 1 all good, 0 not, -1 the driver lacks the calls. addr
// is an address the backend handed out: the device's is found behind it.
func (p *cudaProbe) touch(addr, n, stride uint64, v byte) int {
	dev := C.gm_cuda_probe_device_addr(p.b.ctx, C.uint64_t(addr))
	return int(C.gm_cuda_probe_touch(dev, C.uint64_t(n), C.uint64_t(stride), C.uchar(v)))
}

// otherThread mallocs and frees size bytes from a new OS thread.
func (p *cudaProbe) otherThread(size uint64) int {
	return int(C.gm_cuda_probe_other_thread(p.b, C.uint64_t(size)))
}

func (p *cudaProbe) destroy() {
	C.gm_p_destroy(p.b)
	C.free(unsafe.Pointer(p.b))
	p.b = nil
}

// cudaTable is the backend's address table alone.
type cudaTable struct{ t unsafe.Pointer }

func newCUDATable() cudaTable { return cudaTable{C.gm_cuda_probe_table_new()} }

func (t cudaTable) put(key, val uint64) bool {
	return C.gm_cuda_probe_table_put(t.t, C.uint64_t(key), C.uint64_t(val)) == 0
}

func (t cudaTable) get(key uint64) (uint64, bool) {
	var v C.uint64_t
	ok := C.gm_cuda_probe_table_get(t.t, C.uint64_t(key), &v) != 0
	return uint64(v), ok
}

func (t cudaTable) del(key uint64) bool { return C.gm_cuda_probe_table_del(t.t, C.uint64_t(key)) != 0 }

func (t cudaTable) len() int { return int(C.gm_cuda_probe_table_len(t.t)) }

func (t cudaTable) free() { C.gm_cuda_probe_table_free(t.t) }
