package output

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/internal/probe"
	"github.com/gpumem/gpumem/internal/report"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// summaryTable writes the device table, the processes against their
// allocators, then the allocator's summary.
func summaryTable(w io.Writer, s *Summary, o Options) error {
	if s.System != nil {
		if err := probe.WriteGPUs(w, s.System, o.Color); err != nil {
			return err
		}
		fmt.Fprintln(w)
		if len(s.System.GPUs) > 0 {
			if err := processTable(w, s); err != nil {
				return err
			}
			fmt.Fprintln(w)
		}
	}
	if s.Ranks != nil {
		fmt.Fprintf(w, "Allocator (%s backend) after ", s.Backend)
		return ranksText(w, s.Ranks, Options{Color: o.Color}, false)
	}
	fmt.Fprintf(w, "Allocator (%s backend) after %s\n\n", s.Backend, textsafe.Line(s.Allocator.Source))
	return report.Table(w, s.Allocator, report.Options{Color: o.Color})
}

// noStats stands for the allocator's bytes of a process that does not
// publish them.
const noStats = "no allocator stats (process not publishing to spool)"

// processTable writes each process's memory as NVML sees it against what
// its caching allocator reserved, and names the rest.
func processTable(w io.Writer, s *Summary) error {
	if len(s.Processes) == 0 {
		_, err := fmt.Fprintln(w, "no running processes")
		return err
	}
	rows := make([][]string, 0, len(s.Processes))
	silent := false
	for _, p := range s.Processes {
		name := textsafe.Line(p.Name)
		if name == "" {
			name = "-"
		}
		used, reserved, rest := "-", noStats, "-"
		if p.Used > 0 {
			used = units.FormatUBytes(p.Used)
		}
		if p.Reserved != nil {
			reserved = units.FormatUBytes(*p.Reserved)
		} else {
			silent = true
		}
		if p.Rest != nil {
			rest = units.FormatBytes(*p.Rest)
		}
		rows = append(rows, []string{fmt.Sprint(p.GPU), fmt.Sprint(p.PID), name, used, reserved, rest})
	}
	right := tw.AlignRight
	err := writeTable(w, []string{"GPU", "PID", "Name", "NVML used", "Allocator reserved", "Rest"},
		[]tw.Align{right, right, tw.AlignLeft, right, right, right}, rows, false)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "rest = NVML used − allocator reserved: context + libraries (not the caching allocator),")
	fmt.Fprintln(w, "that is the CUDA context, NCCL's buffers and the libraries' workspaces")
	if silent {
		fmt.Fprintf(w, "allocator stats come from the spool %s: import gpumem_spool; gpumem_spool.start() in the process\n",
			textsafe.Line(s.Spool))
	}
	return nil
}

// Devices writes the device table alone (summary --watch); redraw first
// clears a terminal, so that each table replaces the last.
func Devices(w io.Writer, sys *probe.System, o Options, redraw bool) error {
	if redraw {
		fmt.Fprint(w, "\033[H\033[2J")
	}
	return probe.WriteTable(w, sys, o.Color)
}

// WatchDevices redraws the device table every interval, like nvtop, from
// what read reports, until ctx is done (Ctrl-C).
func WatchDevices(ctx context.Context, w io.Writer, read func() (*probe.System, error), every time.Duration, o Options, redraw bool) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		sys, err := read()
		if err != nil {
			return err
		}
		if err := Devices(w, sys, o, redraw); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
