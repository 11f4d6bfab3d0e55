package workload

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// Limits on what a script may ask for.
const (
	maxSize   = 1 << 50 // bytes in one allocation
	maxStream = 1 << 32
)

// An Error is a problem at one line of a script.
type Error struct {
	Name string // the script's name, usually its path
	Line int
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %v", e.Name, e.Line, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Parse reads a workload script (see the package documentation) and runs
// it into operations. name labels errors and the workload.
func Parse(name string, r io.Reader) (*Workload, error) {
	return ParseWith(name, r, nil)
}

// ParseWith is [Parse] with parameters: params[k] overrides the default
// of the script's `param k = ...` statement. A parameter the script does
// not declare is an error.
func ParseWith(name string, r io.Reader, params map[string]string) (*Workload, error) {
	w, err := open(name, r, params, DefaultLimits)
	if err != nil {
		return nil, err
	}
	if err := w.Materialize(); err != nil {
		return nil, err
	}
	return w, nil
}

// open parses a script and runs it once without keeping its operations,
// which checks it against lim and finds its phases and length.
func open(name string, r io.Reader, params map[string]string, lim Limits) (*Workload, error) {
	prog, err := compile(name, r, params, lim)
	if err != nil {
		return nil, err
	}
	b := prog.builder(func([]alloc.Op) error {
		if lim.Context != nil {
			return lim.Context.Err()
		}
		return nil
	})
	if err := prog.run(b); err != nil {
		return nil, err
	}
	w := b.w
	w.prog, w.n = prog, b.n
	return &w, nil
}

// A program is a parsed script with its parameters, ready to run; each
// run makes the same operations.
type program struct {
	name      string
	s         *script
	overrides map[string]int64
	lim       Limits
}

func compile(name string, r io.Reader, params map[string]string, lim Limits) (*program, error) {
	s, err := parseScript(name, r)
	if err != nil {
		return nil, err
	}
	overrides := map[string]int64{}
	for k, v := range params {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: parameter %s=%s: not an integer", name, short(k), quote(v))
		}
		if !s.params[k] {
			return nil, fmt.Errorf("%s: unknown parameter %s (the script declares no `param %s`)", name, quote(k), short(k))
		}
		overrides[k] = n
	}
	return &program{name: name, s: s, overrides: overrides, lim: lim.orDefault()}, nil
}

// builder returns a builder whose operations go to sink in batches, or
// stay in its workload when sink is nil.
func (p *program) builder(sink func([]alloc.Op) error) *builder {
	b := newBuilder(p.name, p.s.description)
	b.lim = p.lim
	if sink != nil {
		b.sink, b.batch = sink, make([]alloc.Op, 0, batchOps)
	}
	return b
}

// batchOps is how many operations a streaming run hands on at a time.
const batchOps = 1 << 14

// run executes the program into b and finishes it.
func (p *program) run(b *builder) error {
	x := &runner{
		name:      p.name,
		b:         b,
		env:       env{vars: map[string]int64{}, rng: rand.New(rand.NewPCG(1, 0))},
		overrides: p.overrides,
		steps:     int64(p.lim.Ops) * StepsPerOp,
	}
	if err := x.run(p.s.body); err != nil {
		return err
	}
	if _, err := b.finish(); err != nil {
		// Completing the last pending frees can pass the operation limit.
		return fmt.Errorf("%s: at the end: %w", p.name, err)
	}
	return nil
}

// stmt is one statement of a script.
type stmt struct {
	line   int
	cost   int64 // steps one execution takes: 1 plus its expression terms
	verb   string
	buf    bufName // alloc, free, record_stream
	bufs   []bufName
	x      expr   // the size, count or value
	stream expr   // stream=, or nil
	ident  string // let, param, repeat ... as
	text   string // phase, description
	body   []stmt // repeat
}

// bufName is a buffer name with index expressions: tmp[i][j].
type bufName struct {
	base  string
	index []expr
}

