package main

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

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/budget"
	"github.com/gpumem/gpumem/pkg/figures"
	"github.com/gpumem/gpumem/pkg/pipeline"
)

// The memory budget. Commands that read traces take --max-memory (and
// --zstd-max-window). Before such a command runs, the budget becomes
// the Go runtime's soft memory limit, less a tenth of headroom
// (debug.SetMemoryLimit: the collector works harder as the heap nears
// it, and the trace readers hold at most half of it), and a watchdog
// samples the process's resident memory every pollMemory: past the
// budget, it cancels the command's context with errOutOfMemory, and the
// command stops as it does at an interrupt (readers at their next read,
// replays between batches of operations). gpumem then prints one error
// line and exits 2, where the runtime would have crashed with a stack
// dump once the machine ran out.

// defaultMaxMemory is --max-memory's default, or 3/4 of the memory of
// the machine (or of the container's cgroup) where that is less.
const defaultMaxMemory = 4 << 30

const pollMemory = 50 * time.Millisecond

var errOutOfMemory = errors.New("out of memory")

// registerReadFlags registers the flags that bound what reading a trace
// may cost, on a command that reads traces; applyReadFlags reads them.
func registerReadFlags(cmd *cobra.Command) {
	var maxMemory, zstdWindow budget.Size
	fl := cmd.Flags()
	fl.Var(&maxMemory, "max-memory", "the most memory gpumem may use, e.g. 8GiB; a trace that needs more is refused (default 4GiB, or 3/4 of the machine's or container's memory if less)")
	fl.Var(&zstdWindow, "zstd-max-window", "the largest zstd window a compressed trace may use, as zstd's --memory (default 128MiB)")
}

// memoryGuard is the watchdog; run makes one per invocation, and the
// root command's pre-run starts it for commands with --max-memory.
type memoryGuard struct {
	cancel   context.CancelCauseFunc
	budget   int64 // 0 until started
	oldLimit int64
	done     chan struct{}
	wg       sync.WaitGroup
}

// applyReadFlags sets up the budget and the read limits of cmd when it
// has the flags: the watchdog, the soft memory limit, the zstd window.
func (a *app) applyReadFlags(cmd *cobra.Command) {
	f := cmd.Flags().Lookup("max-memory")
	if f == nil || a.mem == nil {
		return
	}
	n := int64(*f.Value.(*budget.Size))
	if n == 0 {
		n = defaultBudget()
	}
	a.mem.start(n)
	if w := cmd.Flags().Lookup("zstd-max-window"); w != nil {
		cmd.SetContext(pipeline.WithReadLimits(cmd.Context(), pipeline.ReadLimits{MaxWindow: uint64(*w.Value.(*budget.Size))}))
	}
}

func (g *memoryGuard) start(budget int64) {
	g.budget = budget
	g.oldLimit = debug.SetMemoryLimit(budget - budget/10)
	g.done = make(chan struct{})
	if residentMemory() > budget {
		g.cancel(errOutOfMemory)
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
				if residentMemory() > budget {
					g.cancel(errOutOfMemory)
					return
				}
			}
		}
	}()
}

// stop ends the watchdog and restores the memory limit (tests run many
// commands in one process).
func (g *memoryGuard) stop() {
	if g.done == nil {
		return
	}
	close(g.done)
	g.wg.Wait()
	debug.SetMemoryLimit(g.oldLimit)
	g.done = nil
}

// memoryError is what a command stopped by the watchdog reports.
func (g *memoryError) Error() string {
	return fmt.Sprintf("out of memory: the command needed more than %s, the memory budget (--max-memory)", figures.FormatBytes(g.budget))
}

type memoryError struct{ budget int64 }

// residentMemory is the process's resident set (the Go runtime's mapped
// memory where /proc is not there), C allocations included.
func residentMemory() int64 {
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

// defaultBudget is defaultMaxMemory, or 3/4 of the memory there is where
// that is less: the machine's, or the cgroup's limit (a container's).
func defaultBudget() int64 {
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
	return min(defaultMaxMemory, have/4*3)
}
