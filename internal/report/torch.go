package report

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"
)

// summaryMetric is one block of rows in torch.cuda.memory_summary().
type summaryMetric struct {
	key, title string
	bytes      bool // sizes rather than counts
}

// The nine pooled metrics, in memory_summary's order.
var summaryMetrics = []summaryMetric{
	{"allocated_bytes", "Allocated memory", true},
	{"active_bytes", "Active memory", true},
	{"requested_bytes", "Requested memory", true},
	{"reserved_bytes", "GPU reserved memory", true},
	{"inactive_split_bytes", "Non-releasable memory", true},
	{"allocation", "Allocations", false},
	{"active", "Active allocs", false},
	{"segment", "GPU reserved segments", false},
	{"inactive_split", "Non-releasable allocs", false},
}

// The two metrics without pool rows.
var summaryOversize = []summaryMetric{
	{"oversize_allocations", "Oversize allocations", false},
	{"oversize_segments", "Oversize GPU segments", false},
}

var statFields = [4]string{"current", "peak", "allocated", "freed"}

// TorchSummary writes what torch.cuda.memory_summary(device, abbreviated)
// returns for the statistics stats (the dotted keys of
// torch.cuda.memory_stats()), byte for byte, including the final newline.
// It reports the first missing key as an error.
func TorchSummary(w io.Writer, stats map[string]int64, device int, abbreviated bool) error {
	get := func(key string) (int64, error) {
		v, ok := stats[key]
		if !ok {
			return 0, fmt.Errorf("memory stats: missing key %q", key)
		}
		return v, nil
	}
	ooms, err := get("num_ooms")
	if err != nil {
		return err
	}
	retries, err := get("num_alloc_retries")
	if err != nil {
		return err
	}

	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	double := strings.Repeat("=", 75)
	single := strings.Repeat("-", 75)

	lines = append(lines, double)
	add(" %16s PyTorch CUDA memory summary, device ID %-17d ", "", device)
	lines = append(lines, single)
	add("  %9s CUDA OOMs: %-12d | %6s cudaMalloc retries: %-8d  ", "", ooms, "", retries)
	lines = append(lines, double)
	lines = append(lines, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ")

	row := func(name string, m summaryMetric, prefix string, ref *[4]int64) error {
		var cells [4]string
		for i, f := range statFields {
			v, err := get(prefix + f)
			if err != nil {
				return err
			}
			if ref[i] == math.MinInt64 {
				ref[i] = v
			}
			if m.bytes {
				cells[i] = torchSizeCell(v, ref[i])
			} else {
				cells[i] = torchCountCell(v, ref[i])
			}
		}
		add(" %-21s | %s | %s | %s | %s ", name, cells[0], cells[1], cells[2], cells[3])
		return nil
	}
	unset := [4]int64{math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64}

	for _, m := range summaryMetrics {
		lines = append(lines, single)
		// Pool rows take their unit from the "all" row of the same column.
		ref := unset
		if err := row(m.title, m, m.key+".all.", &ref); err != nil {
			return err
		}
		if abbreviated {
			continue
		}
		if err := row("      from large pool", m, m.key+".large_pool.", &ref); err != nil {
			return err
		}
		if err := row("      from small pool", m, m.key+".small_pool.", &ref); err != nil {
			return err
		}
	}
	for _, m := range summaryOversize {
		lines = append(lines, single)
		// Here each value is its own reference; a fresh ref per field does that.
		var cells [4]string
		for i, f := range statFields {
			v, err := get(m.key + "." + f)
			if err != nil {
				return err
			}
			cells[i] = torchCountCell(v, v)
		}
		add(" %-21s | %s | %s | %s | %s ", m.title, cells[0], cells[1], cells[2], cells[3])
	}
	lines = append(lines, double)

	bw := bufio.NewWriter(w)
	for _, l := range lines {
		bw.WriteString("|")
		bw.WriteString(l)
		bw.WriteString("|\n")
	}
	return bw.Flush()
}

// torchSizeCell is memory_summary's _format_size: the unit steps up while
// the reference is at least 768 units, the value is floor-divided by 1024
// at each step (the reference true-divided, as Python does).
func torchSizeCell(v, ref int64) string {
	v, unit := torchScale(v, ref, 1024, 5)
	return fmt.Sprintf("%6d %s", v, [...]string{"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"}[unit])
}

// torchCountCell is memory_summary's _format_count: steps of 1000 from a
// reference of 750,000.
func torchCountCell(v, ref int64) string {
	v, unit := torchScale(v, ref, 1000, 2)
	return fmt.Sprintf("%7d %s ", v, [...]string{" ", "K", "M"}[unit])
}

// torchScale steps v up to `last` units of base: while the reference,
// true-divided, is at least 0.75·base² (768 KiB, 750 K), v is
// floor-divided by base.
func torchScale(v, ref, base int64, last int) (int64, int) {
	r, b := float64(ref), float64(base)
	unit := 0
	for unit < last && r >= 0.75*b*b {
		unit++
		v = floorDiv(v, base)
		r /= b
	}
	return v, unit
}

// floorDiv is Python's //, which rounds towards negative infinity.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
