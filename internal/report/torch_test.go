package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type truth struct {
	MemoryStats   map[string]int64 `json:"memory_stats"`
	MemorySummary string           `json:"memory_summary"`
}

func loadTruths(t *testing.T) map[string]truth {
	t.Helper()
	files, err := filepath.Glob("../../testdata/pytorch/*.truth.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no truth files in ../../testdata/pytorch")
	}
	out := make(map[string]truth)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tr truth
		if err := json.Unmarshal(data, &tr); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(tr.MemoryStats) != 122 || tr.MemorySummary == "" {
			t.Fatalf("%s: %d stats, summary %d bytes", f, len(tr.MemoryStats), len(tr.MemorySummary))
		}
		out[filepath.Base(f)] = tr
	}
	return out
}

func TestTorchSummaryMatchesPyTorch(t *testing.T) {
	for name, tr := range loadTruths(t) {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := TorchSummary(&buf, tr.MemoryStats, 0, false); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tr.MemorySummary {
				t.Errorf("summary differs\n%s", lineDiff(tr.MemorySummary, got))
			}
		})
	}
}

func TestTorchSummaryAbbreviated(t *testing.T) {
	for name, tr := range loadTruths(t) {
		var full, short bytes.Buffer
		if err := TorchSummary(&full, tr.MemoryStats, 3, false); err != nil {
			t.Fatal(err)
		}
		if err := TorchSummary(&short, tr.MemoryStats, 3, true); err != nil {
			t.Fatal(err)
		}
		// The abbreviated form is the full one without the pool rows.
		var want []string
		for _, l := range strings.SplitAfter(full.String(), "\n") {
			if !strings.Contains(l, "from large pool") && !strings.Contains(l, "from small pool") {
				want = append(want, l)
			}
		}
		if got := short.String(); got != strings.Join(want, "") {
			t.Errorf("%s: abbreviated summary differs\n%s", name, lineDiff(strings.Join(want, ""), got))
		}
		if !strings.Contains(short.String(), "device ID 3                 |\n") {
			t.Errorf("%s: device not left-justified in 17 columns:\n%s", name, short.String())
		}
		if n := strings.Count(full.String(), "\n") - strings.Count(short.String(), "\n"); n != 18 {
			t.Errorf("%s: abbreviated form dropped %d lines, want 18", name, n)
		}
	}
}

func TestTorchSummaryMissingKey(t *testing.T) {
	for _, tr := range loadTruths(t) {
		stats := make(map[string]int64, len(tr.MemoryStats))
		for k, v := range tr.MemoryStats {
			stats[k] = v
		}
		delete(stats, "inactive_split.small_pool.freed")
		err := TorchSummary(&bytes.Buffer{}, stats, 0, false)
		if err == nil || !strings.Contains(err.Error(), `"inactive_split.small_pool.freed"`) {
			t.Fatalf("err = %v, want one naming the missing key", err)
		}
		// The abbreviated form does not need pool keys.
		if err := TorchSummary(&bytes.Buffer{}, stats, 0, true); err != nil {
			t.Fatalf("abbreviated: %v", err)
		}
		break
	}
	if err := TorchSummary(&bytes.Buffer{}, nil, 0, false); err == nil {
		t.Fatal("empty stats: no error")
	}
}

func TestTorchSizeCell(t *testing.T) {
	const KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
	tests := []struct {
		v, ref int64
		want   string
	}{
		{0, 0, "     0 B  "},
		{786431, 786431, "786431 B  "},
		{786432, 786432, "   768 KiB"},
		{307200, 307200, "307200 B  "},
		{700 * MiB, 700 * MiB, "716800 KiB"},
		{768*MiB - 1, 768*MiB - 1, "786431 KiB"},
		{768 * MiB, 768 * MiB, "   768 MiB"},
		{3077 * MiB, 3077 * MiB, "  3077 MiB"},
		{768 * GiB, 768 * GiB, "   768 GiB"},
		{768 * 1024 * GiB, 768 * 1024 * GiB, "   768 TiB"},
		// Past PiB the unit stops growing and the number widens.
		{1 << 62, 1 << 62, "  4096 PiB"},
		// Pool rows follow the all row's unit, flooring.
		{0, 25165824, "     0 KiB"},
		{KiB - 1, 24 * MiB, "     0 KiB"},
		{5*MiB + 1023, MiB, "  5120 KiB"},
		// A reference just under a step keeps the smaller unit even for big values.
		{10 * GiB, 786431, "10737418240 B  "},
		// Python floors negatives.
		{-1, MiB, "    -1 KiB"},
		{-1025, MiB, "    -2 KiB"},
	}
	for _, tt := range tests {
		if got := torchSizeCell(tt.v, tt.ref); got != tt.want {
			t.Errorf("torchSizeCell(%d, %d) = %q, want %q", tt.v, tt.ref, got, tt.want)
		}
	}
}

func TestTorchCountCell(t *testing.T) {
	tests := []struct {
		v, ref int64
		want   string
	}{
		{0, 0, "      0   "},
		{749999, 749999, " 749999   "},
		{750000, 750000, "    750 K "},
		{750000, 749999, " 750000   "},
		{1999, 750000, "      1 K "},
		{749999999, 749999999, " 749999 K "},
		{750000000, 750000000, "    750 M "},
		{750000000000, 750000000000, " 750000 M "},
		{-1, 750000, "     -1 K "},
	}
	for _, tt := range tests {
		if got := torchCountCell(tt.v, tt.ref); got != tt.want {
			t.Errorf("torchCountCell(%d, %d) = %q, want %q", tt.v, tt.ref, got, tt.want)
		}
	}
}

// lineDiff shows the first differing line of two texts.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, w, g)
		}
	}
	return "(texts equal line by line)"
}
