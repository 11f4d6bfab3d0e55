package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/internal/exporter"
	"github.com/gpumem/gpumem/internal/textsafe"
)

type exporterOpts struct {
	listen, spool, textfile string
	interval                time.Duration
	dcgm                    bool
}

// defaultExporterListen is the exporter's port: not dcgm-exporter's 9400,
// so that the two run side by side on a node.
const defaultExporterListen = ":9842"

func newExporterCmd(a *app) *cobra.Command {
	o := &exporterOpts{}
	cmd := &cobra.Command{
		Use:   "exporter",
		Short: "Serve Prometheus metrics of the GPUs and of opted-in PyTorch processes",
		Long:  helpText("exporter", "$LISTEN", defaultExporterListen),
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runExporter(cmd.Context(), a, o, cmd.Flags().Changed("listen"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", defaultExporterListen, "address to serve /metrics on")
	f.StringVar(&o.spool, "spool", "", "folder of <pid>-<token>.json files written by training processes")
	f.StringVar(&o.textfile, "textfile", "", "write DIR/gpumem.prom every interval for node_exporter")
	f.DurationVar(&o.interval, "interval", exporter.DefaultInterval, "how often processes write their file; also the textfile period")
	f.BoolVar(&o.dcgm, "dcgm-compat", false, "also export dcgm-exporter's DCGM_FI_DEV_FB_* device series (MiB)")
	return cmd
}

func runExporter(ctx context.Context, a *app, o *exporterOpts, listenGiven bool) error {
	if o.interval < time.Second {
		return usageError{fmt.Errorf("--interval %v: must be at least 1s", o.interval)}
	}
	if o.textfile != "" {
		if st, err := os.Stat(o.textfile); err != nil || !st.IsDir() {
			return usageError{fmt.Errorf("--textfile %s: not a folder", textsafe.Line(o.textfile))}
		}
	}
	if o.spool == "" {
		o.spool = exporter.DefaultSpool(a.getenv, os.Getuid())
	}
	// A daemon asked to stop stops cleanly, with status 0, however long
	// closing takes: the root handler's 130 and its 2 s limit are for
	// commands that give a result.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if a.releaseSignals != nil {
		a.releaseSignals()
	}
	go func() { <-ctx.Done(); stop() }() // a second signal kills it at once
	// Scrapes warn from the server's goroutines.
	e, err := exporter.New(exporter.Options{NVML: a.nvml, Spool: o.spool, Interval: o.interval, DCGMCompat: o.dcgm,
		Warn: func(s string) { fmt.Fprintf(a.stderr, "gpumem: warning: %s\n", textsafe.Line(s)) }})
	if err != nil {
		return err
	}
	defer e.Close()

	listen := o.listen
	if o.textfile != "" && !listenGiven {
		listen = "" // a textfile alone opens no port
	}
	say := func(line string) {
		fmt.Fprintf(a.stderr, "gpumem: %s (spool %s)\n", textsafe.Line(line), textsafe.Line(o.spool))
	}
	return e.Serve(ctx, listen, o.textfile, o.interval, say)
}
