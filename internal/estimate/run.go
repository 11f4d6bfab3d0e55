package estimate

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// EmulatorPy is the CUDA emulator the estimated process imports.
//
//go:embed gpumem_estimate.py
var EmulatorPy []byte

// emulatorTorchPy is the emulator's changes to torch itself.
//
//go:embed gpumem_estimate_torch.py
var emulatorTorchPy []byte

// emulatorDistPy is the emulator's torch.distributed: several ranks.
//
//go:embed gpumem_estimate_dist.py
var emulatorDistPy []byte

// emulatorKernelsPy is the scratch CUDA kernels allocate inside themselves.
//
//go:embed gpumem_estimate_kernels.py
var emulatorKernelsPy []byte

//go:embed estimate_site.py
var sitePy []byte

// scratchTables are the library scratch recorded on real cards
// (scripts/estimate/cudnn_probe.py), by Card.Scratch.
//
//go:embed scratch_h200.json
var scratchH200 []byte

var scratchTables = map[string][]byte{"h200": scratchH200}

// Card is the virtual GPU: what torch.cuda reports of it.
type Card struct {
	Name  string
	Total uint64 // bytes: total_memory and mem_get_info's total
	// Usable is what the caching allocator can take: Total less the CUDA
	// context (mem_get_info's free before the first allocation); 0: all
	// of Total.
	Usable     uint64
	Capability string // "9.0"
	Multiprocs int
	// Measured says Total and Usable were read off a real card; else
	// Total is NVIDIA's nominal capacity and Usable derived from it.
	Measured bool
	// Scratch names the table of library scratch (cuDNN's convolution
	// workspaces) recorded on this card; "": none.
	Scratch string
}

// Capacity is the bytes the allocator can take.
func (c Card) Capacity() uint64 {
	if c.Usable > 0 && c.Usable < c.Total {
		return c.Usable
	}
	return c.Total
}

// Options say what to estimate on.
type Options struct {
	Card      Card
	AllocConf string // PYTORCH_CUDA_ALLOC_CONF in force
	Config    alloc.Config
	Fraction  float64 // a set_per_process_memory_fraction from the command line; 0: none
	Check     bool    // check the replica's invariants after every op (tests)
	// NProc is --nproc: 0 runs the command once; N runs it as N
	// torchrun-style ranks, each with a virtual card of its own.
	NProc int
}

// Runner runs argv with env to its end, with files as its file
// descriptors 3, 4, ... and returns what exec.Cmd.Wait would (nil, an
// *exec.ExitError, or why it did not start).
type Runner func(argv, env []string, files []*os.File) error

// Result is what an estimate found.
type Result struct {
	// Err is what the runner returned: nil, an *exec.ExitError (the
	// script failed, which includes an out-of-memory it did not catch)
	// or why it did not start.
	Err error
	// Info is what the emulator reported at exit; nil when it did not
	// get that far (the process was killed, or never imported torch).
	Info *Info
	// OOMs are the out-of-memory errors the virtual card raised.
	OOMs []OOM
	// Stats are the replica's statistics at the end.
	Stats alloc.Stats
	// Ops counts the allocator requests (allocations, frees, empty_cache).
	Ops int
	// Fraction is the memory fraction in force at the end (the script may
	// have set one); 0: none.
	Fraction float64
}

// Info is the emulator's own account, written at exit.
type Info struct {
	// Composition is what the live CUDA tensors held when allocated memory
	// peaked, by category (internal/categories' names: parameter,
	// gradient, ..., unknown), each tensor's bytes rounded up to 512.
	Composition map[string]int64 `json:"composition"`
	// TopActivations are the modules whose activations held most then.
	TopActivations []ModuleBytes `json:"top_activation_modules"`
	// StandIns count the values a fake tensor could not give (.item(),
	// printing) by kind and script line.
	StandIns []StandIn `json:"stand_ins"`
	// NotModelled count the library calls whose scratch no rule gives
	// (a convolution of a shape the card's table does not hold), by what
	// and script line: the estimate is low by their scratch.
	NotModelled []StandIn `json:"not_modelled"`
	// OOMs are the out-of-memory errors raised, with where.
	OOMs []OOMSite `json:"ooms"`
	// Error is the exception that ended the script, if any.
	Error   *ScriptError `json:"error"`
	Seconds float64      `json:"seconds"`
}

// ModuleBytes is a module and the activation bytes it held.
type ModuleBytes struct {
	Module string `json:"module"`
	Bytes  int64  `json:"bytes"`
}

// StandIn counts the stand-in values handed out at one script line.
type StandIn struct {
	Kind  string `json:"kind"`
	Site  string `json:"site"`
	Count int    `json:"count"`
}