type script struct {
	description string
	params      map[string]bool
	body        []stmt
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func parseScript(name string, r io.Reader) (*script, error) {
	cr := &countReader{r: io.LimitReader(r, maxScript+1)}
	tooLong := &LimitError{What: "bytes in a script", Limit: maxScript}
	sc := bufio.NewScanner(cr)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	s := &script{params: map[string]bool{}}
	// stack of open repeat blocks; the bottom is the script body.
	type frame struct {
		st   stmt
		body []stmt
	}
	stack := []frame{{}}
	line := 0
	read := int64(0) // bytes of the lines so far
	for sc.Scan() {
		line++
		fail := func(format string, args ...any) error {
			return &Error{Name: name, Line: line, Err: fmt.Errorf(format, args...)}
		}
		// The line that takes the script past maxScript is at fault.
		if read += int64(len(sc.Bytes())) + 1; read > maxScript && cr.n > maxScript {
			return nil, &Error{Name: name, Line: line, Err: tooLong}
		}
		text := strings.TrimSuffix(sc.Text(), "\r")
		if line == 1 {
			text = strings.TrimPrefix(text, "\uFEFF") // a UTF-8 byte-order mark
		}
		toks, err := lex(text)
		if err != nil {
			return nil, fail("%w", err)
		}
		if len(toks) == 0 {
			continue
		}
		if toks[0].kind == '}' {
			if len(toks) > 1 {
				return nil, fail("unexpected %s after }", toks[1])
			}
			if len(stack) == 1 {
				return nil, fail("} without repeat")
			}
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			top.st.body = top.body
			parent := &stack[len(stack)-1]
			parent.body = append(parent.body, top.st)
			continue
		}
		st, err := parseStmt(toks, text)
		if err != nil {
			return nil, fail("%w", err)
		}
		st.line = line
		st.cost = st.terms()
		switch st.verb {
		case "description":
			s.description = st.text
			continue
		case "param":
			if len(stack) > 1 {
				return nil, fail("param inside repeat")
			}
			if s.params[st.ident] {
				return nil, fail("param %s declared twice", short(st.ident))
			}
			s.params[st.ident] = true
		case "repeat":
			if len(stack) > maxNesting {
				return nil, &Error{Name: name, Line: line, Err: &LimitError{What: "nested repeat blocks", Limit: maxNesting}}
			}
			stack = append(stack, frame{st: st})
			continue
		}
		top := &stack[len(stack)-1]
		top.body = append(top.body, st)
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, &Error{Name: name, Line: line + 1, Err: &LimitError{What: "bytes in a line", Limit: maxLine}}
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(stack) > 1 {
		open := stack[len(stack)-1].st.line
		return nil, &Error{Name: name, Line: open, Err: fmt.Errorf("repeat block not closed with }")}
	}
	s.body = stack[0].body
	return s, nil
}

// parseStmt parses one line that is not a closing brace.
func parseStmt(toks []token, text string) (stmt, error) {
	if toks[0].kind != 'i' {
		return stmt{}, fmt.Errorf("expected a statement, found %s", toks[0])
	}
	st := stmt{verb: toks[0].text}
	p := &exprParser{toks: toks, pos: 1}
	switch st.verb {
	case "description", "phase":
		// The rest of the line, as written, is the text.
		rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), st.verb))
		if i := strings.IndexByte(rest, '#'); i >= 0 {
			rest = strings.TrimSpace(rest[:i])
		}
		if rest == "" {
			return st, fmt.Errorf("%s needs a name", st.verb)
		}
		st.text = rest
		return st, nil
	case "seed", "limit":
		x, err := p.expr()
		if err != nil {
			return st, fmt.Errorf("%s: %w", st.verb, err)
		}
		st.x = x
	case "let", "param":
		t, ok := p.peek()
		if !ok || t.kind != 'i' {
			return st, fmt.Errorf("%s needs a variable name", st.verb)
		}
		if err := checkIdent(t.text); err != nil {
			return st, err
		}
		p.pos++
		st.ident = t.text
		if err := p.expect('='); err != nil {
			return st, fmt.Errorf("%s %s: %w", st.verb, short(st.ident), err)
		}
		x, err := p.expr()
		if err != nil {
			return st, fmt.Errorf("%s %s: %w", st.verb, short(st.ident), err)
		}
		st.x = x
	case "alloc":
		b, err := p.bufName()
		if err != nil {
			return st, fmt.Errorf("alloc: %w", err)
		}
		st.buf = b
		x, err := p.expr()
		if err != nil {
			return st, fmt.Errorf("alloc %s: %w", short(b.base), err)
		}
		st.x = x
		if st.stream, err = p.streamOpt(false); err != nil {
			return st, fmt.Errorf("alloc %s: %w", short(b.base), err)
		}
	case "free":
		for p.pos < len(p.toks) {
			b, err := p.bufName()
			if err != nil {
				return st, fmt.Errorf("free: %w", err)
			}
			st.bufs = append(st.bufs, b)
		}
		if len(st.bufs) == 0 {
			return st, fmt.Errorf("free needs a buffer name")
		}
	case "record_stream":
		b, err := p.bufName()
		if err != nil {
			return st, fmt.Errorf("record_stream: %w", err)
		}
		st.buf = b
		if st.stream, err = p.streamOpt(true); err != nil {
			return st, fmt.Errorf("record_stream %s: %w", short(b.base), err)
		}
	case "empty_cache":
	case "repeat":
		x, err := p.expr()
		if err != nil {
			return st, fmt.Errorf("repeat: %w", err)
		}
		st.x = x
		st.ident = "i"
		if t, ok := p.peek(); ok && t.kind == 'i' && t.text == "as" {
			p.pos++
			v, ok := p.peek()
			if !ok || v.kind != 'i' {
				return st, fmt.Errorf("repeat ... as needs a variable name")
			}
			if err := checkIdent(v.text); err != nil {
				return st, err
			}
			st.ident = v.text
			p.pos++
		}
		if err := p.expect('{'); err != nil {
			return st, fmt.Errorf("repeat: %w", err)
		}
	default:
		return st, fmt.Errorf("unknown statement %s", quote(st.verb))
	}
	if t, ok := p.peek(); ok {
		return st, fmt.Errorf("%s: unexpected %s", st.verb, t)
	}
	return st, nil
}

