package exporter

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure an [Exporter]. Only Spool is required.
type Options struct {
	// NVML is the library to query; nil means the real one.
	NVML nvml.Interface
	// ProcName names a process; nil means /proc/<pid>/comm.
	ProcName func(pid uint32) string
	// Spool is the folder of <pid>-<token>.json files.
	Spool string
	// Interval is how often processes write their file; a file older than
	// three intervals is stale. Zero means 15 s.
	Interval time.Duration
	// Hostname is the hostname label; "" means os.Hostname.
	Hostname string
	// Now and Alive replace the clock and the process table in tests;
	// nil means the real ones.
	Now   func() time.Time
	Alive func(pid int) bool
	// PIDNamespace is the inode of the pid namespace Alive looks into;
	// 0 means this process's, read from /proc/self/ns/pid.
	PIDNamespace uint64
	// Warn receives one line per problem worth telling (NVML gone, a bad
	// spool file), once per occurrence rather than once per scrape. Calls
	// to it and to Serve's say come one at a time, so it may write to a
	// plain buffer.
	Warn func(string)
	// DCGMCompat adds the device memory metrics under dcgm-exporter's
	// names (DCGM_FI_DEV_FB_*, MiB), for a node that does not run it.
	DCGMCompat bool
	// HTTP bounds what clients of /metrics may hold; zero fields mean
	// DefaultHTTPLimits'.
	HTTP HTTPLimits
}

// HTTPLimits bound the connections of the /metrics server, so that idle
// or slow clients cannot exhaust descriptors or memory.
type HTTPLimits struct {
	MaxConns    int           // connections open at once; more wait to be accepted
	ReadHeader  time.Duration // to read a request's headers
	Read, Write time.Duration // to read a whole request; to write the answer
	Idle        time.Duration // a kept-alive connection waiting for its next request
}

// DefaultHTTPLimits: a scrape takes well under a second, and Prometheus
// keeps one connection per target.
var DefaultHTTPLimits = HTTPLimits{MaxConns: 32, ReadHeader: 5 * time.Second, Read: 10 * time.Second,
	Write: 30 * time.Second, Idle: 60 * time.Second}

func (l HTTPLimits) withDefaults() HTTPLimits {
	d := DefaultHTTPLimits
	if l.MaxConns > 0 {
		d.MaxConns = l.MaxConns
	}
	for _, p := range []struct{ v, def *time.Duration }{{&l.ReadHeader, &d.ReadHeader}, {&l.Read, &d.Read}, {&l.Write, &d.Write}, {&l.Idle, &d.Idle}} {
		if *p.v > 0 {
			*p.def = *p.v
		}
	}
	return d
}

// DefaultInterval is how often training processes write their spool file.
const DefaultInterval = 15 * time.Second

// Exporter gathers the device and allocator metrics of one machine.
type Exporter struct {
	tellMu   sync.Mutex // scrapes warn from the HTTP server's goroutines
	reg      *prometheus.Registry
	lib      nvml.Interface
	heldNVML bool
	http     HTTPLimits
}

// New returns an exporter with its own registry. It keeps NVML initialized
// until Close when a driver is present, so scrapes do not pay for loading it.
func New(o Options) (*Exporter, error) {
	if o.Spool == "" {
		return nil, errors.New("no spool folder")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Alive == nil {
		o.Alive = pidAlive
	}
	if o.Hostname == "" {
		o.Hostname, _ = os.Hostname()
	}
	if o.PIDNamespace == 0 {
		o.PIDNamespace = ownPIDNamespace()
	}
	e := &Exporter{reg: prometheus.NewRegistry(), lib: o.NVML, http: o.HTTP.withDefaults()}
	if o.Warn != nil {
		o.Warn = e.oneAtATime(o.Warn)
	}
	if e.lib == nil {
		e.lib = nvml.New()
	}
	e.heldNVML = e.lib.Init() == nvml.SUCCESS
	dev := newDeviceCollector(e.lib, o.ProcName, o.Hostname, o.DCGMCompat, o.Warn)
	sp := newSpoolCollector(&spoolReader{dir: o.Spool, interval: o.Interval, now: o.Now, alive: o.Alive, pidns: o.PIDNamespace},
		e.lib, o.Hostname, o.Warn)
	if err := e.reg.Register(dev); err != nil {
		return nil, err
	}
	if err := e.reg.Register(sp); err != nil {
		return nil, err
	}
	return e, nil
}

// oneAtATime wraps f so that it and every other function it wraps run
// one at a time.
func (e *Exporter) oneAtATime(f func(string)) func(string) {
	return func(s string) {
		e.tellMu.Lock()
		defer e.tellMu.Unlock()
		f(s)
	}
}

// Close releases NVML.
func (e *Exporter) Close() {
	if e.heldNVML {
		e.lib.Shutdown()
		e.heldNVML = false
	}
}

// Gatherer is the exporter's registry.
func (e *Exporter) Gatherer() prometheus.Gatherer { return e.reg }

// Handler serves /metrics in the text or protobuf format the scraper asks
// for; a failing collector leaves the others' metrics in the answer.
func (e *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// TextfileName is the file written into node_exporter's textfile folder.
const TextfileName = "gpumem.prom"

// WriteTextfile writes every metric into dir/gpumem.prom for
// node_exporter's textfile collector. The file is written under a
// temporary name and renamed, so the collector never reads half of it.
func (e *Exporter) WriteTextfile(dir string) error {
	return prometheus.WriteToTextfile(filepath.Join(dir, TextfileName), e.reg)
}

// pidAlive says whether a process exists; EPERM means it does, under
// another user.
func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ownPIDNamespace is the inode of this process's pid namespace, or 0.
func ownPIDNamespace() uint64 {
	var st syscall.Stat_t
	if syscall.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// DefaultSpool is the spool folder when none is given: $GPUMEM_SPOOL,
// else $XDG_RUNTIME_DIR/gpumem-spool, else /tmp/gpumem-spool-<uid>; the
// same rule as python/gpumem_spool.py.
func DefaultSpool(getenv func(string) string, uid int) string {
	if d := getenv("GPUMEM_SPOOL"); d != "" {
		return d
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "gpumem-spool")
	}
	return filepath.Join(os.TempDir(), "gpumem-spool-"+strconv.Itoa(uid))
}
