package exporter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Serve runs e until ctx is done, which is a success for a daemon: it
// serves /metrics on listen ("" = no port) and, when textfile names a
// folder, rewrites textfile/gpumem.prom every interval. say receives the
// lines a person running it wants to see (what is served, warnings); a
// failed textfile write is a warning, not a reason to stop.
func (e *Exporter) Serve(ctx context.Context, listen, textfile string, interval time.Duration, say func(string)) error {
	say = e.oneAtATime(say)
	serveErr := make(chan error, 1)
	if listen != "" {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", listen, err)
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
		say(fmt.Sprintf("serving http://%s/metrics", ln.Addr()))
	}
	var tick <-chan time.Time
	if textfile != "" {
		if err := e.WriteTextfile(textfile); err != nil {
			return fmt.Errorf("--textfile: %w", err)
		}
		say(fmt.Sprintf("writing %s/%s every %v", textfile, TextfileName, interval))
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			if !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serving: %w", err)
			}
			return nil
		case <-tick:
			if err := e.WriteTextfile(textfile); err != nil {
				say("warning: --textfile: " + err.Error())
			}
		}
	}
}