// checkIdent rejects variable names that would read as something else.
func checkIdent(s string) error {
	if _, ok := unitOf(s); ok {
		return fmt.Errorf("%s is a unit, not a variable name", short(s))
	}
	if _, ok := funcs[s]; ok {
		return fmt.Errorf("%s is a function, not a variable name", short(s))
	}
	return nil
}

func (p *exprParser) bufName() (bufName, error) {
	t, ok := p.peek()
	if !ok || t.kind != 'i' {
		if ok {
			return bufName{}, fmt.Errorf("expected a buffer name, found %s", t)
		}
		return bufName{}, fmt.Errorf("expected a buffer name")
	}
	p.pos++
	b := bufName{base: t.text}
	for {
		t, ok := p.peek()
		if !ok || t.kind != '[' || !t.glue {
			return b, nil
		}
		p.pos++
		x, err := p.expr()
		if err != nil {
			return b, err
		}
		if err := p.expect(']'); err != nil {
			return b, err
		}
		b.index = append(b.index, x)
	}
}

// streamOpt parses "stream=EXPR" or, when required, a bare stream number.
func (p *exprParser) streamOpt(required bool) (expr, error) {
	t, ok := p.peek()
	if !ok {
		if required {
			return nil, fmt.Errorf("needs stream=N")
		}
		return nil, nil
	}
	if t.kind == 'i' && t.text == "stream" {
		p.pos++
		if err := p.expect('='); err != nil {
			return nil, err
		}
		return p.expr()
	}
	if required {
		return p.expr()
	}
	return nil, fmt.Errorf("unexpected %s (options: stream=N)", t)
}

// runner executes a parsed script into a builder.
type runner struct {
	name      string
	b         *builder
	env       env
	overrides map[string]int64
	steps     int64 // steps left: loops that make no operations end too
}

func (x *runner) run(body []stmt) error {
	for i := range body {
		if err := x.exec(&body[i]); err != nil {
			if _, ok := err.(*Error); ok {
				return err
			}
			return &Error{Name: x.name, Line: body[i].line, Err: err}
		}
	}
	return nil
}

// step takes n steps from the budget.
func (x *runner) step(n int64) error {
	x.steps -= n
	if x.steps < 0 {
		lim := x.b.lim
		return &LimitError{What: "steps", Limit: int64(lim.Ops) * StepsPerOp, Hint: lim.OpsHint}
	}
	return nil
}

