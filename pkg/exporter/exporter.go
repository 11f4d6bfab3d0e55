package exporter

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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
	// Spool is the folder of <pid>.json files.
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
	// spool file), once per occurrence rather than once per scrape.
	Warn func(string)
}

// DefaultInterval is how often training processes write their spool file.
const DefaultInterval = 15 * time.Second

// Exporter gathers the device and allocator metrics of one machine.
type Exporter struct {
	reg      *prometheus.Registry
	lib      nvml.Interface
	heldNVML bool
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
	e := &Exporter{reg: prometheus.NewRegistry(), lib: o.NVML}
	if e.lib == nil {
		e.lib = nvml.New()
	}
	e.heldNVML = e.lib.Init() == nvml.SUCCESS
	dev := newDeviceCollector(e.lib, o.ProcName, o.Hostname, o.Warn)
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
// same rule as scripts/gpumem_spool.py.
func DefaultSpool(getenv func(string) string, uid int) string {
	if d := getenv("GPUMEM_SPOOL"); d != "" {
		return d
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "gpumem-spool")
	}
	return filepath.Join(os.TempDir(), "gpumem-spool-"+strconv.Itoa(uid))
}

// spoolCollector turns spool records into allocator metrics.
type spoolCollector struct {
	r        *spoolReader
	lib      nvml.Interface
	hostname string
	warn     func(string)
	mu       sync.Mutex // one pass over the spool at a time

	gauges                         []statGauge
	frag, largest, updated         *prometheus.Desc
	ooms, retries, deviceAllocs    *prometheus.Desc
	malformedDesc, removedDesc     *prometheus.Desc
	processes, spoolUp             *prometheus.Desc
	malformed, removedExit, stales float64 // running totals of the counters
	lastErr                        string  // told once, not every scrape
}

// statGauge is a gauge copied from one memory_stats key.
type statGauge struct {
	key  string
	desc *prometheus.Desc
}

// procLabels are the labels of every allocator metric. "hpc_job" is
// dcgm-exporter's job label; "job" would clash with Prometheus's own.
var procLabels = []string{"hostname", "gpu", "UUID", "pid", "rank", "hpc_job"}

func newSpoolCollector(r *spoolReader, lib nvml.Interface, hostname string, warn func(string)) *spoolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("gpumem_torch_"+name, help, procLabels, nil)
	}
	c := &spoolCollector{r: r, lib: lib, hostname: hostname, warn: warn}
	for _, s := range []struct{ stat, name, what string }{
		{"reserved_bytes", "reserved", "Memory reserved from the device by the caching allocator"},
		{"allocated_bytes", "allocated", "Memory of live tensors"},
		{"active_bytes", "active", "Memory of blocks in use, including freed blocks awaiting their streams"},
		{"inactive_split_bytes", "inactive_split", "Free memory inside split blocks (unusable for larger requests)"},
	} {
		c.gauges = append(c.gauges,
			statGauge{s.stat + ".all.current", d(s.name+"_bytes", s.what+", in bytes.")},
			statGauge{s.stat + ".all.peak", d(s.name+"_peak_bytes", s.what+", peak since start or reset, in bytes.")})
	}
	c.frag = d("fragmentation_ratio", "1 - allocated/reserved: the share of reserved memory not holding tensors.")
	c.largest = d("largest_free_block_ratio", "Largest free block in the cache over all free cached memory (reserved - active); 1 is unfragmented.")
	c.updated = d("last_update_timestamp_seconds", "When the process last wrote its statistics, in Unix seconds.")
	c.ooms = d("ooms_total", "Out-of-memory errors the allocator raised (num_ooms).")
	c.retries = d("alloc_retries_total", "Allocations that failed, freed the cache and retried (num_alloc_retries).")
	c.deviceAllocs = d("device_allocs_total", "cudaMalloc calls of the allocator (num_device_alloc).")
	c.malformedDesc = prometheus.NewDesc("gpumem_spool_malformed_files_total",
		"Spool files skipped because they could not be read or made no sense.", nil, nil)
	c.removedDesc = prometheus.NewDesc("gpumem_spool_removed_files_total",
		"Spool files removed: their process exited, or it stopped writing for three intervals.", []string{"reason"}, nil)
	c.processes = prometheus.NewDesc("gpumem_spool_processes", "Processes whose allocator metrics are exported.", nil, nil)
	c.spoolUp = prometheus.NewDesc("gpumem_spool_up", "1 when the spool folder could be read.", nil, nil)
	return c
}

