package report

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/textsafe"
)

// Table writes the report of r for a terminal: an overview, memory like
// torch.cuda.memory_summary() but in human sizes, the fragmentation
// figures and, after an OOM, its diagnosis.
func Table(w io.Writer, r *figures.Replay, o Options) error {
	if err := check(r); err != nil {
		return err
	}
	o = o.withDefaults()
	p := newPalette(o.Color)
	bw := bufio.NewWriter(w)

	fmt.Fprintln(bw, p.bold.Sprint("Replay"))
	writeFacts(bw, overviewFacts(r))
	if d := r.Divergence; d != nil && !d.WhatIf {
		for _, l := range wrap(d.Text(), o.Width-4) {
			fmt.Fprintln(bw, "    "+l)
		}
	}
	fmt.Fprintln(bw)
	if err := writeGrid(bw, memoryGrid(r), false); err != nil {
		return err
	}
	writeFacts(bw, counterFacts(r))
	fmt.Fprintln(bw)
	paint := func(s string, ratio float64) string { return p.paint(s, ratio, o) }
	if err := writeGrid(bw, fragGrid(r, o, paint), false); err != nil {
		return err
	}
	categoriesTable(bw, r.Categories)

	if oom := r.OOM; oom != nil {
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, p.oom.Sprint("Out of memory"))
		facts := oomFacts(r)
		facts = append(facts, fact{"verdict", p.bold.Sprint(oom.Verdict())})
		writeFacts(bw, facts)
		for _, l := range wrap(verdictText(oom), o.Width-2) {
			fmt.Fprintln(bw, "  "+l)
		}
		if len(oom.Segments) > 0 {
			fmt.Fprintln(bw)
			fmt.Fprintf(bw, "Segments holding the holes (%s):\n", mapLegend)
			for _, l := range segmentLines(oom, o.Width-2) {
				fmt.Fprintln(bw, "  "+l)
			}
		}
		writeStack(bw, "Stack of the failing allocation (innermost first):", oom.Frames)
		for i, frames := range oom.PinFrames {
			writeStack(bw, fmt.Sprintf("Stack of pinning block %d (innermost first):", i+1), frames)
		}
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, "Hints:")
		for _, h := range hints(r) {
			lines := wrap(h, o.Width-4)
			for i, l := range lines {
				lead := "    "
				if i == 0 {
					lead = "  - "
				}
				fmt.Fprintln(bw, lead+l)
			}
		}
		fmt.Fprintln(bw)
		// Unwrapped: the message is PyTorch's, to be searched for verbatim.
		fmt.Fprintln(bw, "PyTorch would raise:")
		fmt.Fprintln(bw, TorchOOMMessage(r.Device, oom))
	}
	return bw.Flush()
}

// writeFacts writes facts as aligned "key  value" lines, indented by two.
func writeFacts(w io.Writer, facts []fact) {
	width := 0
	for _, f := range facts {
		width = max(width, len([]rune(f.key)))
	}
	for _, f := range facts {
		pad := strings.Repeat(" ", width-len([]rune(f.key)))
		fmt.Fprintf(w, "  %s%s  %s\n", f.key, pad, f.value)
	}
}

func writeStack(w io.Writer, title string, frames []string) {
	if len(frames) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, title)
	for _, f := range frames {
		fmt.Fprintln(w, "  "+textsafe.Line(f))
	}
}

// writeGrid renders g with tablewriter, as a box table or as Markdown.
func writeGrid(w io.Writer, g grid, markdown bool) error {
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off), // keep headers as written
		tablewriter.WithHeaderAlignmentConfig(tw.CellAlignment{PerColumn: g.align}),
		tablewriter.WithRowAlignmentConfig(tw.CellAlignment{PerColumn: g.align}),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
	}
	if markdown {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	}
	t := tablewriter.NewTable(w, opts...)
	t.Header(g.header)
	if err := t.Bulk(g.rows); err != nil {
		return err
	}
	return t.Render()
}
