package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"
)

// units maps size units, matched without regard to case, to bytes. The
// byte unit is only "B", so that b stays free for a variable.
var units = map[string]int64{
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

func unitOf(s string) (int64, bool) {
	if s == "B" {
		return 1, true
	}
	u, ok := units[strings.ToLower(s)]
	return u, ok
}

// token is one lexical element of a line.
type token struct {
	kind byte   // 'i' identifier, 'n' number, or the punctuation byte itself
	text string // identifier or number text
	glue bool   // no space before this token
}

func lex(line string) ([]token, error) {
	var toks []token
	glue := false
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			i++
			glue = false
			continue
		case c == '#':
			return toks, nil
		case isLetter(c):
			j := i + 1
			for j < len(line) && (isLetter(line[j]) || isDigit(line[j]) || line[j] == '.') {
				j++
			}
			toks = append(toks, token{kind: 'i', text: line[i:j], glue: glue})
			i = j
		case isDigit(c):
			j := i + 1
			for j < len(line) && (isDigit(line[j]) || line[j] == '_' || line[j] == '.') {
				j++
			}
			toks = append(toks, token{kind: 'n', text: line[i:j], glue: glue})
			i = j
		case strings.IndexByte("+-*/%()[]{},=", c) >= 0:
			toks = append(toks, token{kind: c, glue: glue})
			i++
		default:
			r, size := utf8.DecodeRuneInString(line[i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, fmt.Errorf("unexpected byte %#02x (not UTF-8)", c)
			}
			return nil, fmt.Errorf("unexpected character %q", r)
		}
		glue = true
	}
	return toks, nil
}

func isLetter(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }

func (t token) String() string {
	switch t.kind {
	case 'i', 'n':
		return quote(t.text)
	}
	return strconv.Quote(string(t.kind))
}

// expr is an integer expression, evaluated each time a statement runs so
// that loop variables and rand() take their current values.
type expr interface {
	eval(e *env) (int64, error)
}

type (
	numExpr int64
	varExpr string
	negExpr struct{ x expr }
	binExpr struct {
		op   byte
		x, y expr
	}
	callExpr struct {
		fn   string
		args []expr
	}
)

// env is what expressions see while a script runs.
type env struct {
	vars map[string]int64
	rng  *rand.Rand
}

func (n numExpr) eval(*env) (int64, error) { return int64(n), nil }

func (v varExpr) eval(e *env) (int64, error) {
	x, ok := e.vars[string(v)]
	if !ok {
		return 0, fmt.Errorf("undefined variable %s", short(string(v)))
	}
	return x, nil
}

func (n negExpr) eval(e *env) (int64, error) {
	x, err := n.x.eval(e)
	if err != nil {
		return 0, err
	}
	if x == math.MinInt64 {
		return 0, errOverflow
	}
	return -x, nil
}

var errOverflow = fmt.Errorf("arithmetic overflow")

func (b binExpr) eval(e *env) (int64, error) {
	x, err := b.x.eval(e)
	if err != nil {
		return 0, err
	}
	y, err := b.y.eval(e)
	if err != nil {
		return 0, err
	}
	return arith(b.op, x, y)
}

func arith(op byte, x, y int64) (int64, error) {
	switch op {
	case '+':
		r := x + y
		if (r > x) != (y > 0) {
			return 0, errOverflow
		}
		return r, nil
	case '-':
		r := x - y
		if (r < x) != (y > 0) {
			return 0, errOverflow
		}
		return r, nil
	case '*':
		if x == 0 || y == 0 {
			return 0, nil
		}
		r := x * y
		if r/y != x || (x == -1 && y == math.MinInt64) || (y == -1 && x == math.MinInt64) {
			return 0, errOverflow
		}
		return r, nil
	case '/', '%':
		if y == 0 {
			return 0, fmt.Errorf("division by zero")
		}
		if x == math.MinInt64 && y == -1 {
			return 0, errOverflow
		}
		if op == '/' {
			return x / y, nil
		}
		return x % y, nil
	}
	panic("workload: unknown operator " + string(op))
}

func (c callExpr) eval(e *env) (int64, error) {
	args := make([]int64, len(c.args))
	for i, a := range c.args {
		v, err := a.eval(e)
		if err != nil {
			return 0, err
		}
		args[i] = v
	}
	switch c.fn {
	case "rand":
		lo, hi := args[0], args[1]
		if hi < lo {
			return 0, fmt.Errorf("rand(%d, %d): high bound below low bound", lo, hi)
		}
		span := uint64(hi - lo)
		if span == math.MaxUint64 {
			return int64(e.rng.Uint64()), nil
		}
		return lo + int64(e.rng.Uint64N(span+1)), nil
	case "min":
		return min(args[0], args[1]), nil
	case "max":
		return max(args[0], args[1]), nil
	case "align":
		// align(x, a) rounds x up to a multiple of a.
		x, a := args[0], args[1]
		if a <= 0 {
			return 0, fmt.Errorf("align(%d, %d): alignment must be positive", x, a)
		}
		r, err := arith('+', x, a-1)
		if err != nil {
			return 0, err
		}
		return r / a * a, nil
	}
	panic("workload: unknown function " + c.fn)
}

// funcs are the functions expressions may call, with their arity.
var funcs = map[string]int{"rand": 2, "min": 2, "max": 2, "align": 2}

