package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumem/gpumem/pkg/exporter"
	"github.com/gpumem/gpumem/pkg/textsafe"
)

type exporterOpts struct {
	listen, spool, textfile string
	interval                time.Duration
}

func newExporterCmd(a *app) *cobra.Command {
	o := &exporterOpts{}
	cmd := &cobra.Command{
		Use:   "exporter",
		Short: "Serve Prometheus metrics of the GPUs and of opted-in PyTorch processes",
		Long: `exporter serves Prometheus metrics of this machine's GPUs, with
dcgm-exporter's names, units and labels (DCGM_FI_DEV_FB_USED and so on, in
MiB), and of the caching allocator inside every PyTorch process that writes
its memory_stats() into the spool folder (scripts/gpumem_spool.py):
reserved, allocated, fragmentation, OOMs and retries per process.

Files of processes that exited, or that stopped writing for three
intervals, are removed from the spool. With --textfile it writes the
metrics into DIR/gpumem.prom every interval for node_exporter's textfile
collector, and opens no port unless --listen is given too.

The spool defaults to $GPUMEM_SPOOL, else $XDG_RUNTIME_DIR/gpumem-spool,
else /tmp/gpumem-spool-UID: the same rule as the Python writer.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runExporter(cmd.Context(), a, o, cmd.Flags().Changed("listen"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", ":9400", "address to serve /metrics on (dcgm-exporter's port)")
	f.StringVar(&o.spool, "spool", "", "folder of <pid>-<token>.json files written by training processes")
	f.StringVar(&o.textfile, "textfile", "", "write DIR/gpumem.prom every interval for node_exporter")
	f.DurationVar(&o.interval, "interval", exporter.DefaultInterval, "how often processes write their file; also the textfile period")
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
	// Scrapes warn from the server's goroutines.
	e, err := exporter.New(exporter.Options{NVML: a.nvml, Spool: o.spool, Interval: o.interval,
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

// exporterWriter serializes writes from several goroutines.
