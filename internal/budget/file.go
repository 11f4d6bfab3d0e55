package budget

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	yaml "go.yaml.in/yaml/v3"

	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// FileNames are the names [Find] looks for, in each directory.
var FileNames = []string{"gpumem.yaml", ".gpumem.yaml"}

// ErrNotFound is returned by [Find] when no directory holds a budget file.
var ErrNotFound = errors.New("no budget file (gpumem.yaml or .gpumem.yaml) in this directory or above")

// File is a parsed budget file.
type File struct {
	Path string // the file's name, as given to [Parse]
	// Baseline is the baseline file as written ("" = none); resolve it
	// with [File.BaselinePath].
	Baseline  string
	Tolerance float64 // regression tolerance (default 5%)
	Cases     []Case
}

// BaselinePath is the baseline file's path resolved against the budget
// file's directory, "" when the file names none.
func (f *File) BaselinePath() string {
	if f.Baseline == "" || filepath.IsAbs(f.Baseline) {
		return f.Baseline
	}
	return filepath.Join(filepath.Dir(f.Path), f.Baseline)
}

// FileError reports a problem in a budget file, at a line when known.
type FileError struct {
	File string
	Line int // 0 when not known
	Err  error
}

func (e *FileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// Example is a budget file as help text shows it; a test parses it.
const Example = `  defaults:
    max_frag: 30%
  baseline: fragcheck-baseline.json
  cases:
    - name: gpt2
      trace: testdata/pytorch/gpt2_varlen.pickle
      max_reserved: 20GiB
    - name: toy
      workload: transformer
      params: {layers: 4, batch: 4}
      must_fit: 8GiB
`

// Find looks for a budget file in dir and its parents and returns the
// first one's path, or [ErrNotFound].
func Find(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		var found []string
		for _, name := range FileNames {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				found = append(found, p)
			} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return "", err
			}
		}
		switch len(found) {
		case 1:
			return found[0], nil
		case 2:
			return "", fmt.Errorf("%s holds both %s and %s: keep one", dir, FileNames[0], FileNames[1])
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNotFound
		}
		dir = parent
	}
}

// maxFileSize bounds what ReadFile reads: budgets are a few kilobytes.
const maxFileSize = 1 << 20

