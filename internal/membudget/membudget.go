// Package membudget bounds what a command may use of the machine's
// memory. A Guard turns a budget into the Go runtime's soft memory limit,
// less a tenth of headroom (debug.SetMemoryLimit: the collector works
// harder as the heap nears it), and a watchdog that samples the process's
// resident memory every pollMemory; past the budget it cancels the
// command's context with ErrOutOfMemory, so that the command stops as it
// does at an interrupt and reports one error line, where the runtime
// would have crashed with a stack dump once the machine ran out.
//
// Terms: the budget is the most resident memory, C allocations included;
// Default is the budget when none is given.
package membudget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumem/gpumem/internal/units"
)

// DefaultMax is the default budget, or 3/4 of the memory of
// the machine (or of the container's cgroup) where that is less.
const DefaultMax = 4 << 30

const pollMemory = 50 * time.Millisecond

// ErrOutOfMemory is the cause the watchdog cancels with.
var ErrOutOfMemory = errors.New("out of memory")

// Guard is the watchdog of one command: Cancel cancels its context.
type Guard struct {
	Cancel   context.CancelCauseFunc
	budget   int64 // 0 until started
	oldLimit int64
	done     chan struct{}
	wg       sync.WaitGroup
}

// Start sets the runtime's soft memory limit from budget and starts the
// watchdog.
func (g *Guard) Start(budget int64) {
	g.budget = budget
	g.oldLimit = debug.SetMemoryLimit(budget - budget/10)
	g.done = make(chan struct{})
	if Resident() > budget {
		g.Cancel(ErrOutOfMemory)
		return
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(pollMemory)
		defer t.Stop()
		for {
			select {
			case <-g.done:
				return
			case <-t.C:
				if Resident() > budget {
					g.Cancel(ErrOutOfMemory)
					return
				}
			}
		}
	}()
}

// Stop ends the watchdog and restores the memory limit (tests run many
// commands in one process).
func (g *Guard) Stop() {
	if g.done == nil {
		return
	}
	close(g.done)
	g.wg.Wait()
	debug.SetMemoryLimit(g.oldLimit)
	g.done = nil
}

// Budget is the budget Start was given; 0 before.
func (g *Guard) Budget() int64 { return g.budget }

// Error is what a command the watchdog stopped reports.
type Error struct{ Budget int64 }

func (e *Error) Error() string {
	return fmt.Sprintf("out of memory: the command needed more than %s, the memory budget (--max-memory)", units.FormatBytes(e.Budget))
}

// Resident is the process's resident set (the Go runtime's mapped
// memory where /proc is not there), C allocations included.
func Resident() int64 {
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return pages * int64(os.Getpagesize())
			}
		}
	}
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}

// Default is DefaultMax, or 3/4 of the memory there is where
// that is less: the machine's, or the cgroup's limit (a container's).
func Default() int64 {
	have := int64(math.MaxInt64)
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil && si.Totalram > 0 {
		have = int64(si.Totalram) * int64(si.Unit)
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(p); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
				have = min(have, n)
			}
		}
	}
	return min(DefaultMax, have/4*3)
}
