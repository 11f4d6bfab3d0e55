package progress

import (
	"context"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/gpumem/gpumem/internal/textsafe"
	"github.com/gpumem/gpumem/internal/units"
)

// throttle is how often a bar is redrawn at most.
const throttle = 100 * time.Millisecond

// Phase is one bar; the nil Phase draws nothing.
type Phase struct {
	bar *progressbar.ProgressBar
	// label is the bar's description; a read's also shows its average
	// speed since start, once settle has passed.
	label string
	start time.Time
	read  int64
	shown time.Time
}

// settle is how long a read runs before its speed is shown: until then
// the figure is the page cache's, not the read's.
const settle = 500 * time.Millisecond

func newPhase(w io.Writer, max int64, label string, opts ...progressbar.Option) *Phase {
	if w == nil {
		return nil
	}
	opts = append([]progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(textsafe.Line(label)),
		progressbar.OptionThrottle(throttle),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionClearOnFinish(),
	}, opts...)
	return &Phase{bar: progressbar.NewOptions64(max, opts...), label: label, start: time.Now()}
}

// Bytes is the phase of reading size bytes, labelled "verb name (size)".
func Bytes(w io.Writer, verb, name string, size int64) *Phase {
	return newPhase(w, size, verb+" "+name+" ("+units.FormatBytes(size)+")", progressbar.OptionShowBytes(false))
}

// Count is the phase of n like jobs.
func Count(w io.Writer, label string, n int) *Phase {
	return newPhase(w, int64(n), label, progressbar.OptionShowCount())
}

// Spinner is a phase of unknown length.
func Spinner(w io.Writer, label string) *Phase {
	return newPhase(w, -1, label, progressbar.OptionSetSpinnerChangeInterval(throttle), progressbar.OptionSpinnerType(14),
		progressbar.OptionSetRenderBlankState(true))
}

// Reader counts what is read from r on the phase's bar, and shows the
// average speed of the read in the label.
func (p *Phase) Reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	pr := progressbar.NewReader(r, p.bar)
	return &speedReader{&pr, p}
}

type speedReader struct {
	r io.Reader
	p *Phase
}

func (s *speedReader) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	p := s.p
	p.read += int64(n)
	if now := time.Now(); now.Sub(p.start) >= settle && now.Sub(p.shown) >= throttle {
		p.shown = now
		rate := float64(p.read) / now.Sub(p.start).Seconds()
		p.bar.Describe(textsafe.Line(p.label) + ", " + units.FormatBytes(int64(rate)) + "/s")
	}
	return n, err
}

// Tick counts one job done.
func (p *Phase) Tick() {
	if p != nil {
		p.bar.Add(1)
	}
}

// Done ends the phase and clears its bar.
func (p *Phase) Done() {
	if p != nil {
		p.bar.Finish()
		p.bar.Exit() // a spinner's redrawing stops
		p.bar.Clear()
	}
}

// During runs f with a spinner labelled label on w.
func During(w io.Writer, label string, f func() error) error {
	p := Spinner(w, label)
	defer p.Done()
	return f()
}

type phaseKey struct{}

// WithPhase is ctx carrying p, for Tick.
func WithPhase(ctx context.Context, p *Phase) context.Context {
	if p == nil {
		return ctx
	}
	return context.WithValue(ctx, phaseKey{}, p)
}

// Tick counts one job done on the phase ctx carries, if any.
func Tick(ctx context.Context) {
	if p, ok := ctx.Value(phaseKey{}).(*Phase); ok {
		p.Tick()
	}
}
