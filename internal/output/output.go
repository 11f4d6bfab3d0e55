// Package output is gpumem's output layer: every format of every kind of
// result, behind one interface. Each kind of result (a replay report, a
// sweep, a fragcheck run, the summary) has one Registry of its formats, and
// the command line takes from it the -o/--output flag's help, its
// validation, and the documentation's lists of formats.
//
// A format is a Renderer in a file of its own (sweep_json.go, ...); the
// replay report's formats are drawn by package report, the HTML pages by
// package htmlreport.
package output

import (
	"fmt"
	"io"
	"strings"
)

// The format names, each declared once.
const (
	Table        = "table"
	Text         = "text"
	JSON         = "json"
	Markdown     = "markdown"
	TorchSummary = "torch-summary"
	JUnit        = "junit"
)

// Options are what the human formats vary by.
type Options struct {
	Color bool // ANSI colours
	// Warn and Alarm are the fragmentation ratios shown as high and very
	// high; zero means 0.20 and 0.30.
	Warn, Alarm float64
	// MaxBands is the most allocations the HTML explorer draws as bands of
	// their own; 0 = its default.
	MaxBands int
}

// A Renderer writes a result of kind T in one format.
type Renderer[T any] interface {
	Render(w io.Writer, v T, o Options) error
}

// RenderFunc is a Renderer written as a function.
type RenderFunc[T any] func(w io.Writer, v T, o Options) error

// Render calls f.
func (f RenderFunc[T]) Render(w io.Writer, v T, o Options) error { return f(w, v, o) }

// Format is a named Renderer.
type Format[T any] struct {
	Name string
	Doc  string // what it is, for the documentation
	Renderer[T]
}

// Registry holds the formats of one kind of result; the first is the
// default.
type Registry[T any] struct {
	Kind    string // the results, as the documentation names them
	Formats []Format[T]
}

// Names lists the formats' names in the registry's order.
func (r *Registry[T]) Names() []string {
	names := make([]string, len(r.Formats))
	for i, f := range r.Formats {
		names[i] = f.Name
	}
	return names
}

// Default is the name of the default format.
func (r *Registry[T]) Default() string { return r.Formats[0].Name }

// Help is the -o/--output flag's help.
func (r *Registry[T]) Help() string { return "output format: " + orList(r.Names()) }

// Lookup finds the format called name; the error names the valid ones.
func (r *Registry[T]) Lookup(name string) (Renderer[T], error) {
	for _, f := range r.Formats {
		if f.Name == name {
			return f.Renderer, nil
		}
	}
	return nil, fmt.Errorf("unknown format %q (want %s)", name, orList(r.Names()))
}

// Render writes v in the format called name.
func (r *Registry[T]) Render(w io.Writer, name string, v T, o Options) error {
	f, err := r.Lookup(name)
	if err != nil {
		return err
	}
	return f.Render(w, v, o)
}

// Doc is the registry as a Markdown list, for the documentation.
func (r *Registry[T]) Doc() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, `-o`/`--output` (default `%s`):\n\n", r.Kind, r.Default())
	for _, f := range r.Formats {
		fmt.Fprintf(&b, "- `%s`: %s\n", f.Name, f.Doc)
	}
	return b.String()
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Doc lists every kind of result and its formats, as docs/architecture.md
// shows them.
func Doc() string {
	return strings.Join([]string{ReplayFormats.Doc(), RanksFormats.Doc(), DiffFormats.Doc(), SweepFormats.Doc(), FragcheckFormats.Doc(), SummaryFormats.Doc(), VersionFormats.Doc()}, "\n")
}
