package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/budget"
	"github.com/gpumem/gpumem/internal/sweep"
)

// TestReplaySetTruth replays the two ranks of a DDP job, given as a glob,
// and checks each against the memory_stats PyTorch printed on its GPU.
func TestReplaySetTruth(t *testing.T) {
	paths, err := ExpandTraces([]string{pytorchFixture("ddp/ddp_gpt2.rank*.pickle")})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 || RankOf(paths[0]) != 0 || RankOf(paths[1]) != 1 {
		t.Fatalf("glob gave %q", paths)
	}
	set, err := ReplaySet(context.Background(), SetSource{Paths: paths}, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Runs) != 2 || !slices.Equal(set.Ranks, []int{0, 1}) {
		t.Fatalf("ranks %v, want [0 1]", set.Ranks)
	}
	for i, r := range set.Runs {
		var truth struct {
			Device      int              `json:"device"`
			MemoryStats map[string]int64 `json:"memory_stats"`
		}
		b, err := os.ReadFile(pytorchFixture("ddp/ddp_gpt2.rank" + string(rune('0'+i)) + ".truth.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &truth); err != nil {
			t.Fatal(err)
		}
		if r.Report.Device != truth.Device {
			t.Errorf("rank %d replayed device %d, want %d (the one with events)", i, r.Report.Device, truth.Device)
		}
		got, n := r.Report.Stats.Map(), 0
		for k, v := range truth.MemoryStats {
			if g, ok := got[k]; ok {
				n++
				if g != v {
					t.Errorf("rank %d %s = %d, want %d", i, k, g, v)
				}
			}
		}
		if n < 40 {
			t.Errorf("rank %d: only %d memory_stats keys compared", i, n)
		}
	}
	if set.Worst != 0 {
		t.Errorf("worst = %d, want 0 (equal peaks: the first)", set.Worst)
	}
}

func TestExpandTraces(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.rank10.pickle", "a.rank2.pickle", "notes.md", "a.rank1.pickle"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ExpandTraces([]string{dir, filepath.Join(dir, "a.rank2.pickle")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "a.rank1.pickle"), filepath.Join(dir, "a.rank2.pickle"), filepath.Join(dir, "a.rank10.pickle")}
	if !slices.Equal(got, want) {
		t.Errorf("folder: got %q, want %q (rank order, no repeats, no notes.md)", got, want)
	}
	var pe *Error
	if _, err := ExpandTraces([]string{filepath.Join(dir, "*.csv")}); !errors.As(err, &pe) || pe.Kind != Input {
		t.Errorf("a glob matching nothing: %v, want an Input error", err)
	}
	if _, err := ExpandTraces([]string{t.TempDir()}); !errors.As(err, &pe) || pe.Kind != Input {
		t.Errorf("an empty folder: %v, want an Input error", err)
	}
	if r := RankOf("x/run.rank7.step100.pickle"); r != 7 {
		t.Errorf("RankOf = %d, want 7", r)
	}
	if r := RankOf("snapshot.pickle"); r != -1 {
		t.Errorf("RankOf = %d, want -1", r)
	}
}

// A sweep over a set has one row per setting, the worst of its ranks:
// here two unlike traces, so the worst differs by setting.
func TestSweepSet(t *testing.T) {
	grid, err := sweep.ParseGrid("defaults;expandable_segments:True;max_split_size_mb:64")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{pytorchFixture("ddp/ddp_gpt2.rank0.pickle"), pytorchFixture("gpt2_varlen.pickle")}
	sweepOf := func(traces ...string) map[string]sweep.Row {
		rep, err := Sweep(context.Background(), SweepInput{Traces: traces, Grid: grid, Cards: []uint64{8 << 30}, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]sweep.Row{}
		for _, r := range rep.Rows {
			rows[r.Label] = r
		}
		if len(rows) != len(grid) {
			t.Fatalf("%d rows for %d settings: %v", len(rep.Rows), len(grid), rep.Rows)
		}
		return rows
	}
	set, a, b := sweepOf(files...), sweepOf(files[0]), sweepOf(files[1])
	for label, r := range set {
		ra, rb := a[label], b[label]
		if want := max(ra.PeakReserved(), rb.PeakReserved()); r.PeakReserved() != want {
			t.Errorf("%s: peak reserved %d, want the worst rank's %d", label, r.PeakReserved(), want)
		}
		// gpt2_varlen does not fit 8 GiB: neither does the set
		if r.Cards[0].Fits() != (ra.Cards[0].Fits() && rb.Cards[0].Fits()) {
			t.Errorf("%s: fits %v, want every rank to fit", label, r.Cards[0].Fits())
		}
	}
}

// A fragcheck case naming a set (a traces list, or a glob) is budgeted on
// its worst rank.
func TestCheckSet(t *testing.T) {
	f, err := budget.Parse("fragcheck.yaml", []byte(`version: 1
cases:
  - name: ddp
    trace: ddp/ddp_gpt2.rank*.pickle
    max_reserved: 5GiB
  - traces: [ddp/ddp_gpt2.rank0.pickle, gpt2_varlen.pickle]
    max_reserved: 5GiB
  - traces: [ddp/missing.rank*.pickle]
`))
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.Cases {
		f.Cases[i].Dir = pytorchFixture("")
	}
	if f.Cases[1].Name != "ddp_gpt2.rank0" {
		t.Errorf("a traces case is named %q, want it after its first trace", f.Cases[1].Name)
	}
	res := Check(context.Background(), f.Cases, &budget.Checker{}, 2)
	want := []budget.Status{budget.Pass, budget.Fail, budget.Error}
	for i, r := range res {
		if r.Status() != want[i] {
			t.Errorf("case %d (%s): %v, want %v: %+v", i, f.Cases[i].Source(), r.Status(), want[i], r.Findings)
		}
	}
	if got := res[0].Figures.PeakReserved; got != 4311744512 {
		t.Errorf("the ddp set's peak reserved %d, want its worst rank's 4311744512", got)
	}
	if _, err := budget.Parse("f.yaml", []byte("version: 1\ncases:\n  - traces: a.pickle\n")); err == nil || !strings.Contains(err.Error(), "want a list") {
		t.Errorf("traces as a string: %v", err)
	}
}

// A file named for a rank is one process: when it also holds a few events
// on another device (a tensor made before set_device), it is still one
// rank, on the device it allocated on most, with a note.
func TestRankFileIsOneRank(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("# gpumem-trace v1\ndevice 0\nalloc 0x7f0000000000 512\nfree 0x7f0000000000\ndevice 1\n")
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&b, "alloc 0x7f1000000000 %d\nfree 0x7f1000000000\n", (i+1)<<20)
	}
	path := filepath.Join(dir, "job.rank1.trace")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := ReplaySet(context.Background(), SetSource{Paths: []string{path}}, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Runs) != 1 || set.Runs[0].Report.Device != 1 || set.Ranks[0] != 1 {
		t.Fatalf("%d runs, device %d, rank %d", len(set.Runs), set.Runs[0].Report.Device, set.Ranks[0])
	}
	if n := set.Runs[0].Notes; len(n) != 1 || !strings.Contains(n[0], "replaying device 1") || !strings.Contains(n[0], "device(s) 0") {
		t.Errorf("notes %q", n)
	}
	// without a rank in its name, each device is a rank
	other := filepath.Join(dir, "job.trace")
	os.Rename(path, other)
	if set, err = ReplaySet(context.Background(), SetSource{Paths: []string{other}}, Settings{}); err != nil || len(set.Runs) != 2 {
		t.Fatalf("%v, %d runs", err, len(set.Runs))
	}
}
