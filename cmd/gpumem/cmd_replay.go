package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/budget"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/report"
	"github.com/gpumem/gpumem/pkg/trace"
)

// allocFlags are the allocator settings shared by replay, run and summary
// (sweep takes a grid instead, fragcheck a card to fit with --must-fit).
type allocFlags struct {
	conf         string
	deviceMemory string
	fraction     float64
	policy       string
}

func (f *allocFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.conf, "alloc-conf", "", "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: the trace's own)")
	fl.StringVar(&f.deviceMemory, "device-memory", "", "simulated card size, bytes or with a unit (e.g. 24GiB); no limit without it")
	fl.Float64Var(&f.fraction, "memory-fraction", 0, "set_per_process_memory_fraction of --device-memory")
	fl.StringVar(&f.policy, "policy", string(alloc.PolicyPyTorch), "allocation policy: "+policyNames())
}

// options turns the flags into replay options. recorded is the trace's own
// settings, used when --alloc-conf is not given.
func (f *allocFlags) options(cmd *cobra.Command, recorded *alloc.Config) (replay.Options, error) {
	var o replay.Options
	cfg := alloc.DefaultConfig()
	if recorded != nil {
		cfg = *recorded
	}
	if cmd.Flags().Changed("alloc-conf") {
		c, err := alloc.ParseConfig(f.conf)
		if err != nil {
			return o, usageError{fmt.Errorf("--alloc-conf: %w", err)}
		}
		cfg = c
	}
	p, err := alloc.ParsePolicy(f.policy)
	if err != nil {
		return o, usageError{fmt.Errorf("--policy: %w", err)}
	}
	cfg.Policy = p
	o.Config = cfg
	if f.deviceMemory != "" {
		n, err := budget.ParseSize(f.deviceMemory)
		if err != nil || n == 0 {
			return o, usageError{fmt.Errorf("--device-memory: invalid size %q", f.deviceMemory)}
		}
		o.DeviceTotal = n
		o.Device = alloc.Sim(n)
	}
	if f.fraction != 0 {
		if f.fraction < 0 || f.fraction > 1 {
			return o, usageError{fmt.Errorf("--memory-fraction: %v is not in [0, 1]", f.fraction)}
		}
		if f.deviceMemory == "" {
			return o, withHint(usageError{fmt.Errorf("--memory-fraction needs --device-memory")},
				"give the card's size, e.g. --device-memory 80GiB")
		}
		o.MemoryFraction = f.fraction
	}
	return o, nil
}

type replayOpts struct {
	alloc   allocFlags
	output  string
	device  int
	warn    float64
	alarm   float64
	check   bool
	backend string
	html    string
}

