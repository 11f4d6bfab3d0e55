package report

import (
	"fmt"
	"math"

	"github.com/fatih/color"

	"github.com/gpumem/gpumem/internal/units"
)

// Options control the human renderers.
type Options struct {
	// Color turns on ANSI colours. The renderers decide per object and
	// never consult fatih/color's global NoColor: the caller decides.
	Color bool
	// Warn and Alarm are the fragmentation ratios from which a figure is
	// shown as high (yellow) and very high (red); zero means 0.20 and 0.30.
	Warn, Alarm float64
	// Width is the widest line wanted, in columns, for the chart and the
	// block maps; zero means 80, and more than 1000 counts as 1000.
	Width int
}

func (o Options) withDefaults() Options {
	if o.Warn == 0 {
		o.Warn = 0.20
	}
	if o.Alarm == 0 {
		o.Alarm = 0.30
	}
	if o.Width <= 0 {
		o.Width = 80
	}
	o.Width = min(o.Width, 1000)
	return o
}

// palette holds the colours of one rendering, each switched on or off
// explicitly so that NO_COLOR and the global default play no part.
type palette struct {
	warn, alarm, bold, allocated, reserved, peak, oom *color.Color
}

func newPalette(on bool) palette {
	p := palette{
		warn:      color.New(color.FgYellow),
		alarm:     color.New(color.FgRed, color.Bold),
		bold:      color.New(color.Bold),
		allocated: color.New(color.FgBlue),
		reserved:  color.New(color.FgRed),
		peak:      color.New(color.FgMagenta, color.Bold),
		oom:       color.New(color.FgRed, color.Bold),
	}
	for _, c := range []*color.Color{p.warn, p.alarm, p.bold, p.allocated, p.reserved, p.peak, p.oom} {
		if on {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
	}
	return p
}

// level names how high a fragmentation ratio is: "", "high" or "very high".
func level(ratio float64, o Options) string {
	switch {
	case math.IsNaN(ratio):
		return ""
	case ratio >= o.Alarm:
		return "very high"
	case ratio >= o.Warn:
		return "high"
	}
	return ""
}

// paint colours s by the level of ratio.
func (p palette) paint(s string, ratio float64, o Options) string {
	switch level(ratio, o) {
	case "very high":
		return p.alarm.Sprint(s)
	case "high":
		return p.warn.Sprint(s)
	}
	return s
}

// percent formats a ratio as a percentage, "n/a" when undefined.
func percent(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*r)
}

// times formats a factor such as 1.13×, "n/a" when undefined.
func times(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", r)
}

// count formats n with thousands separators: 1,234,567.
func count(n int64) string { return units.FormatCount(n) }

// ubytes formats an unsigned byte count.
func ubytes(n uint64) string { return units.FormatUBytes(n) }
