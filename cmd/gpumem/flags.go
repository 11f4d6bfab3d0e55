package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/output"
	"github.com/gpumem/gpumem/internal/pipeline"
	"github.com/gpumem/gpumem/internal/setup"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// This file holds the flags several commands share.

// timelinePoints is how many points of memory over time a replay keeps
// for its report: the table's chart, JSON's timeline, the HTML page's
// first view.
const timelinePoints = 2000

// invocation is what a run function needs of cobra: the context and which
// flags were given. RunE fills it in, so that tests call run functions
// with an options struct alone.
type invocation struct {
	ctx     context.Context
	changed func(flag string) bool
}

func invoked(cmd *cobra.Command) invocation {
	return invocation{ctx: cmd.Context(), changed: cmd.Flags().Changed}
}

// allocFlags are the allocator settings shared by replay, run and summary
// (sweep takes a grid instead, fragcheck a card to fit with --must-fit).
type allocFlags struct {
	conf         string
	deviceMemory string
	fraction     float64
	policy       string
}

func (f *allocFlags) register(cmd *cobra.Command) {
	f.registerSettings(cmd, "--device-memory")
	cmd.Flags().StringVar(&f.deviceMemory, "device-memory", "", "simulated card size, bytes or with a unit (e.g. 24GiB); no limit without it")
}

// registerSettings registers the flags of allocFlags but the card's
// (fragcheck's card is --must-fit); card names it in the fraction's help.
func (f *allocFlags) registerSettings(cmd *cobra.Command, card string) {
	fl := cmd.Flags()
	fl.StringVar(&f.conf, "alloc-conf", "", "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: the trace's own)")
	fl.Float64Var(&f.fraction, "memory-fraction", 0, "set_per_process_memory_fraction of "+card)
	fl.StringVar(&f.policy, "policy", string(alloc.PolicyPyTorch), "allocation policy: "+alloc.PolicyNames())
}

// settings parses the flags into the setup the pipeline takes, with the
// backend and whether recorded addresses are ignored; a bad value is a
// usage error naming its flag.
func (f *allocFlags) settings(in invocation, backend string, ignoreAddresses bool) (pipeline.Settings, error) {
	s, err := setup.Flags{
		AllocConf: f.conf, AllocConfGiven: in.changed("alloc-conf"), Policy: f.policy,
		DeviceMemory: f.deviceMemory, Fraction: f.fraction, Backend: backend, IgnoreAddresses: ignoreAddresses,
	}.Parse()
	if err != nil {
		return pipeline.Settings{}, setupError(err)
	}
	return pipeline.Settings{Setup: s}, nil
}

// setupError is a setup's error as the command reports it: a usage error,
// with the setup's hint.
func setupError(err error) error {
	var se *setup.Error
	if errors.As(err, &se) && se.Hint != "" {
		err = withHint(err, se.Hint)
	}
	return usageError{err}
}

// outputFlag registers -o/--output, the format of a command's result,
// with its help, completion and check from the registry: a format the
// registry lacks is refused before the command runs.
func outputFlag[T any](cmd *cobra.Command, p *string, formats *output.Registry[T]) {
	cmd.Flags().StringVarP(p, "output", "o", formats.Default(), formats.Help())
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats.Names(), cobra.ShellCompDirectiveNoFileComp))
	cmd.PreRunE = func(*cobra.Command, []string) error { return checkFormat(formats, "output", *p) }
}

// checkFormat refuses a format the registry lacks; flag is the flag's
// name as the user wrote it.
func checkFormat[T any](formats *output.Registry[T], flag, name string) error {
	if _, err := formats.Lookup(name); err != nil {
		return usageError{fmt.Errorf("--%s: %w", flag, err)}
	}
	return nil
}

// deprecatedFlag registers old, a hidden string flag that stands for the
// flag named replacement; useDeprecated applies it.
func deprecatedFlag(cmd *cobra.Command, p *string, old, short, replacement string) {
	cmd.Flags().StringVarP(p, old, short, "", "deprecated: use --"+replacement)
	cmd.Flags().MarkHidden(old)
}

// useDeprecated copies the value of the deprecated flag old, when given,
// to *to, the value of the flag that replaces it (spelled name), and says
// so on stderr.
func useDeprecated(a *app, in invocation, old, value, replacement, name string, to *string) error {
	if !in.changed(old) {
		return nil
	}
	if in.changed(replacement) {
		return usageError{fmt.Errorf("--%s and %s are the same flag: give %s", old, name, name)}
	}
	fmt.Fprintf(a.stderr, "gpumem: note: --%s is deprecated; use %s\n", old, name)
	*to = value
	return nil
}

// sizeNotes says on stderr when a size flag's decimal value is close to
// a common card's size in GiB (80GB for an 80 GiB card).
func sizeNotes(a *app, cmd *cobra.Command) {
	if f := cmd.Flags().Lookup("device-memory"); f != nil && f.Changed {
		for _, n := range units.SizeNotes(f.Value.String()) {
			fmt.Fprintf(a.stderr, "gpumem: note: --device-memory %s\n", n)
		}
	}
}

// progress is where the pipeline may draw a progress bar: stderr, on a
// terminal only.
func (a *app) progress() io.Writer {
	if a.errColor {
		return a.stderr
	}
	return nil
}
