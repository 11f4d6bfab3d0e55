package exporter

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// FuzzSpoolRecord reads any bytes as a spool file: it never panics, a
// record it accepts passes its own checks, and its metrics (labels from
// the writer's strings included) are all made.
func FuzzSpoolRecord(f *testing.F) {
	good, _ := json.Marshal(map[string]any{"pid": 7, "rank": 1, "device": 0, "uuid": "GPU-x", "job": "j",
		"pod": "p", "namespace": "n", "container": "c", "time": 1.7e9, "interval": 15, "largest_free_block": 5,
		"memory_stats": map[string]float64{"reserved_bytes.all.current": 10, "allocated_bytes.all.current": 4,
			"active_bytes.all.current": 5, "inactive_split_bytes.all.current": 1, "reserved_bytes.all.peak": 12, "num_ooms": 1}})
	f.Add(good)
	f.Add([]byte(`{"pid": 7, "job": "\xff\xfe", "pod": "\u202e", "memory_stats": {}}`))
	f.Add([]byte(`{"pid": 7, "time": 1e300, "interval": -0}`))
	f.Add([]byte(`[`))
	dir := f.TempDir()
	path := filepath.Join(dir, "7-0123456789abcdef.json")
	c := newSpoolCollector(&spoolReader{dir: dir}, nil, "h", nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		rec, _, n, err := readRecord(path)
		if n > maxSpoolFile+1 {
			t.Fatalf("read %d bytes", n)
		}
		if err != nil {
			return
		}
		if rec.PID != 7 || rec.MemoryStats == nil || len(rec.MemoryStats) > maxStatKeys {
			t.Fatalf("accepted %+v", rec)
		}
		ch := make(chan prometheus.Metric, 64)
		go func() {
			for _, g := range groupRecords([]Record{rec}, "h", nil) {
				c.emitGroup(ch, g)
			}
			close(ch)
		}()
		for m := range ch {
			if err := m.Write(&dto.Metric{}); err != nil {
				t.Fatal(err)
			}
		}
	})
}
