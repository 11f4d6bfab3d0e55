package pickle

import (
	"github.com/gpumem/gpumem/pkg/trace/model"

	"bytes"
	"os"
	"runtime"
	"testing"
)

// BenchmarkReadPickle decodes the snapshot named by GPUMEM_BIG_TRACE,
// for instance one made by
//
//	python3 scripts/gen_trace.py /tmp/big.pickle
//
// (1,000,000 events, about 51 MB). It reports the live heap the
// model.Snapshot keeps, as a multiple of the file size.
func BenchmarkReadPickle(b *testing.B) {
	data := bigTrace(b)
	var s *model.Snapshot
	var err error
	for b.Loop() {
		s, err = Read(bytes.NewReader(data), "", int64(len(data)))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := 0
	for _, tr := range s.Traces {
		n += len(tr)
	}
	b.ReportMetric(float64(n), "events")
	var with, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&with)
	runtime.KeepAlive(s)
	s = nil
	runtime.GC()
	runtime.ReadMemStats(&without)
	live := float64(with.HeapAlloc) - float64(without.HeapAlloc)
	b.ReportMetric(live/1e6, "live-MB")
	b.ReportMetric(live/float64(len(data)), "live/file")
}

// BenchmarkStreamPickle decodes the snapshot named by GPUMEM_BIG_TRACE as
// Stream does, handing its events to a sink that only counts them.
func BenchmarkStreamPickle(b *testing.B) {
	data := bigTrace(b)
	n := 0
	for b.Loop() {
		n = 0
		if _, _, err := Stream(bytes.NewReader(data), "", int64(len(data)), Sink{Event: func(int, *model.Event) error { n++; return nil }}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "events")
}

// bigTrace reads the snapshot named by GPUMEM_BIG_TRACE, skipping b
// without one, and sets b's bytes per op to its size.
func bigTrace(b *testing.B) []byte {
	path := os.Getenv("GPUMEM_BIG_TRACE")
	if path == "" {
		b.Skip("set GPUMEM_BIG_TRACE to a snapshot pickle (make one with scripts/gen_trace.py)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Skipf("GPUMEM_BIG_TRACE: %v", err)
	}
	b.SetBytes(int64(len(data)))
	return data
}
