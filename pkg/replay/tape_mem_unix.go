//go:build unix

package replay

import "syscall"

// tapeChunk is size bytes for a tape, mapped outside the Go heap where it
// can be (mapped): the collector then neither scans it nor counts it in
// the heap's growth, and unmapping it gives its memory back at once.
func tapeChunk(size int) (b []byte, mapped bool) {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, 0, size), false
	}
	return b[:0], true
}

// freeTapeChunk gives back a chunk tapeChunk mapped.
func freeTapeChunk(b []byte) {
	_ = syscall.Munmap(b[:cap(b)])
}