func newReplayCmd(a *app) *cobra.Command {
	o := &replayOpts{}
	cmd := &cobra.Command{
		Use:   "replay TRACE",
		Short: "Replay an allocation trace and report peak memory, fragmentation and OOMs",
		Long: `Replay a recorded allocation trace through the allocator, under its
recorded settings or any other, on a card of any size, and report what
happened. TRACE is ` + trace.FormatList() + `;
the format is recognised from the content. A snapshot whose history was cut
short by max_entries is rebuilt from its final state.

The replay stops at the first out-of-memory.`,
		Example: `  gpumem replay snapshot.pickle
  gpumem replay snapshot.pickle --alloc-conf expandable_segments:True
  gpumem replay snapshot.pickle --device-memory 24GiB --output json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReplay(cmd, a, o, args[0])
		},
	}
	o.alloc.register(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&o.output, "output", "o", "table", "output format: table, json, markdown or torch-summary")
	fl.IntVar(&o.device, "device", 0, "which device's trace to replay")
	fl.Float64Var(&o.warn, "warn", 0.20, "fragmentation ratio shown as a warning")
	fl.Float64Var(&o.alarm, "alarm", 0.30, "fragmentation ratio shown as an alarm")
	fl.BoolVar(&o.check, "check", false, "check the allocator's invariants after every operation (slow)")
	fl.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`")
	fl.StringVar(&o.backend, "backend", "sim", "where memory comes from: sim (simulated card) or cuda (the first GPU)")
	return cmd
}

func checkOutput(s string, allowed ...string) error {
	for _, a := range allowed {
		if s == a {
			return nil
		}
	}
	return usageError{fmt.Errorf("--output: unknown format %q (want one of %v)", s, allowed)}
}

func runReplay(cmd *cobra.Command, a *app, o *replayOpts, path string) error {
	if err := checkOutput(o.output, "table", "json", "markdown", "torch-summary"); err != nil {
		return err
	}
	snap, err := openTrace(a, path)
	if err != nil {
		return inputError{err}
	}
	if o.device < 0 || o.device >= len(snap.Traces) {
		if len(snap.Traces) == 0 {
			return inputError{fmt.Errorf("%s: the snapshot holds no allocation trace (record it with torch.cuda.memory._record_memory_history)", path)}
		}
		return usageError{fmt.Errorf("--device %d: %s has traces for devices 0 to %d", o.device, path, len(snap.Traces)-1)}
	}
	recorded := recordedConfig(snap.Settings)
	ro, err := o.alloc.options(cmd, recorded)
	if err != nil {
		return err
	}
	if err := applyBackend(cmd, o.backend, &ro); err != nil {
		return err
	}
	ro.Points = 2000
	ro.Check = o.check
	plan := replay.FromSnapshot(snap, o.device)
	if plan.Truncated {
		fmt.Fprintf(a.stderr, "gpumem: note: %s starts after the program had allocated (a max_entries ring buffer): "+
			"%d segments and %d live blocks were rebuilt from its final state; peaks cover the kept events only\n",
			path, len(plan.Seeds), plan.Seeded)
	}
	snap.Traces = nil // the plan holds what the replay needs
	res, err := replay.Run(plan, ro)
	if err != nil {
		return backendErr(fmt.Errorf("replaying %s: %w", path, err))
	}
	rep := buildReport(path, ro, res, plan, snap)
	rep.Device = o.device
	if err := writeReport(a, a.stdout, o.output, rep, report.Options{Color: a.color, Warn: o.warn, Alarm: o.alarm}); err != nil || o.html == "" {
		return err
	}
	return writeHTML(a, o.html, rep, plan, snap, ro, res)
}

// recordedConfig reads the settings a snapshot was recorded with.
func recordedConfig(s trace.Settings) *alloc.Config {
	if !s.Present {
		return nil
	}
	c, err := alloc.ParseConfig(s.AllocConf)
	if err != nil {
		c = alloc.DefaultConfig()
	}
	// the structured fields are what was in force, whatever the string said
	c.MaxSplitSize = 0
	if s.MaxSplitSize > 0 {
		c.MaxSplitSize = uint64(s.MaxSplitSize)
	}
	c.GCThreshold = s.GCThreshold
	c.ExpandableSegments = s.ExpandableSegments
	for i, d := range s.RoundupPower2Divisions {
		c.RoundupPower2Divisions[i] = uint32(max(d, 0))
	}
	return &c
}

func writeReport(a *app, w io.Writer, format string, r *report.Replay, ro report.Options) error {
	switch format {
	case "json":
		return report.JSON(w, r)
	case "markdown":
		return report.Markdown(w, r, ro)
	case "torch-summary":
		return report.TorchSummary(w, r.Stats, r.Device, false)
	}
	if err := report.Table(w, r, ro); err != nil {
		return err
	}
	if len(r.Timeline) > 1 {
		fmt.Fprintln(w)
		return report.Timeline(w, r, ro)
	}
	return nil
}

func policyNames() string {
	var names []string
	for _, p := range alloc.Policies() {
		names = append(names, string(p))
	}
	return strings.Join(names, ", ")
}