// ReadFile reads and parses the budget file at path (a regular file of
// at most maxFileSize bytes).
func ReadFile(path string) (*File, error) {
	data, err := readBounded(path, maxFileSize, "a budget file")
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses a budget file's contents; name is the file's path, used
// in errors and to resolve relative paths. Errors are *[FileError].
func Parse(name string, data []byte) (*File, error) {
	p := &parser{file: name}
	f, err := p.parse(data)
	if err != nil {
		var e *FileError
		if errors.As(err, &e) {
			return nil, err
		}
		return nil, &FileError{File: name, Err: err}
	}
	return f, nil
}

// maxItems bounds the items (keys, list entries) a budget file expands
// to, aliases followed: more than a file of maxFileSize bytes can hold
// without aliases, so that a small file whose cases alias one long list
// cannot make the parse hold gigabytes.
const maxItems = maxFileSize / 4

type parser struct {
	file  string
	items int // keys and list entries read so far, aliases followed
}

// count counts one more item at n, failing past maxItems.
func (p *parser) count(n *yaml.Node) error {
	if p.items++; p.items > maxItems {
		return p.errorf(n, "the file expands to more than %d items, its aliases followed (cases that alias one long list?)", maxItems)
	}
	return nil
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &FileError{File: p.file, Line: line, Err: fmt.Errorf(format, args...)}
}

// yamlLine finds the line in a yaml.v3 syntax error ("yaml: line 3: ...");
// compiled at its first use, not at every process start.
var yamlLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^yaml: line (\d+): `) })

func (p *parser) parse(data []byte) (*File, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := err.Error()
		if m := yamlLine().FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			return nil, &FileError{File: p.file, Line: line, Err: errors.New(msg[len(m[0]):])}
		}
		return nil, errors.New(strings.TrimPrefix(msg, "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, errors.New("empty budget file: it needs a list of cases")
	}
	root, err := p.deref(doc.Content[0])
	if err != nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		return nil, p.errorf(root, "want a mapping with a cases list at the top")
	}
	f := &File{Path: name(p.file), Tolerance: DefaultTolerance}
	var defaults settingKeys
	var cases *yaml.Node
	err = p.each(root, "the top level", fileKeys,
		func(key string, k, v *yaml.Node) error {
			switch key {
			case "version":
				if v.Kind != yaml.ScalarNode || v.Value != "1" {
					return p.errorf(v, "version: only version 1 is known")
				}
			case "defaults":
				return p.each(v, "defaults", settingNames, func(key string, k, v *yaml.Node) error {
					return p.setting(&defaults, key, v)
				})
			case "baseline":
				s, err := p.scalar(key, v)
				if err != nil {
					return err
				}
				f.Baseline = s
			case "tolerance":
				s, err := p.scalar(key, v)
				if err != nil {
					return err
				}
				t, err := units.ParseRatio(s)
				if err != nil || t == units.NoLimit {
					return p.errorf(v, "tolerance: invalid value %q: want a fraction such as 0.05 or a percentage such as 5%%", s)
				}
				f.Tolerance = t
			case "cases":
				cases = v
			}
			return nil
		})
	if err != nil {
		return nil, err
	}
	if cases == nil {
		return nil, p.errorf(root, "no cases: add a cases list")
	}
	if cases.Kind != yaml.SequenceNode {
		return nil, p.errorf(cases, "cases: want a list")
	}
	if len(cases.Content) == 0 {
		return nil, p.errorf(cases, "cases: the list is empty")
	}
	seen := map[string]int{}
	for _, n := range cases.Content {
		c, err := p.parseCase(n, defaults)
		if err != nil {
			return nil, err
		}
		if line, dup := seen[c.Name]; dup {
			return nil, p.errorf(n, "case %q: the name is already used by the case at line %d", c.Name, line)
		}
		seen[c.Name] = c.Line
		f.Cases = append(f.Cases, c)
	}
	return f, nil
}

// name keeps the file name as given, minus a leading "./".
func name(file string) string { return strings.TrimPrefix(file, "./") }

// deref follows an alias (*anchor) to its node, one level.
func (p *parser) deref(n *yaml.Node) (*yaml.Node, error) {
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil || n.Alias.Kind == yaml.AliasNode {
			return nil, p.errorf(n, "unresolved alias *%s", n.Value)
		}
		return n.Alias, nil
	}
	return n, nil
}

// each calls fn for the keys of a mapping, in order, rejecting unknown
// and repeated keys.
func (p *parser) each(n *yaml.Node, where string, known []string, fn func(key string, k, v *yaml.Node) error) error {
	n, err := p.deref(n)
	if err != nil {
		return err
	}
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, "%s: want a mapping of keys to values", where)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		v, err := p.deref(n.Content[i+1])
		if err != nil {
			return err
		}
		if k.Kind != yaml.ScalarNode {
			return p.errorf(k, "%s: keys must be plain words", where)
		}
		key := k.Value
		if key == "<<" {
			return p.errorf(k, "%s: merge keys (<<) are not supported; use defaults", where)
		}
		if known != nil && !contains(known, key) {
			return p.errorf(k, "%s: unknown key %q (known: %s)", where, key, strings.Join(known, ", "))
		}
		if seen[key] {
			return p.errorf(k, "%s: key %q given twice", where, key)
		}
		seen[key] = true
		if err := p.count(k); err != nil {
			return err
		}
		if err := fn(key, k, v); err != nil {
			return err
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// scalar returns a single value's text.
func (p *parser) scalar(key string, v *yaml.Node) (string, error) {
	switch {
	case v.Kind != yaml.ScalarNode:
		return "", p.errorf(v, "%s: want a single value, not a list or mapping", key)
	case v.Tag == "!!null":
		return "", p.errorf(v, "%s: no value given", key)
	}
	return v.Value, nil
}

// settingKeys holds the limits and settings given in one place (defaults
// or a case); nil means not given.
type settingKeys struct {
	metric            *Metric
	warnFrag, maxFrag *float64
	maxReserved       *uint64
	mustFit           *uint64
	allocConf         *alloc.Config
	policy            *alloc.Policy
	memoryFraction    *float64
	categories        [len(CategoryNames)]*uint64 // most bytes at the peak, per category
}

var settingNames = []string{"metric", "warn_frag", "max_frag", "max_reserved", "must_fit", "alloc_conf", "policy", "memory_fraction",
	"parameters", "buffers", "gradients", "optimizer_state", "activations", "temporaries", "inputs", "workspace", "unknown"}

func (p *parser) setting(s *settingKeys, key string, v *yaml.Node) error {
	text, err := p.scalar(key, v)
	if err != nil {
		return err
	}
	wrap := func(err error) error { return p.errorf(v, "%s: %v", key, err) }
	switch key {
	case "metric":
		m, err := ParseMetric(text)
		if err != nil {
			return wrap(err)
		}
		s.metric = &m
	case "warn_frag", "max_frag":
		r, err := units.ParseRatio(text)
		if err != nil {
			return wrap(err)
		}
		if key == "warn_frag" {
			s.warnFrag = &r
		} else {
			s.maxFrag = &r
		}
	case "max_reserved", "must_fit":
		n, err := units.ParseSize(text)
		if err == nil && n == 0 {
			err = fmt.Errorf("%q is zero bytes", text)
		}
		if err != nil {
			return wrap(err)
		}
		if key == "max_reserved" {
			s.maxReserved = &n
		} else {
			s.mustFit = &n
		}
	case "alloc_conf":
		c, err := alloc.ParseConfig(text)
		if err != nil {
			return wrap(err)
		}
		s.allocConf = &c
	case "policy":
		pol, err := alloc.ParsePolicy(text)
		if err != nil {
			return wrap(err)
		}
		s.policy = &pol
	case "parameters", "buffers", "gradients", "optimizer_state", "activations", "temporaries", "inputs", "workspace", "unknown":
		n, err := units.ParseSize(text)
		if err == nil && n == 0 {
			err = fmt.Errorf("%q is zero bytes", text)
		}
		if err != nil {
			return wrap(err)
		}
		s.categories[slices.Index(CategoryKeys[:], key)] = &n
	case "memory_fraction":
		r, err := units.ParseRatio(text)
		if err == nil && (r == units.NoLimit || r == 0) {
			err = fmt.Errorf("invalid fraction %q: want a number in (0, 1]", text)
		}
		if err != nil {
			return wrap(err)
		}
		s.memoryFraction = &r
	}
	return nil
}

// over returns s with the keys given in o replacing its own.
func (s settingKeys) over(o settingKeys) settingKeys {
	out := settingKeys{
		metric: or(o.metric, s.metric), warnFrag: or(o.warnFrag, s.warnFrag), maxFrag: or(o.maxFrag, s.maxFrag),
		maxReserved: or(o.maxReserved, s.maxReserved), mustFit: or(o.mustFit, s.mustFit),
		allocConf: or(o.allocConf, s.allocConf), policy: or(o.policy, s.policy),
		memoryFraction: or(o.memoryFraction, s.memoryFraction),
	}
	for i := range s.categories {
		out.categories[i] = or(o.categories[i], s.categories[i])
	}
	return out
}

// or is a when it is set, else b.
func or[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// given sets *dst to src when src is set (not nil).
func given[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// apply fills c's limits and settings from s, the rest from the defaults.
func (s settingKeys) apply(c *Case) {
	c.Limits = DefaultLimits()
	given(&c.Limits.Metric, s.metric)
	given(&c.Limits.WarnFrag, s.warnFrag)
	given(&c.Limits.MaxFrag, s.maxFrag)
	// A case that only lowers max_frag below the default warning means
	// "fail above this", not a contradiction.
	if s.maxFrag != nil && s.warnFrag == nil && c.Limits.WarnFrag > c.Limits.MaxFrag {
		c.Limits.WarnFrag = c.Limits.MaxFrag
	}
	given(&c.Limits.MaxReserved, s.maxReserved)
	given(&c.Limits.MustFit, s.mustFit)
	for i, n := range s.categories {
		given(&c.Limits.Categories[i], n)
	}
	c.Setup.Config = s.allocConf
	given(&c.Setup.Policy, s.policy)
	given(&c.Setup.Fraction, s.memoryFraction)
	c.Setup.Card = c.Limits.MustFit
}

var caseNames = append([]string{"name", "trace", "traces", "workload", "params", "device"}, settingNames...)

func (p *parser) parseCase(n *yaml.Node, defaults settingKeys) (Case, error) {
	c := Case{Dir: filepath.Dir(p.file), File: name(p.file), Line: n.Line}
	var own settingKeys
	var nameNode, deviceNode, paramsNode *yaml.Node
	where := "case"
	if d, err := p.deref(n); err == nil && d.Kind == yaml.MappingNode {
		// Name the case in messages as soon as its name is known.
		for i := 0; i+1 < len(d.Content); i += 2 {
			if d.Content[i].Value == "name" && d.Content[i+1].Kind == yaml.ScalarNode {
				where = fmt.Sprintf("case %q", d.Content[i+1].Value)
			}
		}
	}
	err := p.each(n, where, caseNames, func(key string, k, v *yaml.Node) error {
		switch key {
		case "name", "trace", "workload":
			s, err := p.scalar(where+": "+key, v)
			if err != nil {
				return err
			}
			if strings.TrimSpace(s) == "" {
				return p.errorf(v, "%s: %s is empty", where, key)
			}
			switch key {
			case "name":
				c.Name, nameNode = s, v
			case "trace":
				c.Trace = s
			case "workload":
				c.Workload = s
			}
		case "traces":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				return p.errorf(v, "%s: traces: want a list of trace files or globs", where)
			}
			for _, item := range v.Content {
				if err := p.count(item); err != nil {
					return err
				}
				s, err := p.scalar(where+": traces", item)
				if err != nil {
					return err
				}
				if strings.TrimSpace(s) == "" {
					return p.errorf(item, "%s: traces: an empty name", where)
				}
				c.Traces = append(c.Traces, s)
			}
		case "device":
			s, err := p.scalar(where+": "+key, v)
			if err != nil {
				return err
			}
			d, err := strconv.Atoi(s)
			if err != nil || d < 0 {
				return p.errorf(v, "%s: device: %q is not a device index", where, s)
			}
			c.Device, deviceNode = d, v
		case "params":
			paramsNode = v
			c.Params = map[string]string{}
			return p.each(v, where+": params", nil, func(key string, _, v *yaml.Node) error {
				s, err := p.scalar(where+": params: "+key, v)
				if err != nil {
					return err
				}
				c.Params[key] = s
				return nil
			})
		default:
			if err := p.setting(&own, key, v); err != nil {
				var e *FileError
				if errors.As(err, &e) {
					e.Err = fmt.Errorf("%s: %w", where, e.Err)
				}
				return err
			}
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	switch {
	case c.Trace != "" && c.Traces != nil:
		return c, p.errorf(n, "%s: give trace or traces, not both", where)
	case c.Traces != nil && c.Workload != "":
		return c, p.errorf(n, "%s: give traces or a workload, not both", where)
	case c.Trace == "" && c.Traces == nil && c.Workload == "":
		return c, p.errorf(n, "%s: give a trace or a workload", where)
	case c.Trace != "" && c.Workload != "":
		return c, p.errorf(n, "%s: give a trace or a workload, not both", where)
	case paramsNode != nil && (c.Trace != "" || c.Traces != nil):
		return c, p.errorf(paramsNode, "%s: params are for workloads; a trace takes none", where)
	case deviceNode != nil && c.Workload != "":
		return c, p.errorf(deviceNode, "%s: device is for traces; a workload has one device", where)
	}
	if c.Name == "" {
		first := c.Trace + c.Workload
		if c.Traces != nil {
			first = c.Traces[0]
		}
		c.Name = DefaultName(first)
		where = fmt.Sprintf("case %q", c.Name)
	} else if strings.ContainsAny(c.Name, "\n\r") {
		return c, p.errorf(nameNode, "%s: the name must be one line", where)
	}
	merged := defaults.over(own)
	if own.maxFrag != nil && own.warnFrag == nil && merged.warnFrag != nil && *merged.warnFrag > *own.maxFrag {
		merged.warnFrag = own.maxFrag // as for the built-in warning, see apply
	}
	merged.apply(&c)
	if err := c.Limits.Validate(); err != nil {
		return c, p.errorf(n, "%s: %v", where, err)
	}
	if c.Setup.Fraction != 0 && c.Setup.Card == 0 {
		return c, p.errorf(n, "%s: memory_fraction needs must_fit (the card it is a fraction of)", where)
	}
	return c, nil
}
