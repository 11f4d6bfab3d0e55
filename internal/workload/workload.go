package workload

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// A Workload is a named stream of allocator operations.
type Workload struct {
	Name        string
	Description string
	// Ops is what the program does to the allocator, in order. A script
	// workload from [Open] leaves it nil until [Workload.Materialize].
	Ops []alloc.Op
	// Phases mark where named parts of the program start.
	Phases []Phase
	// Limit is the device memory, in bytes, the workload is meant to run
	// in (a `limit` statement), or 0 when any amount will do.
	Limit uint64

	prog *program // the script that makes Ops, when Open left them unmade
	n    int      // len(Ops) once made
}

// A Phase marks that the phase Name starts at Ops[Op]; it lasts until the
// next phase starts. Op may equal len(Ops) for a phase that holds nothing.
type Phase struct {
	Name string
	Op   int
}

// A Builtin is a workload gpumem ships, built from parameters.
type Builtin struct {
	Name        string
	Description string // one line
	Params      []Param
	// Build makes the workload. Parameters it does not know are an error;
	// missing ones take their defaults.
	Build func(params map[string]string) (*Workload, error)
}

// A Param is one parameter a builtin accepts.
type Param struct {
	Name, Default, Help string
}

// Builtins returns the built-in workloads sorted by name.
func Builtins() []Builtin {
	b := []Builtin{
		fragDemo(),
		freeButFails(),
		transformer(),
	}
	b = append(b, strategies()...)
	slices.SortFunc(b, func(x, y Builtin) int { return strings.Compare(x.Name, y.Name) })
	return b
}

// Lookup returns the builtin called nameOrFile built with params, or else
// parses the script file at that path, params overriding the defaults of
// its `param` statements.
func Lookup(nameOrFile string, params map[string]string) (*Workload, error) {
	w, err := Open(nameOrFile, params, DefaultLimits)
	if err != nil {
		return nil, err
	}
	if err := w.Materialize(); err != nil {
		return nil, err
	}
	return w, nil
}

// Open is [Lookup] within lim, without making a script's operations:
// it runs the script once to check it and to find its phases and length,
// and leaves Ops nil; [Workload.Replay] then makes them batch by batch as
// the allocator consumes them, so that memory stays bounded however long
// the script runs. Builtins are built as by Lookup.
func Open(nameOrFile string, params map[string]string, lim Limits) (*Workload, error) {
	for _, b := range Builtins() {
		if b.Name == nameOrFile {
			return b.Build(params)
		}
	}
	w, err := openFile(nameOrFile, params, lim)
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(nameOrFile, `/\.`) {
		return nil, fmt.Errorf("no builtin workload or file named %s", quote(nameOrFile))
	}
	return w, err
}

// ParseFile parses the workload script at path. The workload is named
// after the file, without directory or extension.
func ParseFile(path string) (*Workload, error) {
	w, err := openFile(path, nil, DefaultLimits)
	if err != nil {
		return nil, err
	}
	if err := w.Materialize(); err != nil {
		return nil, err
	}
	return w, nil
}

func openFile(path string, params map[string]string, lim Limits) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	w, err := open(path, f, params, lim)
	if err != nil {
		return nil, err
	}
	w.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	return w, nil
}

// Len returns the number of operations, made or not.
func (w *Workload) Len() int {
	if w.prog == nil {
		return len(w.Ops)
	}
	return w.n
}

// Materialize makes the operations of a workload from [Open] into Ops.
func (w *Workload) Materialize() error {
	if w.prog == nil {
		return nil
	}
	b := w.prog.builder(nil)
	b.noPhases = true
	b.w.Ops = make([]alloc.Op, 0, w.n)
	if err := w.prog.run(b); err != nil {
		return err
	}
	w.Ops, w.prog = b.w.Ops, nil
	return nil
}

// checkParams reports a parameter that is not one of known.
func checkParams(builtin string, params map[string]string, known []Param) error {
	for k := range params {
		if !slices.ContainsFunc(known, func(p Param) bool { return p.Name == k }) {
			names := make([]string, len(known))
			for i, p := range known {
				names[i] = p.Name
			}
			if len(names) == 0 {
				return fmt.Errorf("%s: unknown parameter %s (it takes none)", builtin, quote(k))
			}
			return fmt.Errorf("%s: unknown parameter %s (known: %s)", builtin, quote(k), strings.Join(names, ", "))
		}
	}
	return nil
}

// param returns params[name] or the declared default.
func param(params map[string]string, known []Param, name string) string {
	if v, ok := params[name]; ok {
		return v
	}
	for _, p := range known {
		if p.Name == name {
			return p.Default
		}
	}
	return ""
}