func (c *spoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
	for _, d := range []*prometheus.Desc{c.frag, c.largest, c.updated, c.ooms, c.retries, c.deviceAllocs,
		c.malformedDesc, c.removedDesc, c.processes, c.spoolUp} {
		ch <- d
	}
}

func (c *spoolCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res, err := c.r.read()
	up, msg := 1.0, ""
	if err != nil {
		up, msg = 0, fmt.Sprintf("spool: %v", err)
	}
	if msg != c.lastErr && msg != "" {
		c.tell(msg)
	}
	c.lastErr = msg
	for _, m := range res.malformed {
		c.tell("spool: skipping " + m.Error())
	}
	c.malformed += float64(len(res.malformed))
	c.removedExit += float64(res.exited)
	c.stales += float64(res.stale)
	ch <- prometheus.MustNewConstMetric(c.spoolUp, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(c.malformedDesc, prometheus.CounterValue, c.malformed)
	ch <- prometheus.MustNewConstMetric(c.removedDesc, prometheus.CounterValue, c.removedExit, "exited")
	ch <- prometheus.MustNewConstMetric(c.removedDesc, prometheus.CounterValue, c.stales, "stale")
	ch <- prometheus.MustNewConstMetric(c.processes, prometheus.GaugeValue, float64(len(res.records)))

	gpus := c.gpuIndexes(res.records)
	for _, rec := range res.records {
		rank := ""
		if rec.Rank != nil {
			rank = strconv.Itoa(*rec.Rank)
		}
		gpu, ok := gpus[rec.UUID]
		if !ok {
			gpu = strconv.Itoa(rec.Device)
		}
		labels := []string{c.hostname, gpu, rec.UUID, strconv.Itoa(rec.PID), rank, rec.Job}
		st := rec.MemoryStats
		for _, g := range c.gauges {
			if v, ok := st[g.key]; ok {
				ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, labels...)
			}
		}
		reserved, allocated := st["reserved_bytes.all.current"], st["allocated_bytes.all.current"]
		frag := 0.0
		if reserved > 0 {
			frag = 1 - allocated/reserved
		}
		ch <- prometheus.MustNewConstMetric(c.frag, prometheus.GaugeValue, frag, labels...)
		if free := reserved - st["active_bytes.all.current"]; rec.LargestFreeBlock != nil && free > 0 {
			ch <- prometheus.MustNewConstMetric(c.largest, prometheus.GaugeValue,
				min(1, float64(*rec.LargestFreeBlock)/free), labels...)
		}
		for _, k := range []struct {
			desc *prometheus.Desc
			key  string
		}{{c.ooms, "num_ooms"}, {c.retries, "num_alloc_retries"}, {c.deviceAllocs, "num_device_alloc"}} {
			if v, ok := st[k.key]; ok {
				ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, v, labels...)
			}
		}
		ch <- prometheus.MustNewConstMetric(c.updated, prometheus.GaugeValue, rec.Time, labels...)
	}
}

func (c *spoolCollector) tell(msg string) {
	if c.warn != nil {
		c.warn(msg)
	}
}

// gpuIndexes maps the records' GPU UUIDs to NVML indexes, so that the gpu
// label matches dcgm-exporter's even when CUDA_VISIBLE_DEVICES renumbers
// the devices inside the process. UUIDs NVML does not know are left out.
func (c *spoolCollector) gpuIndexes(recs []Record) map[string]string {
	m := make(map[string]string)
	if !slices.ContainsFunc(recs, func(r Record) bool { return r.UUID != "" }) || c.lib.Init() != nvml.SUCCESS {
		return m
	}
	defer c.lib.Shutdown()
	for _, rec := range recs {
		if _, done := m[rec.UUID]; done || rec.UUID == "" {
			continue
		}
		dev, ret := c.lib.DeviceGetHandleByUUID(rec.UUID)
		if ret != nvml.SUCCESS {
			continue
		}
		if i, ret := dev.GetIndex(); ret == nvml.SUCCESS {
			m[rec.UUID] = strconv.Itoa(i)
		}
	}
	return m
}
