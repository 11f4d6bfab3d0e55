package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter/tw"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/textsafe"
)

// jsonCategories is the bytes each category held at the peak of
// allocated memory (package categories defines them).
type jsonCategories struct {
	Parameter      uint64 `json:"parameter"`
	Buffer         uint64 `json:"buffer"`
	Gradient       uint64 `json:"gradient"`
	OptimizerState uint64 `json:"optimizer_state"`
	Activation     uint64 `json:"activation"`
	Temporary      uint64 `json:"temporary"`
	Input          uint64 `json:"input"`
	Workspace      uint64 `json:"workspace"`
	Unknown        uint64 `json:"unknown"`
}

type jsonCategorySites struct {
	Category string     `json:"category"`
	Bytes    uint64     `json:"bytes"`
	Sites    []jsonSite `json:"sites"`
}

type jsonSite struct {
	Frames string `json:"frames"`
	Bytes  uint64 `json:"bytes"`
	Count  int    `json:"count"`
}

// jsonRemedy is an upper bound on what a remedy could save at the peak.
type jsonRemedy struct {
	Name  string `json:"name"`
	Bytes uint64 `json:"at_most_bytes"`
	Basis string `json:"basis"`
}

// pointCategories is what each category held at timeline point i, nil
// when not computed.
func pointCategories(c *figures.Categories, i int) *jsonCategories {
	if c == nil || i >= len(c.Timeline) {
		return nil
	}
	return categoriesJSON(c.Shares, c.Timeline[i])
}

// categoriesJSON puts bytes[k], the bytes of shares[k]'s category, in
// their keys.
func categoriesJSON(shares []figures.CategoryShare, bytes []uint64) *jsonCategories {
	j := &jsonCategories{}
	fields := map[string]*uint64{"parameter": &j.Parameter, "buffer": &j.Buffer, "gradient": &j.Gradient,
		"optimizer_state": &j.OptimizerState, "activation": &j.Activation, "temporary": &j.Temporary,
		"input": &j.Input, "workspace": &j.Workspace, "unknown": &j.Unknown}
	for k, s := range shares {
		if f := fields[s.Name]; f != nil && k < len(bytes) {
			*f = bytes[k]
		}
	}
	return j
}

func addCategories(doc *Document, c *figures.Categories) {
	doc.CategorySites, doc.Remedies = []jsonCategorySites{}, []jsonRemedy{}
	if c == nil {
		return
	}
	at := make([]uint64, len(c.Shares))
	for k, s := range c.Shares {
		at[k] = s.Bytes
	}
	j := categoriesJSON(c.Shares, at)
	for _, s := range c.Shares {
		cs := jsonCategorySites{Category: s.Name, Bytes: s.Bytes, Sites: []jsonSite{}}
		for _, site := range s.Sites {
			cs.Sites = append(cs.Sites, jsonSite(site))
		}
		doc.CategorySites = append(doc.CategorySites, cs)
	}
	method := c.Method
	doc.Categories, doc.CategoriesMethod = j, &method
	doc.ActivationsKeptPastStep = c.KeptPastStep
	for _, r := range c.Remedies {
		doc.Remedies = append(doc.Remedies, jsonRemedy(r))
	}
}

// categoriesTable writes what allocated memory was made of at its peak:
// bytes and share per category, each with its top sites, then the
// remedies' upper bounds.
func categoriesTable(w io.Writer, c *figures.Categories) {
	if c == nil || c.Total == 0 {
		return
	}
	fmt.Fprintf(w, "\nAt the peak of allocated memory (%s, op %d), by category (%s):\n", ubytes(c.Total), c.Op, c.Method)
	for _, s := range c.Shares {
		if s.Bytes == 0 {
			continue
		}
		fmt.Fprintf(w, "  %-16s %10s  %5.1f%%\n", s.Name, ubytes(s.Bytes), 100*float64(s.Bytes)/float64(c.Total))
		if s.Name == "activation" && c.KeptPastStep >= 1<<20 {
			fmt.Fprintf(w, "      %10s  kept past the step that made them (results held with their graphs: a leak?)\n",
				ubytes(c.KeptPastStep))
		}
		for _, site := range s.Sites {
			frames := strings.SplitN(site.Frames, "\n", 2)[0]
			fmt.Fprintf(w, "      %10s  %s\n", ubytes(site.Bytes), textsafe.Line(frames))
		}
	}
	if len(c.Remedies) > 0 {
		fmt.Fprintln(w, "Upper bounds from the categories (at most; gpumem estimate gives exact answers):")
		for _, r := range c.Remedies {
			fmt.Fprintf(w, "  %-62s %10s  (%s)\n", r.Name, ubytes(r.Bytes), r.Basis)
		}
	}
}

// categoriesGrid is the breakdown at the peak as a table (Markdown): each
// category that held memory, its share and its largest site; nil when
// there are no categories.
func categoriesGrid(c *figures.Categories) *grid {
	if c == nil || c.Total == 0 {
		return nil
	}
	g := &grid{header: []string{"category", "bytes", "share", "largest site"},
		align: []tw.Align{tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignLeft}}
	for _, s := range c.Shares {
		if s.Bytes == 0 {
			continue
		}
		site := ""
		if len(s.Sites) > 0 {
			site = inlineCode(strings.SplitN(s.Sites[0].Frames, "\n", 2)[0])
		}
		g.rows = append(g.rows, []string{s.Name, ubytes(s.Bytes), fmt.Sprintf("%.1f%%", 100*float64(s.Bytes)/float64(c.Total)), site})
	}
	return g
}
