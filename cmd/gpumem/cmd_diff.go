package main

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/fileout"
	"github.com/gpumem/gpumem/internal/output"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

type diffOpts struct {
	invocation
	alloc       allocFlags
	confB       string // --alloc-conf-b: B's settings
	output      string
	device      int
	depth       int
	failIfGrows string
	html        string // --html: the page of both timelines
}

func newDiffCmd(a *app) *cobra.Command {
	o := &diffOpts{}
	cmd := &cobra.Command{
		Use:     "diff A [B]",
		Short:   "Compare two runs: peaks, fragmentation, OOMs and the allocation sites that changed",
		Long:    helpText("diff"),
		Example: helpText("diff.examples"),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 2 {
				return withHint(usageError{fmt.Errorf("diff compares two runs, not %d", len(args))},
					"quote a glob to give a set of ranks: gpumem diff 'a/run.rank*.pickle' 'b/run.rank*.pickle'")
			}
			return usageArgs(cobra.MinimumNArgs(1))(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.invocation = invoked(cmd)
			return runDiff(a, o, args)
		},
	}
	o.alloc.register(cmd)
	outputFlag(cmd, &o.output, output.DiffFormats)
	registerReadFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&o.confB, "alloc-conf-b", "", "B's allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: as A)")
	fl.IntVar(&o.device, "device", 0, "which device's trace of each snapshot (default: every device with events)")
	fl.IntVar(&o.depth, "depth", pipeline.DefaultSiteDepth, "user stack frames that make an allocation site")
	fl.StringVar(&o.failIfGrows, "fail-if-grows", "", "exit 1 when B's peak reserved exceeds A's by more than `PERCENT` (e.g. 5%)")
	fl.StringVar(&o.html, "html", "", "also write a self-contained HTML page of both runs' timelines, aligned on their annotations, to `FILE`")
	return cmd
}

func runDiff(a *app, o *diffOpts, args []string) error {
	confB := o.changed != nil && o.changed("alloc-conf-b")
	if len(args) == 1 && !confB {
		return withHint(usageError{errors.New("diff needs two runs: A and B")},
			"or compare one trace under two settings: gpumem diff A --alloc-conf-b expandable_segments:True")
	}
	if len(args) == 1 {
		args = append(args, args[0])
	}
	if o.depth <= 0 {
		return usageError{fmt.Errorf("--depth: want a positive number, not %d", o.depth)}
	}
	limit := math.Inf(1)
	if o.failIfGrows != "" {
		v, err := units.ParsePercent(o.failIfGrows)
		if err != nil {
			return usageError{fmt.Errorf("--fail-if-grows: %w", err)}
		}
		limit = v
	}
	deviceGiven := o.changed != nil && o.changed("device")
	side := func(arg string, s pipeline.Settings) (pipeline.DiffSide, error) {
		paths, err := pipeline.ExpandTraces([]string{arg})
		return pipeline.DiffSide{Source: pipeline.SetSource{Paths: paths, Device: o.device, DeviceGiven: deviceGiven, Progress: a.progress()}, Settings: s}, err
	}
	sa, err := o.alloc.settings(o.invocation, "sim", false)
	if err != nil {
		return err
	}
	sa.Points = timelinePoints // the timeline, as a single replay keeps it
	sb := sa
	if confB {
		c, err := alloc.ParseConfig(o.confB)
		if err != nil {
			return usageError{fmt.Errorf("--alloc-conf-b: %w", err)}
		}
		sb.Config = &c
	}
	A, err := side(args[0], sa)
	if err != nil {
		return err
	}
	B, err := side(args[1], sb)
	if err != nil {
		return err
	}
	if err := fileout.NotAnInput(o.html, append(A.Source.Paths, B.Source.Paths...)...); err != nil {
		return err
	}
	d, err := pipeline.Diff(o.ctx, A, B, o.depth)
	if err != nil {
		return err
	}
	if err := output.DiffFormats.Render(a.stdout, o.output, d, output.Options{Color: a.color}); err != nil {
		return err
	}
	if o.html != "" {
		page := func(w io.Writer) error { return output.DiffHTML(w, d) }
		if err := writeHTML(a, o.invocation, o.html, append(A.Source.Paths, B.Source.Paths...), page); err != nil {
			return err
		}
	}
	if g := d.Growth(); g > limit {
		return &exitError{code: 1, msg: fmt.Sprintf("peak reserved grew %.1f%% (%s to %s), more than --fail-if-grows %s",
			100*g, units.FormatBytes(figures.PeakReserved(d.A.Stats)), units.FormatBytes(figures.PeakReserved(d.B.Stats)), o.failIfGrows)}
	}
	return nil
}
