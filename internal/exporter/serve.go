package exporter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
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
		l := e.http
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read,
			WriteTimeout: l.Write, IdleTimeout: l.Idle, MaxHeaderBytes: 16 << 10}
		go func() { serveErr <- srv.Serve(limitListener(ln, l.MaxConns)) }()
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

// limitListener accepts at most n connections open at once; the next
// waits in the kernel's backlog until one closes. (netutil.LimitListener
// of golang.org/x/net does the same; it is not otherwise a dependency.)
func limitListener(ln net.Listener, n int) net.Listener {
	return &limited{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limited struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{} // closed by Close: a waiting Accept returns
	closeOnce sync.Once
}

func (l *limited) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *limited) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
