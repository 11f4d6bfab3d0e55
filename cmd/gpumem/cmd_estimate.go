package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/estimate"
	"github.com/gpumem/gpumem/pkg/fileout"
	"github.com/gpumem/gpumem/pkg/output"
)

type estimateOpts struct {
	invocation
	gpu, deviceMemory, conf string
	fraction                float64
	file                    string
	output                  string
	vary                    string
	findMax                 string
}

func newEstimateCmd(a *app) *cobra.Command {
	o := &estimateOpts{}
	cmd := &cobra.Command{
		Use:                   "estimate [flags] -- python3 SCRIPT [ARGS...]",
		DisableFlagsInUseLine: true,
		Short:                 "Run a PyTorch script on a virtual GPU and report the memory it would take",
		Long: `Run an unmodified PyTorch script with CUDA emulated: tensors on cuda are
fake (shapes and dtypes, no data, no compute), and every allocation and free
of their storage goes through gpumem's replica of PyTorch's caching
allocator on a virtual card. No GPU is used. torch.cuda's memory API
answers as the card would, and a full card raises torch.OutOfMemoryError at
the allocation that fails. At exit gpumem prints the replay report of the
run (peaks, fragmentation, the out-of-memory diagnosis) and what the memory
held at its peak (parameters, gradients, optimizer state, activations by
module, ...), and writes the run's trace (-f), which replay and sweep read.

The script's own output goes to stderr. .item() and printing a CUDA tensor
give a stand-in value (0.0, 1, False), counted in the report; an operation
whose result shape depends on values (nonzero, masking) stops the script
with an error naming its line. CUDA graphs, torch.compile and custom CUDA
operations without a meta kernel are refused. See docs/estimate.md.`,
		Example: `  gpumem estimate -- python3 train.py --batch-size 32
  gpumem estimate --gpu H200 --alloc-conf expandable_segments:True -- python3 train.py
  gpumem estimate --device-memory 24GiB -o json -- python3 train.py
  gpumem estimate --vary BS=8,16,32 -- python3 train.py --batch-size {BS}
  gpumem estimate --find-max BS=1..512 -- python3 train.py --batch-size {BS}`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runEstimate(a, o, args)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // the script's own flags are not ours
	fl.StringVar(&o.gpu, "gpu", "H200", "the card to emulate: "+estimate.CardNames())
	fl.StringVar(&o.deviceMemory, "device-memory", "", "the card's memory instead, bytes or with a unit (e.g. 24GiB)")
	fl.StringVar(&o.conf, "alloc-conf", "", "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: $PYTORCH_CUDA_ALLOC_CONF)")
	fl.Float64Var(&o.fraction, "memory-fraction", 0, "set_per_process_memory_fraction before the script starts")
	fl.StringVarP(&o.file, "file", "f", "estimate.trace", "write the run's allocation trace to `FILE` (a gpumem text trace)")
	outputFlag(cmd, &o.output, output.EstimateFormats)
	fl.StringVar(&o.vary, "vary", "", "run once per value of `NAME=v1,v2,...` with {NAME} in the command replaced, and tabulate")
	fl.StringVar(&o.findMax, "find-max", "", "find the largest integer {NAME} in `NAME=LO..HI` that fits on the card (bisection)")
	return cmd
}

func runEstimate(a *app, o *estimateOpts, argv []string) error {
	conf := os.Getenv("PYTORCH_CUDA_ALLOC_CONF")
	if o.changed("alloc-conf") {
		conf = o.conf
	}
	set, err := estimate.NewSettings(o.gpu, o.deviceMemory, conf, o.fraction)
	if err != nil {
		return usageError{err}
	}
	if o.vary != "" || o.findMax != "" {
		return runEstimateVary(a, o, set, argv)
	}
	trace, err := fileout.Create(o.file)
	if err != nil {
		return err
	}
	defer trace.Abort()
	res, err := estimate.Run(set.Options, argv, os.Environ(), trace, func(argv, env []string, files []*os.File) error {
		return runEstimated(a, argv, env, files)
	})
	if err != nil {
		return err
	}
	var ee *exec.ExitError
	if res.Err != nil && !errors.As(res.Err, &ee) {
		return res.Err // the command did not start
	}
	if err := trace.Commit(); err != nil {
		return err
	}
	rep, err := estimate.Build(o.ctx, set, argv, o.file, res)
	if err != nil {
		return err
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(a.stderr, "gpumem: %s\n", n)
	}
	fmt.Fprintf(a.stderr, "gpumem: wrote %s (gpumem replay %s)\n", o.file, o.file)
	if err := output.EstimateFormats.Render(a.stdout, o.output, rep, output.Options{Color: a.color}); err != nil {
		return err
	}
	return scriptExit(res.Err)
}

// scriptExit passes on the script's exit status.
func scriptExit(err error) error {
	var ee *exec.ExitError
	if err == nil {
		return nil
	}
	if !errors.As(err, &ee) {
		return err
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return &exitError{code: code}
}

// runEstimated runs the estimated script with its stdout on gpumem's
// stderr (stdout is the report), the emulator's pipes as fds 3 and 4.
func runEstimated(a *app, argv, env []string, files []*os.File) error {
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = env
	c.Stdin, c.Stdout, c.Stderr = a.stdin, a.stderr, a.stderr
	c.ExtraFiles = files
	if err := c.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", argv[0], err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	for {
		select {
		case s := <-term:
			c.Process.Signal(s)
		case err := <-done:
			return err
		}
	}
}

func runEstimateVary(a *app, o *estimateOpts, set estimate.Settings, argv []string) error {
	if o.vary != "" && o.findMax != "" {
		return usageError{errors.New("--vary and --find-max: give one")}
	}
	if o.changed("file") {
		return usageError{errors.New("-f/--file: --vary and --find-max write no trace; run the value you want alone")}
	}
	name := ""
	var values []string
	var rng estimate.Range
	if o.vary != "" {
		v, err := estimate.ParseVary(o.vary)
		if err != nil {
			return usageError{err}
		}
		name, values = v.Name, v.Values
	} else {
		r, err := estimate.ParseRange(o.findMax)
		if err != nil {
			return usageError{err}
		}
		name, rng = r.Name, r
	}
	if _, found := estimate.Substitute(argv, name, ""); !found {
		return usageError{fmt.Errorf("the command has no {%s} to vary", name)}
	}
	try := func(value string) (estimate.Trial, error) {
		cmdline, _ := estimate.Substitute(argv, name, value)
		fmt.Fprintf(a.stderr, "gpumem: estimating %s=%s\n", name, value)
		res, err := estimate.Run(set.Options, cmdline, os.Environ(), nil, func(argv, env []string, files []*os.File) error {
			return runEstimated(a, argv, env, files)
		})
		if err != nil {
			return estimate.Trial{}, err
		}
		var ee *exec.ExitError
		if res.Err != nil && !errors.As(res.Err, &ee) {
			return estimate.Trial{}, res.Err // the command did not start
		}
		return estimate.NewTrial(value, res), nil
	}
	doc := &output.VaryResult{Name: name, Card: set.Card, AllocConf: set.AllocConf, Command: argv}
	if o.vary != "" {
		for _, v := range values {
			t, err := try(v)
			if err != nil {
				return err
			}
			doc.Trials = append(doc.Trials, t)
		}
	} else {
		best, ok, trials, err := estimate.FindMax(rng, func(v int64) (estimate.Trial, error) { return try(fmt.Sprint(v)) })
		if err != nil {
			return err
		}
		doc.FindMax, doc.Trials = true, trials
		if ok {
			doc.Max = &best
		}
	}
	return output.VaryFormats.Render(a.stdout, o.output, doc, output.Options{Color: a.color})
}
