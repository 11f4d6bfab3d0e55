package report

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/textsafe"
)

// Markdown writes the same report as Table as GitHub-flavoured Markdown,
// for issues and pull requests. It never colours: high fragmentation is
// named in the Level column, and a very high one is set in bold.
func Markdown(w io.Writer, r *figures.Replay, o Options) error {
	if err := check(r); err != nil {
		return err
	}
	o = o.withDefaults()
	bw := bufio.NewWriter(w)

	fmt.Fprintf(bw, "## Replay of %s\n\n", inlineCode(r.Source))
	writeBullets(bw, overviewFacts(r)) // the divergence fact comes last: its text continues it
	if d := r.Divergence; d != nil && !d.WhatIf {
		fmt.Fprintf(bw, "  %s\n", d.Text())
	}
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "### Memory")
	fmt.Fprintln(bw)
	if err := writeGrid(bw, memoryGrid(r), true); err != nil {
		return err
	}
	fmt.Fprintln(bw)
	writeBullets(bw, counterFacts(r))
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "### Fragmentation")
	fmt.Fprintln(bw)
	bold := func(s string, ratio float64) string {
		if level(ratio, o) == "very high" {
			return "**" + s + "**"
		}
		return s
	}
	if err := writeGrid(bw, fragGrid(r, o, bold), true); err != nil {
		return err
	}
	if g := categoriesGrid(r.Categories); g != nil {
		fmt.Fprintf(bw, "\n### By category at the peak of allocated memory\n\n%s, %s.\n\n", ubytes(r.Categories.Total), r.Categories.Method)
		if err := writeGrid(bw, *g, true); err != nil {
			return err
		}
	}

	if oom := r.OOM; oom != nil {
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, "### Out of memory")
		fmt.Fprintln(bw)
		writeBullets(bw, oomFacts(r))
		fmt.Fprintf(bw, "\n**Verdict: %s.** %s.\n", oom.Verdict(), verdictText(oom))
		if len(oom.Segments) > 0 {
			fmt.Fprintf(bw, "\nSegments holding the holes (%s):\n\n```\n", mapLegend)
			for _, l := range segmentLines(oom, o.Width) {
				fmt.Fprintln(bw, l)
			}
			fmt.Fprintln(bw, "```")
		}
		writeCodeStack(bw, "Stack of the failing allocation (innermost first):", oom.Frames)
		for i, frames := range oom.PinFrames {
			writeCodeStack(bw, fmt.Sprintf("Stack of pinning block %d (innermost first):", i+1), frames)
		}
		fmt.Fprintln(bw, "\nHints:")
		fmt.Fprintln(bw)
		for _, h := range hints(r) {
			fmt.Fprintf(bw, "- %s\n", h)
		}
		fmt.Fprintf(bw, "\nPyTorch would raise:\n\n> %s\n", TorchOOMMessage(r.Device, oom))
	}
	return bw.Flush()
}

// writeBullets writes facts as a list; a fact without a key continues the
// one above.
func writeBullets(w io.Writer, facts []fact) {
	for i := 0; i < len(facts); i++ {
		key, value := facts[i].key, facts[i].value
		for i+1 < len(facts) && facts[i+1].key == "" {
			i++
			value += "; " + facts[i].value
		}
		fmt.Fprintf(w, "- **%s**: %s\n", key, value)
	}
}

func writeCodeStack(w io.Writer, title string, frames []string) {
	if len(frames) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n\n```\n", title)
	for _, f := range frames {
		fmt.Fprintln(w, textsafe.Line(f))
	}
	fmt.Fprintln(w, "```")
}

// inlineCode puts s in a code span long enough not to be closed by the
// backticks inside it.
func inlineCode(s string) string {
	s = textsafe.Line(s)
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}
