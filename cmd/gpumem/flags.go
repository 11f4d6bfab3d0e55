package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/budget"
	"github.com/gpumem/gpumem/pkg/output"
	"github.com/gpumem/gpumem/pkg/pipeline"
)

// This file holds the flags several commands share.

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
	fl := cmd.Flags()
	fl.StringVar(&f.conf, "alloc-conf", "", "allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax (default: the trace's own)")
	fl.StringVar(&f.deviceMemory, "device-memory", "", "simulated card size, bytes or with a unit (e.g. 24GiB); no limit without it")
	fl.Float64Var(&f.fraction, "memory-fraction", 0, "set_per_process_memory_fraction of --device-memory")
	fl.StringVar(&f.policy, "policy", string(alloc.PolicyPyTorch), "allocation policy: "+alloc.PolicyNames())
}

// settings are the flags as the pipeline takes them.
func (f *allocFlags) settings(in invocation, backend string) pipeline.Settings {
	return pipeline.Settings{
		AllocConf: f.conf, AllocConfGiven: in.changed("alloc-conf"), Policy: f.policy,
		DeviceMemory: f.deviceMemory, MemoryFraction: f.fraction, Backend: backend,
	}
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
	for _, name := range []string{"device-memory"} {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		for item := range strings.SplitSeq(f.Value.String(), ",") {
			if n := budget.SizeNote(item); n != "" {
				fmt.Fprintf(a.stderr, "gpumem: note: --%s %s\n", name, n)
			}
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
