package replay

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

func TestScratchBaseline(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtures, "*.pickle"))
	if os.Getenv("BIG") != "" {
		files = append(files, "/tmp/big.pickle")
	}
	for _, f := range files {
		snap, err := trace.ReadPickleFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := FromSnapshot(snap, 0)
		t.Logf("%s", filepath.Base(f))
		type cfgp struct {
			conf string
			pol  alloc.Policy
		}
		runs := []cfgp{{"", "pytorch"}, {"expandable_segments:True", "pytorch"}}
		for _, pol := range alloc.Policies()[1:] {
			runs = append(runs, cfgp{"", pol})
		}
		for _, r := range runs {
			cfg, _ := alloc.ParseConfig(r.conf)
			cfg.Policy = r.pol
			t1 := time.Now()
			res, err := Run(p, Options{Config: cfg, Check: os.Getenv("BIG") == ""})
			if err != nil {
				t.Fatalf("%s %s: %v", r.pol, r.conf, err)
			}
			lb := res.Extra.LiveBytesPeak
			pk := res.Stats.ReservedBytes[alloc.All].Peak
			t.Logf("  %-10s %-26q LB %d peak %d (+%.2f MiB) ratio %.4f  %v dev %d/%d", r.pol, r.conf, lb, pk, float64(pk-lb)/(1<<20), float64(pk)/float64(lb), time.Since(t1), res.Stats.NumDeviceAlloc, res.Stats.NumDeviceFree)
		}
	}
}
