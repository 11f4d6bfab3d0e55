package pipeline

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
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
	set, err := ReplaySet(SetSource{Paths: paths}, Settings{Policy: "pytorch"})
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
