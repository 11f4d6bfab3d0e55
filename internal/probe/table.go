package probe

import (
	"fmt"
	"io"
	"strconv"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// Thresholds, in percent of total memory in use, at which the table turns
// the fill level yellow and red.
const (
	warnPercent = 70
	fullPercent = 90
)

// WriteTable writes s for people: a line with the driver and CUDA versions,
// a table with one row per GPU, and a table of the processes on them.
// Memory and BAR1 read "used / total GiB", as in nvidia-smi. When useColor is set the fill level is green, yellow (at 70%)
// or red (at 90%); the caller decides, so that NO_COLOR and non-terminal
// output are handled in one place.
func WriteTable(w io.Writer, s *System, useColor bool) error {
	if err := WriteGPUs(w, s, useColor); err != nil || len(s.GPUs) == 0 {
		return err
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return err
	}
	nprocs := 0
	for _, g := range s.GPUs {
		nprocs += len(g.Processes)
	}
	if nprocs == 0 {
		_, err := io.WriteString(w, "no running processes\n")
		return err
	}
	procs := newTable(w, tw.AlignRight, tw.AlignRight, tw.AlignLeft, tw.AlignRight)
	procs.Header("GPU", "PID", "Name", "Used")
	for _, g := range s.GPUs {
		for _, p := range g.Processes {
			if err := procs.Append(g.Index, p.PID, orDash(textsafe.Line(p.Name)), human(p.UsedMemory)); err != nil {
				return err
			}
		}
	}
	return procs.Render()
}

// WriteGPUs is WriteTable without the processes: the versions line and
// the table of GPUs.
func WriteGPUs(w io.Writer, s *System, useColor bool) error {
	if s == nil {
		return errNilSystem
	}
	if _, err := fmt.Fprintf(w, "Driver %s  CUDA %s\n\n", orDash(s.DriverVersion), orDash(s.CUDAVersion)); err != nil {
		return err
	}
	if len(s.GPUs) == 0 {
		_, err := io.WriteString(w, "no gpus found\n")
		return err
	}

	gpus := newTable(w, tw.AlignRight, tw.AlignLeft, tw.AlignRight, tw.AlignRight,
		tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight)
	gpus.Header("GPU", "Name", "Memory", "Full", "Reserved", "BAR1", "GPU util", "Mem util", "Procs")
	for _, g := range s.GPUs {
		bar1 := "-"
		if g.BAR1Total > 0 {
			bar1 = gibPair(g.BAR1Used, g.BAR1Total)
		}
		reserved := "-"
		if g.MemoryReserved > 0 {
			reserved = inGiB(g.MemoryReserved)
		}
		err := gpus.Append(g.Index, textsafe.Line(g.Name), gibPair(g.MemoryUsed, g.MemoryTotal),
			fill(g.MemoryUsed, g.MemoryTotal, useColor), reserved, bar1,
			percent(g.UtilGPU), percent(g.UtilMemory), len(g.Processes))
		if err != nil {
			return err
		}
	}
	return gpus.Render()
}

// newTable returns a table with headers as written and the given alignment
// per column.
func newTable(w io.Writer, align ...tw.Align) *tablewriter.Table {
	return tablewriter.NewTable(w,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithRowAlignmentConfig(tw.CellAlignment{PerColumn: align}),
	)
}

// fill formats how full memory is, coloured by threshold when useColor is set.
func fill(used, total uint64, useColor bool) string {
	if total == 0 {
		return "-"
	}
	pct := used * 100 / total // floor, so the colour never runs ahead of the number
	s := strconv.FormatUint(pct, 10) + "%"
	if !useColor {
		return s
	}
	attr := color.FgGreen
	switch {
	case pct >= fullPercent:
		attr = color.FgRed
	case pct >= warnPercent:
		attr = color.FgYellow
	}
	c := color.New(attr)
	c.EnableColor() // the caller decided; ignore fatih/color's own stdout check
	return c.Sprint(s)
}

func inGiB(b uint64) string { return units.FormatGiB(b) }

func gibPair(used, total uint64) string { return units.FormatGiBPair(used, total) }

// human formats a process's memory: MiB below 1 GiB, GiB above.
func human(b uint64) string { return units.FormatCompact(b) }

func percent(p uint32) string { return strconv.FormatUint(uint64(p), 10) + "%" }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
