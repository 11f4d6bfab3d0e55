package exporter

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkScrapeSpool measures one pass over a healthy spool (8 training
// processes) beside hostile ones: 100 files just under 1 MiB of keys (what
// took 4.6-23 s and 540 MB a scrape before the bounds) and 20,000 small
// valid files. Compare their ns/op and B/op with the healthy case's.
func BenchmarkScrapeSpool(b *testing.B) {
	rec := func(pid int) []byte {
		r, _ := json.Marshal(map[string]any{"pid": pid, "rank": pid % 8, "device": pid % 8, "time": float64(clock.Unix()),
			"interval": 15, "memory_stats": map[string]float64{"reserved_bytes.all.current": 1, "allocated_bytes.all.current": 1,
				"active_bytes.all.current": 1, "inactive_split_bytes.all.current": 0}})
		return r
	}
	big := func(pid int) []byte {
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"pid": %d, "time": %d, "memory_stats": {`, pid, clock.Unix())
		for i := 0; sb.Len() < 1<<20-64; i++ {
			fmt.Fprintf(&sb, `"k%d": %d, `, i, i)
		}
		sb.WriteString(`"reserved_bytes.all.current": 1}}`)
		return []byte(sb.String())
	}
	for _, c := range []struct {
		name  string
		n     int
		write func(int) []byte
	}{
		{"healthy-8", 8, rec},
		{"1MiB-files-100", 100, big},
		{"small-files-20000", 20000, rec},
	} {
		dir := b.TempDir()
		for pid := 1; pid <= c.n; pid++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.json", pid)), c.write(pid), 0o600); err != nil {
				b.Fatal(err)
			}
		}
		r := &spoolReader{dir: dir, interval: DefaultInterval, now: func() time.Time { return clock }, alive: func(int) bool { return true }}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
