package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/probe"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/report"
)

// demoWorkload is what summary drives the allocator with by default: the
// classic fragmentation example.
const demoWorkload = "frag-demo"

type summaryOpts struct {
	alloc      allocFlags
	traceFile  string
	workload   string
	backend    string
	output     string
	requireGPU bool
	watch      time.Duration
}

func newSummaryCmd(a *app) *cobra.Command {
	o := &summaryOpts{}
	cmd := &cobra.Command{
		Use:   "summary",
		Short: "Show the GPUs and the allocator's memory summary after a workload",
		Long: `Show every GPU (memory, BAR1, utilisation, the processes holding memory),
then drive the allocator through a workload and print its memory summary with
fragmentation figures. By default the workload is a built-in fragmenting demo
(` + demoWorkload + `) on the GPU when one is usable, else on the simulated device.

--watch refreshes the device table until interrupted.`,
		Example: `  gpumem summary
  gpumem summary --trace snapshot.pickle
  gpumem summary --workload transformer --backend sim
  gpumem summary --watch=2s`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSummary(cmd, a, o)
		},
	}
	o.alloc.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&o.traceFile, "trace", "", "drive the allocator with this trace (any format replay reads)")
	fl.StringVar(&o.workload, "workload", demoWorkload, "drive the allocator with this workload (name or script file)")
	fl.StringVar(&o.backend, "backend", "", "sim or cuda (default: cuda when a GPU is usable, else sim)")
	fl.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	fl.BoolVar(&o.requireGPU, "require-gpu", false, "exit with code 3 when no GPU is usable")
	fl.DurationVar(&o.watch, "watch", 0, "refresh the device table every interval until interrupted")
	fl.Lookup("watch").NoOptDefVal = "1s"
	return cmd
}

func runSummary(cmd *cobra.Command, a *app, o *summaryOpts) error {
	if err := checkOutput(o.output, "table", "json"); err != nil {
		return err
	}
	lib := a.nvml
	if lib == nil {
		lib = probe.Default()
	}
	sys, err := probe.Probe(lib)
	gpu := err == nil && len(sys.GPUs) > 0
	switch {
	case errors.Is(err, probe.ErrNoDriver):
		if o.requireGPU {
			return &exitError{code: exitNoGPU, msg: "no nvidia driver found (--require-gpu)"}
		}
		fmt.Fprintln(a.stderr, "gpumem: no nvidia driver found: showing the simulated device")
	case err != nil:
		if o.requireGPU {
			return &exitError{code: exitNoGPU, msg: err.Error()}
		}
		fmt.Fprintf(a.stderr, "gpumem: warning: probing gpus: %v\n", err)
	case !gpu && o.requireGPU:
		return &exitError{code: exitNoGPU, msg: "no gpu found (--require-gpu)"}
	}
	if o.watch > 0 {
		return watchDevices(cmd, a, lib, o.watch)
	}
	backend := o.backend
	if backend == "" {
		backend = "sim"
		if gpu && !cmd.Flags().Changed("device-memory") {
			backend = "cuda"
		}
	}
	rep, err := summaryReplay(cmd, a, o, backend)
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeSummaryJSON(a.stdout, sys, rep)
	}
	if sys != nil {
		if err := probe.WriteTable(a.stdout, sys, a.color); err != nil {
			return err
		}
		fmt.Fprintln(a.stdout)
	}
	fmt.Fprintf(a.stdout, "Allocator (%s backend) after %s\n\n", backend, rep.Source)
	return report.Table(a.stdout, rep, report.Options{Color: a.color})
}

// summaryReplay drives the allocator through the trace or workload.
func summaryReplay(cmd *cobra.Command, a *app, o *summaryOpts, backend string) (*report.Replay, error) {
	ro, err := o.alloc.options(cmd, nil)
	if err != nil {
		return nil, err
	}
	if err := applyBackend(cmd, backend, &ro); err != nil {
		return nil, err
	}
	if o.traceFile != "" {
		snap, err := openTrace(a, o.traceFile)
		if err != nil {
			return nil, inputError{err}
		}
		if len(snap.Traces) == 0 {
			return nil, inputError{fmt.Errorf("%s: the snapshot holds no allocation trace", o.traceFile)}
		}
		if !cmd.Flags().Changed("alloc-conf") {
			if c := recordedConfig(snap.Settings); c != nil {
				c.Policy = ro.Config.Policy
				ro.Config = *c
			}
		}
		plan := replay.FromSnapshot(snap, 0)
		res, err := replay.Run(plan, ro)
		if err != nil {
			return nil, backendErr(fmt.Errorf("replaying %s: %w", o.traceFile, err))
		}
		return buildReport(o.traceFile, ro, res, plan, snap), nil
	}
	w, err := loadWorkload(o.workload, nil)
	if err != nil {
		return nil, err
	}
	res, err := replay.RunOps(w.Ops, nil, ro)
	if err != nil {
		return nil, backendErr(fmt.Errorf("running %s: %w", w.Name, err))
	}
	return buildReport(w.Name, ro, res, nil, nil), nil
}

func writeSummaryJSON(w io.Writer, sys *probe.System, rep *report.Replay) error {
	if sys == nil {
		sys = &probe.System{GPUs: []probe.GPU{}}
	}
	var devices, allocator json.RawMessage
	var buf jsonBuffer
	if err := probe.WriteJSON(&buf, sys); err != nil {
		return err
	}
	devices = buf.take()
	if err := report.JSON(&buf, rep); err != nil {
		return err
	}
	allocator = buf.take()
	out, err := json.MarshalIndent(map[string]json.RawMessage{"devices": devices, "allocator": allocator}, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

type jsonBuffer struct{ b []byte }

func (j *jsonBuffer) Write(p []byte) (int, error) { j.b = append(j.b, p...); return len(p), nil }
func (j *jsonBuffer) take() json.RawMessage {
	b := j.b
	j.b = nil
	return b
}

// watchDevices redraws the device table every interval, like nvtop, until
// the command's context is cancelled (Ctrl-C).
func watchDevices(cmd *cobra.Command, a *app, lib nvml.Interface, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		sys, err := probe.Probe(lib)
		if err != nil {
			return err
		}
		if isTerminal(a.stdout) {
			fmt.Fprint(a.stdout, "\033[H\033[2J")
		}
		if err := probe.WriteTable(a.stdout, sys, a.color); err != nil {
			return err
		}
		select {
		case <-cmd.Context().Done():
			return nil
		case <-tick.C:
		}
	}
}