// exprParser parses an expression from a token slice:
//
//	expr    = term { ("+" | "-") term }
//	term    = unary { ("*" | "/" | "%") unary }
//	unary   = "-" unary | primary [ unit ]
//	primary = number | ident | ident "(" expr { "," expr } ")" | "(" expr ")"
type exprParser struct {
	toks  []token
	pos   int
	depth int // unary() calls under way: nesting of parentheses, calls and minus signs
}

func (p *exprParser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

func (p *exprParser) expect(kind byte) error {
	t, ok := p.peek()
	if !ok {
		return fmt.Errorf("expected %q at end of line", string(kind))
	}
	if t.kind != kind {
		return fmt.Errorf("expected %q, found %s", string(kind), t)
	}
	p.pos++
	return nil
}

func (p *exprParser) expr() (expr, error) {
	x, err := p.term()
	if err != nil {
		return nil, err
	}
	for {
		t, ok := p.peek()
		if !ok || (t.kind != '+' && t.kind != '-') {
			return x, nil
		}
		p.pos++
		y, err := p.term()
		if err != nil {
			return nil, err
		}
		x = binExpr{op: t.kind, x: x, y: y}
	}
}

func (p *exprParser) term() (expr, error) {
	x, err := p.unary()
	if err != nil {
		return nil, err
	}
	for {
		t, ok := p.peek()
		if !ok || (t.kind != '*' && t.kind != '/' && t.kind != '%') {
			return x, nil
		}
		p.pos++
		y, err := p.unary()
		if err != nil {
			return nil, err
		}
		x = binExpr{op: t.kind, x: x, y: y}
	}
}

func (p *exprParser) unary() (expr, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxExprDepth {
		return nil, &LimitError{What: "nested parentheses, calls and minus signs", Limit: maxExprDepth}
	}
	if t, ok := p.peek(); ok && t.kind == '-' {
		p.pos++
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return negExpr{x}, nil
	}
	return p.primary()
}

func (p *exprParser) primary() (expr, error) {
	t, ok := p.peek()
	if !ok {
		return nil, fmt.Errorf("expression missing at end of line")
	}
	p.pos++
	var x expr
	switch t.kind {
	case 'n':
		return p.number(t)
	case 'i':
		if _, isUnit := unitOf(t.text); isUnit {
			return nil, fmt.Errorf("unit %s needs a number before it", short(t.text))
		}
		if n, ok := funcs[t.text]; ok {
			c, err := p.call(t.text, n)
			if err != nil {
				return nil, err
			}
			x = c
		} else {
			x = varExpr(t.text)
		}
	case '(':
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.expect(')'); err != nil {
			return nil, err
		}
		x = e
	default:
		return nil, fmt.Errorf("unexpected %s in expression", t)
	}
	if u, ok := p.unit(); ok {
		return binExpr{op: '*', x: x, y: numExpr(u)}, nil
	}
	return x, nil
}

func (p *exprParser) call(fn string, arity int) (expr, error) {
	if err := p.expect('('); err != nil {
		return nil, fmt.Errorf("%s: %w", fn, err)
	}
	var args []expr
	for {
		a, err := p.expr()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
		t, ok := p.peek()
		if ok && t.kind == ',' {
			p.pos++
			continue
		}
		if err := p.expect(')'); err != nil {
			return nil, err
		}
		break
	}
	if len(args) != arity {
		return nil, fmt.Errorf("%s takes %d arguments, not %d", fn, arity, len(args))
	}
	return callExpr{fn: fn, args: args}, nil
}

// unit consumes a unit name following a primary, if there is one.
func (p *exprParser) unit() (int64, bool) {
	t, ok := p.peek()
	if !ok || t.kind != 'i' {
		return 0, false
	}
	u, ok := unitOf(t.text)
	if ok {
		p.pos++
	}
	return u, ok
}

// number parses a literal, which may carry a decimal fraction when a unit
// follows and the product is a whole number of bytes (1.5GiB).
func (p *exprParser) number(t token) (expr, error) {
	text := strings.ReplaceAll(t.text, "_", "")
	whole, frac, hasFrac := strings.Cut(text, ".")
	if strings.Contains(frac, ".") || whole == "" || (hasFrac && frac == "") {
		return nil, fmt.Errorf("malformed number %s", short(t.text))
	}
	mant, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("number %s out of range", short(t.text))
	}
	next, ok := p.peek()
	if ok && next.kind == 'i' && next.glue {
		if _, isUnit := unitOf(next.text); !isUnit {
			return nil, fmt.Errorf("unknown unit %s in %s", quote(next.text), short(t.text+next.text))
		}
	}
	u, hasUnit := p.unit()
	if !hasUnit {
		if hasFrac {
			return nil, fmt.Errorf("fractional number %s needs a unit", short(t.text))
		}
		return numExpr(mant), nil
	}
	v, err := arith('*', mant, u)
	if err != nil {
		return nil, fmt.Errorf("number %s out of range", short(t.text+next.text))
	}
	div := int64(1)
	for range len(frac) {
		div *= 10
		if div > 1e18/10 {
			return nil, fmt.Errorf("too many decimals in %s", short(t.text))
		}
	}
	if v%div != 0 {
		return nil, fmt.Errorf("%s is not a whole number of bytes", short(t.text+next.text))
	}
	return numExpr(v / div), nil
}