// OOMSite is where a torch.OutOfMemoryError was raised.
type OOMSite struct {
	Op    int      `json:"op"`
	Size  uint64   `json:"size"`
	Site  string   `json:"site"`
	Stack []string `json:"stack"`
}

// ScriptError is an uncaught exception.
type ScriptError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Site    string `json:"site"`
}

// Run runs argv (a Python command) with CUDA emulated on a virtual card,
// writing the trace of its allocations to trace (a gpumem text trace).
// env is the environment to start from.
func Run(o Options, argv, env []string, trace io.Writer, run Runner) (*Result, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command to estimate")
	}
	dir, err := os.MkdirTemp("", "gpumem-estimate-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	files := map[string][]byte{"gpumem_estimate.py": EmulatorPy, "gpumem_estimate_torch.py": emulatorTorchPy,
		"gpumem_estimate_dist.py": emulatorDistPy, "gpumem_estimate_kernels.py": emulatorKernelsPy,
		"sitecustomize.py": sitePy}
	if t := scratchTables[o.Card.Scratch]; t != nil {
		files["scratch.json"] = t
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	info := filepath.Join(dir, "info.json")

	ao := alloc.Options{Config: o.Config, Device: alloc.SimEmulated(o.Card.Capacity()), DeviceTotal: o.Card.Total,
		MemoryFraction: o.Fraction, Check: o.Check}
	sess, err := NewSession(ao, o.AllocConf, trace)
	if err != nil {
		return nil, err
	}
	defer sess.Close()

	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	served := make(chan error, 1)
	go func() {
		err := sess.Serve(reqR, repW)
		repW.Close() // a waiting emulator sees the end, not a hang
		served <- err
	}()
	runErr := run(argv, childEnv(o, env, dir, info), []*os.File{repR, reqW})
	reqW.Close()
	repR.Close()
	var serveErr error
	select {
	case serveErr = <-served:
	case <-time.After(5 * time.Second):
		// a child of the script still holds the pipe open
		reqR.Close()
		serveErr = <-served
	}
	reqR.Close()
	if serveErr != nil && !errors.Is(serveErr, os.ErrClosed) {
		return nil, serveErr
	}
	if err := sess.Finish(); err != nil {
		return nil, err
	}
	res := &Result{Err: runErr, OOMs: sess.OOMs, Stats: sess.Allocator().Stats(), Ops: sess.ops, Fraction: sess.opts.MemoryFraction}
	if b, err := os.ReadFile(info); err == nil {
		var in Info
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, fmt.Errorf("the emulator's report: %w", err)
		}
		if err := checkCategories(in.Composition); err != nil {
			return nil, err
		}
		res.Info = &in
	}
	return res, nil
}

// checkCategories checks that the emulator labels with internal/categories'
// names, the one vocabulary of what memory holds.
func checkCategories(comp map[string]int64) error {
	for k := range comp {
		if c, ok := categories.Parse(k); !ok || c.String() != k {
			return fmt.Errorf("the emulator's report: %q is no category", k)
		}
	}
	return nil
}

// childEnv is env with the emulator on PYTHONPATH, its settings, and no
// real GPU visible: an estimate never touches one.
func childEnv(o Options, env []string, dir, info string) []string {
	path := dir
	var out []string
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "PYTHONPATH="):
			if old := strings.TrimPrefix(kv, "PYTHONPATH="); old != "" {
				path += string(os.PathListSeparator) + old
			}
		case strings.HasPrefix(kv, "GPUMEM_ESTIMATE_"), strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES="),
			strings.HasPrefix(kv, "PYTORCH_CUDA_ALLOC_CONF="):
		default:
			out = append(out, kv)
		}
	}
	out = append(out, "PYTHONPATH="+path, "CUDA_VISIBLE_DEVICES=",
		"GPUMEM_ESTIMATE_FDS=3,4",
		"GPUMEM_ESTIMATE_INFO="+info,
		"GPUMEM_ESTIMATE_NAME="+o.Card.Name,
		"GPUMEM_ESTIMATE_TOTAL="+strconv.FormatUint(o.Card.Total, 10),
		"GPUMEM_ESTIMATE_CC="+o.Card.Capability,
		"GPUMEM_ESTIMATE_SMS="+strconv.Itoa(o.Card.Multiprocs),
		"GPUMEM_ESTIMATE_FRACTION="+strconv.FormatFloat(max(o.Fraction, 0), 'g', -1, 64))
	if scratchTables[o.Card.Scratch] != nil {
		out = append(out, "GPUMEM_ESTIMATE_SCRATCH="+filepath.Join(dir, "scratch.json"))
	}
	if o.AllocConf != "" {
		out = append(out, "PYTORCH_CUDA_ALLOC_CONF="+o.AllocConf)
	}
	return out
}
