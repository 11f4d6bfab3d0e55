package workload

import (
	"context"
	"fmt"
	"strconv"
)

// Limits bound what a workload may do, so that a short script (a huge
// repeat count, deep nesting) fails with an error instead of exhausting
// memory or running for hours. The package documentation lists them. A
// field left 0 takes its value from [DefaultLimits].
type Limits struct {
	// Ops is the most allocator operations a workload may make. A script
	// may also evaluate at most StepsPerOp·Ops steps (statements run plus
	// expression terms evaluated), so that loops making no operations end.
	Ops int
	// Live is the most buffers allocated at once.
	Live int
	// Memory is the most bytes the interpreter may hold for buffer names,
	// live buffers and phases.
	Memory int64
	// OpsHint, when set, is appended to the error for too many operations
	// or steps: how the user raises Ops ("raise it with --max-ops").
	OpsHint string
	// Context, when set, ends the check that Open runs once it is done
	// (an interrupt), with its error.
	Context context.Context
}

// DefaultLimits are generous for real workloads: a transformer training
// step makes thousands of operations.
var DefaultLimits = Limits{Ops: 1 << 24, Live: 1 << 20, Memory: 128 << 20}

// orDefault fills the fields left 0 from DefaultLimits.
func (l Limits) orDefault() Limits {
	if l.Ops <= 0 {
		l.Ops = DefaultLimits.Ops
	}
	if l.Live <= 0 {
		l.Live = DefaultLimits.Live
	}
	if l.Memory <= 0 {
		l.Memory = DefaultLimits.Memory
	}
	return l
}

// Fixed limits on the text of a script.
const (
	maxScript    = 1 << 20  // bytes in a script
	maxLine      = 64 << 10 // bytes in a line
	maxNesting   = 64       // repeat blocks inside one another
	maxExprDepth = 64       // parentheses, calls and unary minus inside one another
	StepsPerOp   = 16       // steps a script may evaluate per operation allowed
)

// A LimitError says that a workload went past one of its [Limits].
type LimitError struct {
	What  string // "operations", "live buffers", ...
	Limit int64
	Hint  string // how to raise the limit, or ""
}

func (e *LimitError) Error() string {
	if e.Hint != "" {
		return fmt.Sprintf("more than %d %s (the limit; %s)", e.Limit, e.What, e.Hint)
	}
	return fmt.Sprintf("more than %d %s (the limit)", e.Limit, e.What)
}

// quote quotes s for an error message: at most a short prefix, with
// control characters and invalid UTF-8 escaped.
func quote(s string) string {
	const max = 40
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// short shortens a buffer name for an error message; names are made of
// word characters and indexes, so they need no escaping.
func short(s string) string {
	const max = 60
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
