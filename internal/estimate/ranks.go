package estimate

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// MaxProcs bounds --nproc: every rank is a Python process with torch.
const MaxProcs = 64

// torchrunVars are the variables torchrun sets for each rank (PyTorch
// 2.11, one node); a rank's environment has gpumem's values, never the
// caller's.
var torchrunVars = []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
	"GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
	"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
	"TORCHELASTIC_USE_AGENT_STORE"}

// RankEnv is env with torchrun's variables for rank r of n on one node.
// OMP_NUM_THREADS is 1 unless set, as torchrun makes it for several ranks.
func RankEnv(env []string, r, n int) []string {
	out := make([]string, 0, len(env)+len(torchrunVars))
	omp := false
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, v := range torchrunVars {
			drop = drop || k == v
		}
		omp = omp || k == "OMP_NUM_THREADS"
		if !drop {
			out = append(out, kv)
		}
	}
	rs, ns := strconv.Itoa(r), strconv.Itoa(n)
	out = append(out, "RANK="+rs, "LOCAL_RANK="+rs, "WORLD_SIZE="+ns, "LOCAL_WORLD_SIZE="+ns,
		"GROUP_RANK=0", "GROUP_WORLD_SIZE=1", "ROLE_RANK="+rs, "ROLE_WORLD_SIZE="+ns, "ROLE_NAME=default",
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500", "TORCHELASTIC_RESTART_COUNT=0",
		"TORCHELASTIC_MAX_RESTARTS=0", "TORCHELASTIC_RUN_ID=gpumem-estimate", "TORCHELASTIC_USE_AGENT_STORE=False")
	if !omp && n > 1 {
		out = append(out, "OMP_NUM_THREADS=1")
	}
	return out
}

// RankTracePath is the trace file of rank r when path names the run's:
// estimate.trace -> estimate.rank0.trace.
func RankTracePath(path string, r int) string {
	ext := filepath.Ext(path)
	if ext == "" || strings.ContainsRune(ext, filepath.Separator) {
		return path + ".rank" + strconv.Itoa(r)
	}
	return strings.TrimSuffix(path, ext) + ".rank" + strconv.Itoa(r) + ext
}

// RunRanks runs argv as o.NProc ranks at once, as torchrun would start
// them on one node, each with a virtual card of its own (a Session) and
// its trace written to traces[r] (nil: none). The ranks do not talk: the
// emulator gives every process group torch's fake backend.
func RunRanks(o Options, argv, env []string, traces []io.Writer, run Runner) ([]*Result, error) {
	n := o.NProc
	if n < 1 || n > MaxProcs {
		return nil, fmt.Errorf("--nproc %d: want 1 to %d", n, MaxProcs)
	}
	res := make([]*Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		var tw io.Writer
		if r < len(traces) && traces[r] != nil {
			tw = traces[r]
		}
		wg.Add(1)
		go func(r int, tw io.Writer) {
			defer wg.Done()
			res[r], errs[r] = Run(o, argv, RankEnv(env, r, n), tw, run)
		}(r, tw)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return res, nil
}

// runAll runs argv once (o.NProc 0) or as o.NProc ranks.
func runAll(o Options, argv, env []string, traces []io.Writer, run Runner) ([]*Result, error) {
	if o.NProc == 0 {
		var tw io.Writer
		if len(traces) > 0 {
			tw = traces[0]
		}
		r, err := Run(o, argv, env, tw, run)
		if err != nil {
			return nil, err
		}
		return []*Result{r}, nil
	}
	return RunRanks(o, argv, env, traces, run)
}

// notStarted is the error of a rank whose command did not start (not an
// exit status of the script), or nil.
func notStarted(rs []*Result) error {
	var ee *exec.ExitError
	for _, r := range rs {
		if r.Err != nil && !errors.As(r.Err, &ee) {
			return r.Err
		}
	}
	return nil
}

// Worst is the rank that needs the most: one that ran out of memory
// before one that did not (its peak is where it stopped), then the
// highest peak reserved, then allocated, then the lowest rank.
func Worst(rs []*Result) int {
	w := 0
	key := func(x *Result) [3]int64 {
		oom := int64(0)
		if len(x.OOMs) > 0 {
			oom = 1
		}
		return [3]int64{oom, x.Stats.ReservedBytes[0].Peak, x.Stats.AllocatedBytes[0].Peak}
	}
	for r, x := range rs {
		a, b := key(x), key(rs[w])
		if a[0] > b[0] || a[0] == b[0] && (a[1] > b[1] || a[1] == b[1] && a[2] > b[2]) {
			w = r
		}
	}
	return w
}

// firstFailure is the first rank's error, by rank (nil: all succeeded):
// the exit status of the whole, as torchrun reports a failed rank.
func firstFailure(rs []*Result) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// RankRow is one rank of a several-rank estimate.
type RankRow struct {
	Rank          int    `json:"rank"`
	Trace         string `json:"trace"`
	PeakAllocated int64  `json:"peak_allocated_bytes"`
	PeakReserved  int64  `json:"peak_reserved_bytes"`
	OOMs          int    `json:"ooms"`
	OK            bool   `json:"script_succeeded"`
	Failure       string `json:"failure"`
}

func rankRow(r int, trace string, res *Result) RankRow {
	t := NewTrial("", res)
	return RankRow{Rank: r, Trace: trace, PeakAllocated: t.PeakAllocated, PeakReserved: t.PeakReserved,
		OOMs: len(res.OOMs), OK: res.Err == nil, Failure: t.Failure}
}
