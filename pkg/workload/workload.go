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
	// Ops is what the program does to the allocator, in order.
	Ops []alloc.Op
	// Phases mark where named parts of the program start.
	Phases []Phase
	// Limit is the device memory, in bytes, the workload is meant to run
	// in (a `limit` statement), or 0 when any amount will do.
	Limit uint64
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
	for _, b := range Builtins() {
		if b.Name == nameOrFile {
			return b.Build(params)
		}
	}
	w, err := parseFile(nameOrFile, params)
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(nameOrFile, `/\.`) {
		return nil, fmt.Errorf("no builtin workload or file named %q", nameOrFile)
	}
	return w, err
}

// ParseFile parses the workload script at path. The workload is named
// after the file, without directory or extension.
func ParseFile(path string) (*Workload, error) {
	return parseFile(path, nil)
}

func parseFile(path string, params map[string]string) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	w, err := ParseWith(path, f, params)
	if err != nil {
		return nil, err
	}
	w.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	return w, nil
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
				return fmt.Errorf("%s: unknown parameter %q (it takes none)", builtin, k)
			}
			return fmt.Errorf("%s: unknown parameter %q (known: %s)", builtin, k, strings.Join(names, ", "))
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
