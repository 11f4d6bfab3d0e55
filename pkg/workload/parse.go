package workload

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Limits on what a script may ask for.
const (
	maxSize   = 1 << 50 // bytes in one allocation
	maxStream = 1 << 32
	maxLine   = 1 << 16
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
	prog, err := parseScript(name, r)
	if err != nil {
		return nil, err
	}
	overrides := map[string]int64{}
	for k, v := range params {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: parameter %s=%q: not an integer", name, k, v)
		}
		if !prog.params[k] {
			return nil, fmt.Errorf("%s: unknown parameter %q (the script declares no `param %s`)", name, k, k)
		}
		overrides[k] = n
	}
	x := &runner{
		name:      name,
		b:         newBuilder(name, prog.description),
		env:       env{vars: map[string]int64{}, rng: rand.New(rand.NewPCG(1, 0))},
		overrides: overrides,
	}
	if err := x.run(prog.body); err != nil {
		return nil, err
	}
	return x.b.finish()
}

// stmt is one statement of a script.
type stmt struct {
	line   int
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

func parseScript(name string, r io.Reader) (*script, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	s := &script{params: map[string]bool{}}
	// stack of open repeat blocks; the bottom is the script body.
	type frame struct {
		st   stmt
		body []stmt
	}
	stack := []frame{{}}
	line := 0
	for sc.Scan() {
		line++
		fail := func(format string, args ...any) error {
			return &Error{Name: name, Line: line, Err: fmt.Errorf(format, args...)}
		}
		text := strings.TrimSuffix(sc.Text(), "\r")
		toks, err := lex(text)
		if err != nil {
			return nil, fail("%v", err)
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
			return nil, fail("%v", err)
		}
		st.line = line
		switch st.verb {
		case "description":
			s.description = st.text
			continue
		case "param":
			if len(stack) > 1 {
				return nil, fail("param inside repeat")
			}
			if s.params[st.ident] {
				return nil, fail("param %s declared twice", st.ident)
			}
			s.params[st.ident] = true
		case "repeat":
			stack = append(stack, frame{st: st})
			continue
		}
		top := &stack[len(stack)-1]
		top.body = append(top.body, st)
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, &Error{Name: name, Line: line + 1, Err: fmt.Errorf("line longer than %d bytes", maxLine)}
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
			return st, fmt.Errorf("%s %s: %w", st.verb, st.ident, err)
		}
		x, err := p.expr()
		if err != nil {
			return st, fmt.Errorf("%s %s: %w", st.verb, st.ident, err)
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
			return st, fmt.Errorf("alloc %s: %w", b.base, err)
		}
		st.x = x
		if st.stream, err = p.streamOpt(false); err != nil {
			return st, fmt.Errorf("alloc %s: %w", b.base, err)
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
			return st, fmt.Errorf("record_stream %s: %w", b.base, err)
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
		return st, fmt.Errorf("unknown statement %q", st.verb)
	}
	if t, ok := p.peek(); ok {
		return st, fmt.Errorf("%s: unexpected %s", st.verb, t)
	}
	return st, nil
}

// checkIdent rejects variable names that would read as something else.
func checkIdent(s string) error {
	if _, ok := unitOf(s); ok {
		return fmt.Errorf("%s is a unit, not a variable name", s)
	}
	if _, ok := funcs[s]; ok {
		return fmt.Errorf("%s is a function, not a variable name", s)
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
	steps     int // statements executed, bounded so loops without operations end
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

func (x *runner) exec(st *stmt) error {
	x.steps++
	if x.steps > maxOps {
		return fmt.Errorf("script runs more than %d statements", maxOps)
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
		x.b.phase(st.text)
	case "alloc":
		name, err := x.bufName(st.buf)
		if err != nil {
			return err
		}
		size, err := x.size(st.x)
		if err != nil {
			return fmt.Errorf("alloc %s: %w", name, err)
		}
		stream, err := x.stream(st.stream)
		if err != nil {
			return fmt.Errorf("alloc %s: %w", name, err)
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
			return fmt.Errorf("record_stream %s: %w", name, err)
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
			x.env.vars[st.ident] = i
			if err := x.run(st.body); err != nil {
				return err
			}
			if len(st.body) == 0 && i > maxOps {
				return fmt.Errorf("repeat count %d is too large for an empty block", n)
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
			return "", fmt.Errorf("index of %s: %w", b.base, err)
		}
		fmt.Fprintf(&sb, "[%d]", v)
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
