package report

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// This file turns a Replay into the pieces that Table and Markdown lay out
// each in their own way: lists of facts, tables, block maps, hints.

type fact struct{ key, value string }

type grid struct {
	header []string
	align  []tw.Align
	rows   [][]string
}

func check(r *figures.Replay) error {
	if r == nil {
		return errors.New("report: no replay")
	}
	return nil
}

func overviewFacts(r *figures.Replay) []fact {
	settings := r.Settings
	if settings == "" {
		settings = "defaults"
	}
	capacity := "none"
	if r.Allowed > 0 {
		capacity = ubytes(r.Allowed)
		if r.DeviceMemory > 0 {
			capacity += fmt.Sprintf(" (%s of the card)", percent(float64(r.Allowed)/float64(r.DeviceMemory)))
		}
	}
	if c := r.InferredCap; c != nil {
		capacity += fmt.Sprintf(", inferred from the recording (its cap lies between %s and %s); "+
			"override with --device-memory/--memory-fraction", ubytes(c.Low), ubytes(c.High))
	}
	ops := count(int64(r.Ops)) + " replayed"
	if r.Truncated {
		ops += "; the trace was cut short by max_entries"
	}
	facts := []fact{
		{"source", textsafe.Line(r.Source)},
		{"policy", r.Policy},
		{"settings", settings},
		{"device", deviceText(r)},
		{"cap", capacity},
		{"operations", ops},
	}
	if a := r.Addresses; a != nil {
		facts = append(facts, fact{"addresses", addressesText(a)})
	}
	for i, s := range r.Skipped {
		key := ""
		if i == 0 {
			key = "skipped"
		}
		facts = append(facts, fact{key, fmt.Sprintf("%s × %s", count(int64(s.Count)), s.Reason)})
	}
	const shownPools = 8 // a program that makes pool after pool lists them in JSON
	for i, p := range r.Pools {
		key := ""
		if i == 0 {
			key = "pools"
		}
		if i == shownPools {
			facts = append(facts, fact{key, fmt.Sprintf("… and %s more (-o json lists every one)", count(int64(len(r.Pools)-shownPools)))})
			break
		}
		facts = append(facts, fact{key, p})
	}
	outcome := "completed"
	if r.OOM != nil {
		outcome = fmt.Sprintf("out of memory at operation %s", count(int64(r.OOM.OpIndex)))
	}
	if n := len(r.OOMs); n > 0 && r.OOMs[0].Recorded {
		k := 0
		for _, o := range r.OOMs {
			if o.Recorded {
				k++
			}
		}
		outcome += fmt.Sprintf("; went past the %s out-of-memory errors the program survived (first at operation %s)",
			count(int64(k)), count(int64(r.OOMs[0].OpIndex)))
	}
	facts = append(facts, fact{"outcome", outcome})
	if d := r.Divergence; d != nil && !d.WhatIf {
		facts = append(facts, fact{"divergence", "left the recording " + d.Where()})
	}
	for i, line := range inexactLines(r.Inexact) {
		key := ""
		if i == 0 {
			key = "not settled by the trace"
		}
		facts = append(facts, fact{key, line})
	}
	return facts
}

// inexactLines says which memory_stats keys the trace cannot settle, one
// line per reason: the keys (a count past a few), then why.
func inexactLines(inexact map[string]string) []string {
	byReason := map[string][]string{}
	for k, why := range inexact {
		byReason[why] = append(byReason[why], k)
	}
	reasons := slices.Sorted(maps.Keys(byReason))
	lines := make([]string, 0, len(reasons))
	for _, why := range reasons {
		keys := byReason[why]
		slices.Sort(keys)
		what := strings.Join(keys, ", ")
		if len(keys) > 3 {
			what = fmt.Sprintf("%s keys (peaks, running totals and counters)", count(int64(len(keys))))
		}
		lines = append(lines, what+": "+why)
	}
	return lines
}

func memoryGrid(r *figures.Replay) grid {
	g := grid{
		header: []string{"Memory", "Current", "Peak", "Total allocated", "Total freed"},
		align:  []tw.Align{tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight},
	}
	titles := map[string]string{
		"allocated_bytes":      "Allocated",
		"active_bytes":         "Active",
		"requested_bytes":      "Requested",
		"reserved_bytes":       "Reserved",
		"inactive_split_bytes": "Non-releasable",
		"allocation":           "Allocations",
		"active":               "Active allocations",
		"segment":              "Segments",
		"inactive_split":       "Non-releasable blocks",
	}
	stats := r.Stats.Map() // the rows follow PyTorch's names
	for _, m := range summaryMetrics {
		row := []string{titles[m.key]}
		for _, f := range statFields {
			v := stats[m.key+".all."+f]
			if m.bytes {
				row = append(row, units.FormatBytes(v))
			} else {
				row = append(row, count(v))
			}
		}
		g.rows = append(g.rows, row)
	}
	return g
}

