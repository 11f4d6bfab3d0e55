package output

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// diffSitesShown is how many sites the table lists; JSON has them all.
const diffSitesShown = 10

// diffText writes the two runs' figures side by side, then the sites that
// changed most, as a table for people or in Markdown.
func diffText(w io.Writer, d *figures.Diff, md bool) error {
	bw := bufio.NewWriter(w)
	side := func(r *figures.Replay) string {
		s := fmt.Sprintf("%s (device %d, settings %s)", textsafe.Line(r.Source), r.Device, settingsName(r.Settings))
		if md {
			s = "`" + s + "`"
		}
		return s
	}
	if md {
		fmt.Fprintf(bw, "## Diff\n\n- a: %s\n- b: %s\n\n", side(d.A), side(d.B))
	} else {
		fmt.Fprintf(bw, "Diff\n  a  %s\n  b  %s\n\n", side(d.A), side(d.B))
	}
	rows := diffRows(d)
	right := []tw.Align{tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight}
	if err := writeTable(bw, []string{"", "a", "b", "b − a", "change"}, right, rows, md); err != nil {
		return err
	}
	if len(d.Categories) > 0 {
		fmt.Fprintln(bw, "\nWhat allocated memory held at each run's peak, by category, largest change first:")
		fmt.Fprintln(bw)
		rows = rows[:0]
		for _, c := range d.Categories {
			if c.A == 0 && c.B == 0 {
				continue
			}
			rows = append(rows, []string{c.Name, units.FormatUBytes(c.A), units.FormatUBytes(c.B), signed(c.Change(), true)})
		}
		if err := writeTable(bw, []string{"category", "a", "b", "b − a"},
			[]tw.Align{tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight}, rows, md); err != nil {
			return err
		}
		if ka, kb := d.A.Categories.KeptPastStep, d.B.Categories.KeptPastStep; max(ka, kb) >= 1<<20 {
			fmt.Fprintf(bw, "activations kept past the step that made them: a %s, b %s (%s); results held with their graphs outlive their step\n",
				units.FormatUBytes(ka), units.FormatUBytes(kb), signed(int64(kb)-int64(ka), true))
		}
	}
	if len(d.Phases) > 0 {
		fmt.Fprintln(bw, "\nAnnotated phases (record_function, optimizer steps), largest change of peak allocated first:")
		fmt.Fprintln(bw)
		rows = phaseRows(d)
		if err := writeTable(bw, []string{"phase", "times", "allocated a", "allocated b", "b − a", "reserved a", "reserved b"},
			[]tw.Align{tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight}, rows, md); err != nil {
			return err
		}
	}
	if d.Sites == nil {
		fmt.Fprintf(bw, "\n%s\n", noSites(d))
		return bw.Flush()
	}
	fmt.Fprintf(bw, "\nAllocation sites at each run's peak, largest change first (top %d user frames, innermost first):\n\n", d.Depth)
	rows = rows[:0]
	for i, s := range d.Sites[:min(len(d.Sites), diffSitesShown)] {
		rows = append(rows, []string{fmt.Sprint(i + 1), signed(s.Change(), true),
			units.FormatUBytes(s.BytesA), units.FormatUBytes(s.BytesB), shortSite(s.Frames)})
	}
	if err := writeTable(bw, []string{"#", "b − a", "a", "b", "site"},
		[]tw.Align{tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignLeft}, rows, md); err != nil {
		return err
	}
	if n := len(d.Sites) - diffSitesShown; n > 0 {
		fmt.Fprintf(bw, "(%s more sites in -o json)\n", units.FormatCount(int64(n)))
	}
	return bw.Flush()
}

// shortSite shows a site's frames on one line with file names without
// their folders; JSON has them whole.
func shortSite(frames string) string {
	var parts []string
	for _, f := range strings.Split(frames, "\n") {
		if i := strings.LastIndex(f, " ("); i >= 0 {
			if j := strings.LastIndex(f[i:], "/"); j >= 0 {
				f = f[:i+2] + f[i+j+1:]
			}
		}
		parts = append(parts, f)
	}
	return textsafe.Clip(textsafe.Line(strings.Join(parts, " ← ")), 160)
}

func oomWord(r *figures.Replay) string {
	if r.OOM == nil {
		return "completed"
	}
	return "OOM at op " + units.FormatCount(int64(r.OOM.OpIndex))
}

func settingsName(s string) string {
	if s == "" {
		return "defaults"
	}
	return textsafe.Line(s)
}

// noSites says why a diff compares no allocation sites.
func noSites(d *figures.Diff) string {
	var none []string
	for _, x := range []struct {
		name   string
		stacks bool
	}{{"a", d.StacksA}, {"b", d.StacksB}} {
		if !x.stacks {
			none = append(none, x.name)
		}
	}
	return fmt.Sprintf("no allocation sites to compare: %s recorded no stacks (gpumem record records them)", strings.Join(none, " and "))
}
