package output

import (
	"fmt"
	"io"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/htmlreport"
	"github.com/gpumem/gpumem/internal/report"
)

// ReplayFormats are the formats of a replay's report (gpumem replay and run). Each
// is drawn by package report, one file per format there.
var ReplayFormats = &Registry[*figures.Replay]{Kind: "The report of `replay` and `run`", Formats: []Format[*figures.Replay]{
	{Table, "the summary for people, then the timeline chart (report/table.go, report/timeline.go)", RenderFunc[*figures.Replay](replayTable)},
	{JSON, "the same with stable snake_case keys, `memory_stats` under PyTorch's names (report/json.go)",
		RenderFunc[*figures.Replay](replayJSON)},
	{Markdown, "the summary as Markdown (report/markdown.go)",
		RenderFunc[*figures.Replay](func(w io.Writer, r *figures.Replay, o Options) error { return report.Markdown(w, r, reportOptions(o)) })},
	{TorchSummary, "PyTorch's own `torch.cuda.memory_summary()` text, byte for byte (report/torch.go)",
		RenderFunc[*figures.Replay](func(w io.Writer, r *figures.Replay, _ Options) error {
			return report.TorchSummary(w, r.Stats.Map(), r.Device, false)
		})},
}}

// ReplayJSON is the document of replay -o json and run -o json: the
// replay report's document (package report), stamped.
type ReplayJSON struct {
	Stamp
	report.Document
}

func replayJSON(w io.Writer, r *figures.Replay, _ Options) error {
	doc, err := report.NewDocument(r)
	if err != nil {
		return err
	}
	return writeJSON(w, ReplayJSON{stamp(), *doc}, false)
}

func reportOptions(o Options) report.Options {
	return report.Options{Color: o.Color, Warn: o.Warn, Alarm: o.Alarm}
}

func replayTable(w io.Writer, r *figures.Replay, o Options) error {
	if err := report.Table(w, r, reportOptions(o)); err != nil {
		return err
	}
	if len(r.Timeline) > 1 {
		fmt.Fprintln(w)
		return report.Timeline(w, r, reportOptions(o))
	}
	return nil
}

// ExplorerPacker makes the sinks that pack the HTML explorer of each
// device as the pipeline makes it (pipeline.Run.Detail), for ReplayHTML:
// a big trace's page without its whole history in memory.
func ExplorerPacker(maxBands int) figures.ExplorerPacker {
	return htmlreport.NewExplorerPacker(maxBands)
}

// ReplayHTML writes the self-contained HTML report of a replay.
func ReplayHTML(w io.Writer, r *figures.Replay, d figures.Detail, maxBands int) error {
	return htmlreport.Write(w, r, htmlreport.Extra{Detail: d, MaxBands: maxBands, Generator: generatorLine()})
}
