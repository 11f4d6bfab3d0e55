package output

import (
	"io"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// writeTable writes rows under header, each column aligned as align says,
// as a table for people or, with md, in Markdown.
func writeTable(w io.Writer, header []string, align []tw.Align, rows [][]string, md bool) error {
	opts := []tablewriter.Option{
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignmentConfig(tw.CellAlignment{PerColumn: align}),
		tablewriter.WithRowAlignmentConfig(tw.CellAlignment{PerColumn: align}),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
	}
	if md {
		opts = append(opts, tablewriter.WithRenderer(renderer.NewMarkdown()))
	}
	t := tablewriter.NewTable(w, opts...)
	t.Header(header)
	if err := t.Bulk(rows); err != nil {
		return err
	}
	return t.Render()
}
