//go:build !unix

package replay

// tapeChunk is size bytes for a tape, on the Go heap (mapped false).
func tapeChunk(size int) (b []byte, mapped bool) { return make([]byte, 0, size), false }

// freeTapeChunk is never called here: no chunk is mapped.
func freeTapeChunk([]byte) {}
