package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
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
	f.StringVar(&o.spool, "spool", "", "folder of <pid>.json files written by training processes")
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
	stderr := &exporterWriter{w: a.stderr}
	e, err := exporter.New(exporter.Options{NVML: a.nvml, Spool: o.spool, Interval: o.interval,
		Warn: func(s string) { fmt.Fprintf(stderr, "gpumem: warning: %s\n", textsafe.Line(s)) }})
	if err != nil {
		return err
	}
	defer e.Close()

	serveErr := make(chan error, 1)
	if o.textfile == "" || listenGiven {
		ln, err := net.Listen("tcp", o.listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", o.listen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", e.Handler())
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintln(w, `<html><body><h1>gpumem exporter</h1><p><a href="/metrics">metrics</a></p></body></html>`)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { serveErr <- srv.Serve(ln) }()
		defer srv.Close()
		fmt.Fprintf(stderr, "gpumem: serving http://%s/metrics, spool %s\n", ln.Addr(), textsafe.Line(o.spool))
	}

	var tick <-chan time.Time
	if o.textfile != "" {
		if err := e.WriteTextfile(o.textfile); err != nil {
			return fmt.Errorf("--textfile: %w", err)
		}
		fmt.Fprintf(stderr, "gpumem: writing %s every %v, spool %s\n",
			textsafe.Line(o.textfile+"/"+exporter.TextfileName), o.interval, textsafe.Line(o.spool))
		t := time.NewTicker(o.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil // a daemon asked to stop has succeeded
		case err := <-serveErr:
			if !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serving: %w", err)
			}
			return nil
		case <-tick:
			// A full disk or a removed folder is worth telling, not stopping for.
			if err := e.WriteTextfile(o.textfile); err != nil {
				fmt.Fprintf(stderr, "gpumem: warning: --textfile: %s\n", textsafe.Line(err.Error()))
			}
		}
	}
}

// exporterWriter serializes writes from several goroutines.
type exporterWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *exporterWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