func counterFacts(r *figures.Replay) []fact {
	return []fact{
		{"OOMs", count(r.Stats.NumOOMs)},
		{"allocation retries", count(r.Stats.NumAllocRetries)},
		{"device allocations", count(r.Stats.NumDeviceAlloc)},
		{"device frees", count(r.Stats.NumDeviceFree)},
	}
}

// fragRow is one row of the fragmentation table; ratio, when not NaN, is
// what the row's level and colour come from.
type fragRow struct {
	measure, value string
	ratio          float64
}

func fragRows(r *figures.Replay) []fragRow {
	f := r.Fragmentation()
	// The ratios at the peak set the memory a run needs: they get a level.
	// Those at the end describe the cache once the work is done, which is
	// no trouble, unless the end is an out-of-memory error: then they are
	// named after it, so that a row's name says whether it gets a level.
	end, holes := math.NaN(), math.NaN()
	when := "at the end"
	if r.OOM != nil {
		end, holes, when = f.End, f.Holes, "at the out-of-memory"
	}
	return []fragRow{
		{"1 − allocated/reserved, " + when, percent(f.End), end},
		{fmt.Sprintf("1 − allocated/reserved, at peak reserved (operation %s)", count(int64(r.PeakOp))), percent(f.AtPeak), f.AtPeak},
		{"1 − peak allocated/peak reserved", percent(f.Peaks), f.Peaks},
		{"1 − largest free block/cached free, " + when, percent(f.Holes), holes},
		{"largest free block", ubytes(r.LargestFree), math.NaN()},
		{"cached free (reserved − active)", units.FormatBytes(r.CachedFree()), math.NaN()},
		{"lower bound (peak live bytes, 512 B each)", ubytes(r.LowerBound), math.NaN()},
		{"peak reserved/lower bound", times(r.OverLowerBound()), math.NaN()},
	}
}

// fragGrid lays out fragRows; paint colours the value cells.
func fragGrid(r *figures.Replay, o Options, paint func(s string, ratio float64) string) grid {
	g := grid{
		header: []string{"Fragmentation", "Value", "Level"},
		align:  []tw.Align{tw.AlignLeft, tw.AlignRight, tw.AlignLeft},
	}
	for _, row := range fragRows(r) {
		g.rows = append(g.rows, []string{row.measure, paint(row.value, row.ratio), level(row.ratio, o)})
	}
	return g
}

func oomFacts(r *figures.Replay) []fact {
	o := r.OOM
	capacity := "none"
	if o.Allowed > 0 {
		capacity = ubytes(o.Allowed)
	}
	return []fact{
		{"operation", fmt.Sprintf("%s, stream %d", count(int64(o.OpIndex)), o.Stream)},
		{"request", fmt.Sprintf("%s as asked, %s rounded, needing a %s segment",
			ubytes(o.Size), ubytes(o.Rounded), ubytes(o.AllocSize))},
		{"card", fmt.Sprintf("%s, of which %s free", ubytes(o.DeviceTotal), ubytes(o.DeviceFree))},
		{"cap", capacity},
		{"reserved", units.FormatBytes(o.Reserved)},
		{"allocated", units.FormatBytes(o.Allocated)},
		{"cached free", ubytes(o.CachedFree)},
		{"largest free block", ubytes(o.LargestFree)},
		{"headroom", ubytes(o.Headroom()) + " more the card and the cap would give"},
	}
}

// verdictText explains the verdict in one sentence.
func verdictText(o *figures.OOM) string {
	total := figures.Sat(o.CachedFree, o.Headroom())
	if o.Fragmented() {
		return fmt.Sprintf("%s free in all (%s cached + %s headroom) would hold the %s request, but no free block or new segment is big enough",
			ubytes(total), ubytes(o.CachedFree), ubytes(o.Headroom()), ubytes(o.Rounded))
	}
	return fmt.Sprintf("only %s free in all (%s cached + %s headroom) for a %s request: %s short",
		ubytes(total), ubytes(o.CachedFree), ubytes(o.Headroom()), ubytes(o.Rounded), ubytes(o.Rounded-total))
}

