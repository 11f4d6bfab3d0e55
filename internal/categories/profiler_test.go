package categories

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// profilerRecording is what scripts/categories/record.py wrote beside a
// snapshot: the profiler's memory categories.
type profilerRecording struct {
	Program  string `json:"program"`
	PeakStat uint64 `json:"allocated_bytes.all.peak"`
	Profiler struct {
		PeakTimeUS int64            `json:"peak_time_us"`
		PeakTotal  uint64           `json:"peak_total"`
		AtPeak     map[string]int64 `json:"at_peak"`
		Tensors    [][]any          `json:"tensors"`
	} `json:"profiler"`
}

func readRecording(t *testing.T, name string) (*trace.Snapshot, *profilerRecording) {
	t.Helper()
	dir := filepath.Join("testdata", "profiler")
	snap, err := trace.Open(filepath.Join(dir, name+".pickle.gz"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, name+".profiler.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var rec profilerRecording
	if err := json.NewDecoder(z).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	return snap, &rec
}

// profilerLive is, per address, the profiler's category of the tensor
// storage live there at time us (microseconds), from its timeline.
func profilerLive(rec *profilerRecording, us int64) map[uint64]string {
	live := map[uint64]string{}
	ids := map[uint64]int64{}
	for _, t := range rec.Profiler.Tensors {
		tns, _ := t[0].(float64)
		if int64(tns)/1000 > us {
			break
		}
		ptrf, ok := t[2].(float64)
		if !ok {
			continue
		}
		ptr := uint64(ptrf)
		id := int64(t[3].(float64))
		switch t[1].(string) {
		case "CREATE", "PREEXISTING", "INCREMENT_VERSION":
			live[ptr] = t[6].(string)
			ids[ptr] = id
		case "DESTROY":
			if ids[ptr] == id {
				delete(live, ptr)
			}
		}
	}
	return live
}

// profilerOf maps a category to the profiler's: it has no buffer (it
// counts module buffers as parameters), no workspace (no tensor: its
// unknown), and splits temporaries into temporary and autograd_detail.
func profilerOf(c Category) string {
	switch c {
	case Buffer:
		return "parameter"
	case Workspace:
		return "unknown"
	}
	return c.String()
}

func profilerName(s string) string {
	if s == "autograd_detail" {
		return "temporary"
	}
	return s
}

// stripStacks is snap as recorded without stacks.
func stripStacks(snap *trace.Snapshot) *trace.Snapshot {
	out := *snap
	out.Stacks = nil
	out.Traces = [][]trace.Event{append([]trace.Event(nil), snap.Traces[0]...)}
	for i := range out.Traces[0] {
		out.Traces[0][i].Stack = -1
	}
	return &out
}

// TestProfilerRecordings compares the categories at the peak with
// torch.profiler's on the programs scripts/categories/record.py recorded
// on an H200: block by block where the profiler knew the tensor, and in
// total per category (-v prints the table of docs/categories.md).
func TestProfilerRecordings(t *testing.T) {
	var table, agreement strings.Builder
	table.WriteString("| program | category | gpumem MiB | profiler MiB |\n|---|---|--:|--:|\n")
	mib := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
	for _, name := range []string{"gpt", "ckpt", "leak", "resnet"} {
		snap, rec := readRecording(t, name)
		for _, stacks := range []bool{true, false} {
			s := snap
			if !stacks {
				s = stripStacks(snap)
			}
			r := Classify(s, 0)
			peak, peakBytes, atPeak := peakOf(r)
			var sum uint64
			for _, n := range atPeak {
				sum += n
			}
			if sum != peakBytes {
				t.Errorf("%s: categories sum to %d, peak %d", name, sum, peakBytes)
			}
			// the peak is the profiler's (requests rounded to 512 B;
			// blocks the allocator did not split are larger still)
			if d := float64(rec.PeakStat) - float64(peakBytes); d < 0 || d > 0.01*float64(rec.PeakStat) {
				t.Errorf("%s: peak %d, PyTorch's %d", name, peakBytes, rec.PeakStat)
			}
			if atPeak[Unknown] != 0 {
				t.Errorf("%s (stacks %v): %d bytes unknown", name, stacks, atPeak[Unknown])
			}
			live := profilerLive(rec, rec.Profiler.PeakTimeUS)
			var known, agree uint64
			addr := addrs(r, s)
			for i, b := range r.All() {
				if int(b.Born) > peak || int(b.Freed) <= peak {
					continue // not live at the peak
				}
				pc, ok := live[addr[i]]
				if !ok || pc == "unknown" {
					continue
				}
				known += b.Size()
				if profilerName(pc) == profilerOf(b.Category) {
					agree += b.Size()
				} else {
					t.Logf("%s: %s (%s) at %#x of %d B: the profiler's %s", name, b.Category, b.Rule, addr[i], b.Size(), pc)
				}
			}
			if known == 0 || float64(agree) < 0.98*float64(known) {
				t.Errorf("%s (stacks %v): %d of the %d bytes the profiler categorised agree", name, stacks, agree, known)
			}
			fmt.Fprintf(&agreement, "%s, stacks %v: %d of %d bytes agree (%.3f%%), %d differ\n", name, stacks, agree, known,
				100*float64(agree)/float64(known), known-agree)
			if !stacks {
				continue
			}
			prof := map[string]int64{}
			for k, v := range rec.Profiler.AtPeak {
				prof[profilerName(k)] += v
			}
			ours := map[string]int64{}
			for c := Category(0); c < NumCategories; c++ {
				ours[profilerOf(c)] += int64(atPeak[c])
			}
			for _, c := range []string{"parameter", "optimizer_state", "gradient", "activation", "temporary", "input", "unknown"} {
				if ours[c] == 0 && prof[c] == 0 {
					continue
				}
				fmt.Fprintf(&table, "| %s | %s | %s | %s |\n", name, c, mib(ours[c]), mib(prof[c]))
			}
			fmt.Fprintf(&table, "| %s | (agreement where the profiler knew the tensor) | %.1f%% of %s MiB | |\n", name,
				100*float64(agree)/float64(known), mib(int64(known)))
		}
	}
	t.Log("\n" + table.String() + "\n" + agreement.String())
}
