package htmlreport

import (
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/report"
	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// Extra carries what a figures.Replay lacks and the HTML report shows.
type Extra struct {
	figures.Detail
	// Frag is the fragmentation (1 − allocated/reserved) at each point of
	// the replay's Timeline, NaN where nothing is reserved; nil computes it
	// from the Timeline.
	Frag []float64
	// MaxBands is the most allocations the explorer draws as bands of
	// their own (the largest); 0 means DefaultMaxBands.
	MaxBands int
	// Generator is what wrote the report ("gpumem v1.2.0 1a2b3c"), shown
	// under the title; "" shows none.
	Generator string
}

//go:embed report.html.tmpl
var pageText string

//go:embed explorer.js
var explorerJS string

// The zoomable charts of the replay report and the diff: their SVG and
// styles (chart.html.tmpl) and their script (chart.js).
var (
	//go:embed chart.html.tmpl
	chartText string
	//go:embed chart.js
	chartJS string
)

// chartPage parses, on first use (not when every command starts), a page
// that draws charts: the page's template and the charts' own.
func chartPage(name, text string) func() *template.Template {
	return sync.OnceValue(func() *template.Template {
		t := template.New(name).Funcs(template.FuncMap{
			// for piping: {{.Y | plus 5}}
			"plus":  func(d, v int) int { return v + d },
			"minus": func(d, v int) int { return v - d },
		})
		return template.Must(template.Must(t.Parse(text)).Parse(chartText))
	})
}

var pageTmpl = chartPage("report", pageText)

// Write writes the HTML report of r to w: the template's page, then the
// explorer's columns, last (the page draws its first view before the
// parser reaches them), written straight from their pieces rather than
// through the template (a copy of some MB at a million events).
func Write(w io.Writer, r *figures.Replay, extra Extra) error {
	p, err := newPage(r, extra)
	if err != nil {
		return err
	}
	sw := textsafe.NewWriter(w)
	if err := pageTmpl().Execute(sw, p); err != nil {
		return err
	}
	ew := &errWriter{w: sw}
	if p.Script != "" {
		io.WriteString(ew, "\n\n<script type=\"application/json\" id=\"explorer-bin\">")
		writeBins(ew, p.bins)
		io.WriteString(ew, "</script>")
	}
	io.WriteString(ew, "\n</body>\n</html>\n")
	if ew.err != nil {
		return ew.err
	}
	return sw.Flush()
}

// execute runs t on what a page's builder returns, unless it failed.
func execute(w io.Writer, t *template.Template) func(view any, err error) error {
	return func(view any, err error) error {
		if err != nil {
			return err
		}
		return render(w, t, "", view)
	}
}

// render runs t (its template name, unless "") on view into w. The page
// goes through a textsafe.Writer: html/template escapes what would break
// the markup, not bidi overrides or control characters, which names
// from input files (a trace's path, a frame, a case) could put in the
// <title> or any text of the page; they show as [U+202E] instead.
func render(w io.Writer, t *template.Template, name string, view any) error {
	sw := textsafe.NewWriter(w)
	var err error
	if name == "" {
		err = t.Execute(sw, view)
	} else {
		err = t.ExecuteTemplate(sw, name, view)
	}
	if err != nil {
		return err
	}
	return sw.Flush()
}

// page is what the template shows.
type page struct {
	Title     string
	Generator string
	Facts     []fact
	Timeline  *chart
	Frag      *chart
	Maps      []*segMap
	Sites     []siteRow
	OOM       *oomView
	Data      template.JS // the timeline's figures, for hover and zoom
	Explorer  template.JS // the explorer's packed data, "null" when none
	bins      [][][]byte  // its columns, apart: each device's in pieces
	Script    template.JS // the explorer's script
	Chart     template.JS // the charts' script
}

type fact struct {
	Label, Value string
	Note         string // a smaller second line
	Key          string // data-key, for checks
	Raw          string // data-value: the exact figure, when there is one
}

// Span is how many columns of the grid a fact takes: a long word (a
// setting such as max_split_size_mb:128) gets the room not to be broken.
func (f fact) Span() int {
	longest := 0
	for w := range strings.FieldsSeq(f.Value) {
		longest = max(longest, len([]rune(w)))
	}
	return min(1+longest/12, 3)
}

type siteRow struct {
	Rank    int
	Bytes   uint64
	Size    string
	Share   string // of the sites' bytes, "12.3%"
	Width   string // bar width in percent of the largest site
	Count   int
	Top     string // innermost frame
	Frames  string
	HasMore bool
}

type oomView struct {
	Hints   []string
	Comment string // on PyTorch's own advice, when it does not fit the verdict
	Verdict string
	Message string
	Facts   []fact
	Frames  string
}

func newPage(r *figures.Replay, extra Extra) (*page, error) {
	if r == nil {
		return nil, errors.New("htmlreport: no replay")
	}
	if extra.Frag != nil && len(extra.Frag) != len(r.Timeline) {
		return nil, fmt.Errorf("htmlreport: %d fragmentation figures for %d timeline points", len(extra.Frag), len(r.Timeline))
	}
	pts, frag := r.Timeline, extra.Frag
	if frag == nil {
		frag = make([]float64, len(pts))
		for i, pt := range pts {
			frag[i] = fragOf(pt)
		}
	}
	if idx := keep(pts, MaxPoints); idx != nil {
		thin, thinFrag := make([]figures.Point, len(idx)), make([]float64, len(idx))
		for i, k := range idx {
			thin[i], thinFrag[i] = pts[k], frag[k]
		}
		pts, frag = thin, thinFrag
	}

	p := &page{Title: "gpumem replay of " + r.Source, Generator: extra.Generator, Chart: template.JS(chartJS)}
	p.Facts = facts(r, pts)
	if len(pts) > 0 {
		p.Timeline = timelineChart(r, pts, extra.Phases)
		p.Frag = fragChart(r, pts, frag)
		p.Data = timelineData(pts, frag, extra.Phases, p.Timeline)
	} else {
		p.Data = "null"
	}
	// the explorer's segment map opens at the peak (or at an
	// out-of-memory, with a button back to the peak): a static map of the
	// peak beside it would show the same segments twice, under another
	// legend
	explorer := len(extra.Explorers)+len(extra.Packed) > 0
	if len(extra.PeakSegments) > 0 && !explorer {
		p.Maps = append(p.Maps, newSegMap("segmap-peak",
			fmt.Sprintf("Segments at the peak (after operation %s)", units.FormatCount(int64(r.PeakOp))),
			"every segment the allocator held when reserved memory peaked, in address order", extra.PeakSegments))
	}
	if r.OOM != nil {
		p.OOM = newOOMView(r)
		if len(r.OOM.Segments) > 0 {
			p.Maps = append(p.Maps, newSegMap("segmap-oom", "Segments at the out-of-memory",
				"the segments holding the largest holes when the allocation failed, worst first", r.OOM.Segments))
		}
	}
	p.Sites = siteRows(extra.Sites)
	var err error
	if p.Explorer, p.bins, err = explorerData(extra.Explorers, extra.Packed, extra.MaxBands); err != nil {
		return nil, err
	}
	if explorer {
		p.Script = template.JS(explorerJS)
	}
	return p, nil
}

func fragOf(pt figures.Point) float64 {
	if pt.Reserved <= 0 || pt.Allocated <= 0 {
		return math.NaN() // nothing to fragment: drawn as a gap (and shaded when reserved)
	}
	return 1 - float64(pt.Allocated)/float64(pt.Reserved)
}

// peakReserved is the reserved_bytes peak, or the timeline's highest
// reserved figure when the stats lack it.
func peakReserved(r *figures.Replay, pts []figures.Point) int64 {
	if v := figures.PeakReserved(r.Stats); v > 0 {
		return v
	}
	var m int64
	for _, pt := range pts {
		m = max(m, pt.Reserved)
	}
	return m
}

func facts(r *figures.Replay, pts []figures.Point) []fact {
	settings := r.Settings
	if settings == "" {
		settings = "defaults"
	}
	outcome := "completed"
	if r.OOM != nil {
		outcome = "out of memory"
	}
	peak := peakReserved(r, pts)
	fr := r.Fragmentation()
	fs := []fact{
		{Label: "peak reserved", Value: units.FormatBytes(peak), Note: "after op " + units.FormatCount(int64(r.PeakOp)), Key: "peak-reserved", Raw: itoa(peak)},
		{Label: "peak allocated", Value: units.FormatBytes(figures.PeakAllocated(r.Stats)), Key: "peak-allocated", Raw: itoa(figures.PeakAllocated(r.Stats))},
		{Label: "lower bound", Value: units.FormatUBytes(r.LowerBound), Key: "lower-bound", Raw: strconv.FormatUint(r.LowerBound, 10)},
		{Label: "peak / lower bound", Value: ratio(r.OverLowerBound(), "×"), Key: "over-lower-bound"},
		{Label: "fragmentation at the peak", Value: percent(fr.AtPeak), Key: "frag-at-peak"},
		{Label: "outcome", Value: outcome, Note: outcomeNote(r), Key: "outcome"},
		{Label: "operations", Value: units.FormatCount(int64(r.Ops)), Key: "ops", Raw: strconv.Itoa(r.Ops)},
		{Label: "settings", Value: settings, Key: "settings"},
		{Label: "policy", Value: r.Policy, Key: "policy"},
	}
	if r.Allowed > 0 {
		fs = append(fs, fact{Label: "cap", Value: units.FormatUBytes(r.Allowed), Key: "cap", Raw: strconv.FormatUint(r.Allowed, 10)})
	}
	if r.DeviceMemory > 0 {
		fs = append(fs, fact{Label: "device memory", Value: units.FormatUBytes(r.DeviceMemory), Key: "device-memory", Raw: strconv.FormatUint(r.DeviceMemory, 10)})
	}
	return fs
}

func outcomeNote(r *figures.Replay) string {
	if r.OOM != nil {
		return r.OOM.Verdict()
	}
	return ""
}

func newOOMView(r *figures.Replay) *oomView {
	o := r.OOM
	v := &oomView{Hints: report.Hints(r)}
	if !o.Fragmented() && !strings.Contains(r.Settings, "expandable_segments:True") {
		v.Comment = "PyTorch's message suggests expandable_segments:True against fragmentation; " +
			"here the cached free memory could not have met the request, so it would not avoid this out-of-memory."
	}
	*v = oomView{Hints: v.Hints, Comment: v.Comment,
		Verdict: o.Verdict(),
		Message: report.TorchOOMMessage(r.Device, o),
		Frames:  strings.Join(o.Frames, "\n"),
		Facts: []fact{
			{Label: "failed at event", Value: units.FormatCount(int64(o.OpIndex)), Key: "oom-event", Raw: strconv.Itoa(o.OpIndex)},
			{Label: "request", Value: units.FormatUBytes(o.Size) + " (rounded " + units.FormatUBytes(o.Rounded) + ")", Key: "oom-size", Raw: strconv.FormatUint(o.Size, 10)},
			{Label: "reserved", Value: units.FormatBytes(o.Reserved), Key: "oom-reserved", Raw: itoa(o.Reserved)},
			{Label: "cached free", Value: units.FormatUBytes(o.CachedFree), Key: "oom-cached-free", Raw: strconv.FormatUint(o.CachedFree, 10)},
			{Label: "largest free block", Value: units.FormatUBytes(o.LargestFree), Key: "oom-largest-free", Raw: strconv.FormatUint(o.LargestFree, 10)},
		},
	}
	return v
}

// maxSites is how many allocation sites the report lists.
const maxSites = 15

// siteFrames is how many frames name a site in the table.
const siteFrames = 2

func siteRows(sites []figures.Site) []siteRow {
	if len(sites) == 0 {
		return nil
	}
	var total, top uint64
	for _, s := range sites {
		total += s.Bytes
		top = max(top, s.Bytes)
	}
	var rows []siteRow
	for i, s := range sites[:min(len(sites), maxSites)] {
		// named by its first siteFrames frames, innermost first, as the
		// terminal and the explorer's default name sites: two stacks that
		// share an innermost frame no longer look like one site twice
		frames := strings.Split(s.Frames, "\n")
		first, more := strings.Join(frames[:min(len(frames), siteFrames)], " ← "), len(frames) > siteFrames
		if s.Frames == "" {
			first = "(no stack recorded)"
		}
		rows = append(rows, siteRow{
			Rank: i + 1, Bytes: s.Bytes, Count: s.Count,
			Size:  units.FormatUBytes(s.Bytes),
			Share: percent(div(s.Bytes, total)),
			Width: strconv.FormatFloat(100*div(s.Bytes, top), 'f', 1, 64),
			Top:   first, Frames: s.Frames, HasMore: more,
		})
	}
	return rows
}

func div(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func percent(r float64) string {
	if math.IsNaN(r) {
		return "n/a"
	}
	return strconv.FormatFloat(100*r, 'f', 1, 64) + "%"
}

func ratio(r float64, unit string) string {
	if math.IsNaN(r) {
		return "n/a"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + unit
}