func (x *runner) exec(st *stmt) error {
	if err := x.step(st.cost); err != nil {
		return err
	}
	switch st.verb {
	case "seed":
		v, err := st.x.eval(&x.env)
		if err != nil {
			return err
		}
		x.env.rng = rand.New(rand.NewPCG(uint64(v), 0))
	case "limit":
		v, err := x.size(st.x)
		if err != nil {
			return fmt.Errorf("limit: %w", err)
		}
		x.b.w.Limit = v
	case "let":
		v, err := st.x.eval(&x.env)
		if err != nil {
			return err
		}
		x.env.vars[st.ident] = v
	case "param":
		if v, ok := x.overrides[st.ident]; ok {
			x.env.vars[st.ident] = v
			return nil
		}
		v, err := st.x.eval(&x.env)
		if err != nil {
			return err
		}
		x.env.vars[st.ident] = v
	case "phase":
		if err := x.b.hold(int64(len(st.text)) + phaseCost); err != nil {
			return err
		}
		x.b.phase(st.text)
	case "alloc":
		name, err := x.bufName(st.buf)
		if err != nil {
			return err
		}
		size, err := x.size(st.x)
		if err != nil {
			return fmt.Errorf("alloc %s: %w", short(name), err)
		}
		stream, err := x.stream(st.stream)
		if err != nil {
			return fmt.Errorf("alloc %s: %w", short(name), err)
		}
		return x.b.alloc(name, size, stream)
	case "free":
		for _, bn := range st.bufs {
			name, err := x.bufName(bn)
			if err != nil {
				return err
			}
			if err := x.b.release(name); err != nil {
				return err
			}
		}
	case "record_stream":
		name, err := x.bufName(st.buf)
		if err != nil {
			return err
		}
		stream, err := x.stream(st.stream)
		if err != nil {
			return fmt.Errorf("record_stream %s: %w", short(name), err)
		}
		return x.b.recordStream(name, stream)
	case "empty_cache":
		return x.b.emptyCache()
	case "repeat":
		n, err := st.x.eval(&x.env)
		if err != nil {
			return fmt.Errorf("repeat: %w", err)
		}
		if n < 0 {
			return fmt.Errorf("repeat count %d is negative", n)
		}
		old, had := x.env.vars[st.ident]
		for i := range n {
			if i > 0 { // the first iteration was paid for with the statement
				if err := x.step(1); err != nil {
					return err
				}
			}
			x.env.vars[st.ident] = i
			if err := x.run(st.body); err != nil {
				return err
			}
		}
		if had {
			x.env.vars[st.ident] = old
		} else {
			delete(x.env.vars, st.ident)
		}
	}
	return nil
}

func (x *runner) bufName(b bufName) (string, error) {
	if len(b.index) == 0 {
		return b.base, nil
	}
	var sb strings.Builder
	sb.WriteString(b.base)
	for _, e := range b.index {
		v, err := e.eval(&x.env)
		if err != nil {
			return "", fmt.Errorf("index of %s: %w", short(b.base), err)
		}
		sb.WriteByte('[')
		sb.WriteString(strconv.FormatInt(v, 10))
		sb.WriteByte(']')
	}
	return sb.String(), nil
}

func (x *runner) size(e expr) (uint64, error) {
	v, err := e.eval(&x.env)
	if err != nil {
		return 0, err
	}
	if v <= 0 || v > maxSize {
		return 0, fmt.Errorf("size %d out of range (1 byte to 1 PiB)", v)
	}
	return uint64(v), nil
}

func (x *runner) stream(e expr) (uint64, error) {
	if e == nil {
		return 0, nil
	}
	v, err := e.eval(&x.env)
	if err != nil {
		return 0, err
	}
	if v < 0 || v >= maxStream {
		return 0, fmt.Errorf("stream %d out of range", v)
	}
	return uint64(v), nil
}

// terms counts the expression terms of a statement, which each take a
// step when it runs.
func (st *stmt) terms() int64 {
	n := 1 + terms(st.x) + terms(st.stream)
	for _, b := range append([]bufName{st.buf}, st.bufs...) {
		for _, e := range b.index {
			n += terms(e)
		}
	}
	return n
}

func terms(e expr) int64 {
	switch e := e.(type) {
	case negExpr:
		return 1 + terms(e.x)
	case binExpr:
		return 1 + terms(e.x) + terms(e.y)
	case callExpr:
		n := int64(1)
		for _, a := range e.args {
			n += terms(a)
		}
		return n
	case nil:
		return 0
	}
	return 1
}