// hints suggests what to try after an OOM.
func hints(r *figures.Replay) []string {
	o := r.OOM
	var h []string
	if o.Fragmented() {
		if !strings.Contains(r.Settings, "expandable_segments:True") {
			h = append(h, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow in place, so freed memory is reused for any size")
		}
		mb := max(o.Rounded>>20, 21) // PyTorch wants max_split_size_mb > 20
		h = append(h, fmt.Sprintf("max_split_size_mb:%d stops cached blocks of that size and up being split for smaller requests", mb))
	} else {
		live := uint64(max(o.Reserved, 0)) - min(o.CachedFree, uint64(max(o.Reserved, 0)))
		h = append(h,
			"use a smaller batch (or shorter sequences) so that less is live at once",
			fmt.Sprintf("or a bigger card: this step needs at least %s (%s live + %s requested)",
				ubytes(figures.Sat(live, o.Rounded)), ubytes(live), ubytes(o.Rounded)))
	}
	if o.Allowed > 0 && !strings.Contains(r.Settings, "garbage_collection_threshold") {
		h = append(h, "garbage_collection_threshold:0.8 returns unused cached blocks before reserved memory reaches the cap")
	}
	return h
}

// Block map letters.
const (
	mapAllocated = 'A'
	mapPending   = 'P'
	mapFree      = '.'
)

// blockMap draws a segment's blocks as width characters. A character shows
// A if any of its share of the segment is allocated, else P if any is
// pending, else '.': the blocks that pin a segment never vanish, while
// holes narrower than a character may.
func blockMap(s figures.SegmentMap, width int) string {
	var total uint64
	for _, b := range s.Blocks {
		total = figures.Sat(total, b.Size)
	}
	if total == 0 || width <= 0 {
		return ""
	}
	step := float64(total) / float64(width)
	// Float rounding at block edges must not paint a neighbour's cell.
	eps := step * 1e-9
	cells := []byte(strings.Repeat(string(mapFree), width))
	pos := 0.0
	for _, b := range s.Blocks {
		end := pos + float64(b.Size)
		var c byte
		switch b.State {
		case figures.Allocated:
			c = mapAllocated
		case figures.Pending:
			c = mapPending
		}
		if c != 0 && end-pos > 0 {
			lo := int((pos + eps) / step)
			hi := min(int((end-eps)/step), width-1)
			for i := lo; i <= hi; i++ {
				if cells[i] != mapAllocated {
					cells[i] = c
				}
			}
		}
		pos = end
	}
	return "[" + string(cells) + "]"
}

// maxSegments is how many segments a report shows at most.
const maxSegments = 8

// segmentLines describes each segment in one title line and one block map
// line of about the given width.
func segmentLines(o *figures.OOM, width int) []string {
	var lines []string
	for i, s := range o.Segments {
		if i == maxSegments {
			lines = append(lines, fmt.Sprintf("… and %s more", count(int64(len(o.Segments)-maxSegments))))
			break
		}
		var free, largest uint64
		holes := 0
		for _, b := range s.Blocks {
			if b.State == figures.Free {
				free = figures.Sat(free, b.Size)
				largest = max(largest, b.Size)
				holes++
			}
		}
		lines = append(lines,
			fmt.Sprintf("%#x, %s: %s free in %d %s, largest %s",
				s.Address, ubytes(s.Size), ubytes(free), holes, plural(holes, "hole", "holes"), ubytes(largest)),
			"  "+blockMap(s, max(width-4, 8)))
	}
	return lines
}

const mapLegend = "A allocated, P freed but pending on another stream, . free"

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// visible counts the columns s takes on a terminal: runes, less escapes.
func visible(s string) int {
	n, esc := 0, false
	for _, r := range s {
		switch {
		case esc:
			esc = r != 'm'
		case r == 0x1b:
			esc = true
		default:
			n++
		}
	}
	return n
}

// keepUnits joins each unit to the number before it ("1.50", "GiB"), so
// that wrapping never separates them.
func keepUnits(words []string) []string {
	var out []string
	for _, w := range words {
		unit := strings.TrimRight(w, ",.;:)")
		if len(out) > 0 && (unit == "bytes" || units.IsByteUnit(unit)) {
			out[len(out)-1] += " " + w
			continue
		}
		out = append(out, w)
	}
	return out
}

// Wrap breaks s into lines of at most width columns at spaces, keeping a
// figure and its unit together.
func Wrap(s string, width int) []string { return wrap(s, width) }

// wrap breaks s into lines of at most width columns at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range keepUnits(strings.Fields(s)) {
		if line != "" && visible(line)+1+visible(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

func deviceText(r *figures.Replay) string {
	if r.DeviceMemory == 0 {
		return fmt.Sprintf("%d, no memory limit", r.Device)
	}
	return fmt.Sprintf("%d, %s", r.Device, ubytes(r.DeviceMemory))
}

// addressesText says how segment addresses were chosen.
func addressesText(a *figures.Addresses) string {
	var s string
	switch {
	case a.ModelledFrom < 0:
		s = fmt.Sprintf("recorded (all %s segments)", count(int64(a.Segments)))
	case a.ModelledFrom == 0:
		s = fmt.Sprintf("modelled (all %s segments)", count(int64(a.Segments)))
	case a.ModelledFrom == 1:
		s = fmt.Sprintf("the first segment's recorded, the other %s modelled", count(int64(a.Segments-1)))
	default:
		s = fmt.Sprintf("recorded for the first %s segments, modelled from segment %s of %s", count(int64(a.ModelledFrom)), count(int64(a.ModelledFrom+1)), count(int64(a.Segments)))
	}
	if a.Recorded > 0 {
		s += fmt.Sprintf("; %s of %s at their recorded address", count(int64(a.Matched)), count(int64(a.Recorded)))
	}
	if a.Predicted > 0 {
		s += fmt.Sprintf(", %s of them where the model would have put them", count(int64(a.Predicted)))
	}
	return s
}

// Hints are the out-of-memory hints the table prints, for other renderers.
func Hints(r *figures.Replay) []string { return hints(r) }
