package trace

import (
	"bytes"
	"testing"
)

func BenchmarkZZSmall(b *testing.B) {
	data := pickleOf(snapshotOf(event("alloc", 1, 2)))
	for b.Loop() {
		ReadPickle(bytes.NewReader(data), int64(len(data)))
	}
}
func BenchmarkZZSmallNoSize(b *testing.B) {
	data := pickleOf(snapshotOf(event("alloc", 1, 2)))
	for b.Loop() {
		ReadPickle(bytes.NewReader(data), -1)
	}
}
