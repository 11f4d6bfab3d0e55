package exporter

import (
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
)

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
	skippedDesc, truncatedDesc     *prometheus.Desc
	malformed, removedExit, stales float64 // running totals of the counters
	skipped                        float64
	lastErr                        string // told once, not every scrape
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
	c.skippedDesc = prometheus.NewDesc("gpumem_spool_skipped_files_total",
		"Spool entries left unread because a scrape reached a limit: 8192 entries listed, 512 files opened or 8 MiB read.", nil, nil)
	c.truncatedDesc = prometheus.NewDesc("gpumem_spool_truncated",
		"1 when the last scrape stopped reading the spool at a limit (see gpumem_spool_skipped_files_total).", nil, nil)
	return c
}

func (c *spoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
	for _, d := range []*prometheus.Desc{c.frag, c.largest, c.updated, c.ooms, c.retries, c.deviceAllocs,
		c.malformedDesc, c.removedDesc, c.processes, c.spoolUp, c.skippedDesc, c.truncatedDesc} {
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
	c.skipped += float64(res.skipped)
	truncated := 0.0
	if res.truncated {
		truncated = 1
	}
	emit(ch, c.skippedDesc, prometheus.CounterValue, c.skipped)
	emit(ch, c.truncatedDesc, prometheus.GaugeValue, truncated)
	emit(ch, c.spoolUp, prometheus.GaugeValue, up)
	emit(ch, c.malformedDesc, prometheus.CounterValue, c.malformed)
	emit(ch, c.removedDesc, prometheus.CounterValue, c.removedExit, "exited")
	emit(ch, c.removedDesc, prometheus.CounterValue, c.stales, "stale")
	emit(ch, c.processes, prometheus.GaugeValue, float64(len(res.records)))

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
				emit(ch, g.desc, prometheus.GaugeValue, v, labels...)
			}
		}
		reserved, allocated := st["reserved_bytes.all.current"], st["allocated_bytes.all.current"]
		frag := 0.0
		if reserved > 0 {
			frag = 1 - allocated/reserved
		}
		emit(ch, c.frag, prometheus.GaugeValue, frag, labels...)
		if free := reserved - st["active_bytes.all.current"]; rec.LargestFreeBlock != nil && free > 0 {
			emit(ch, c.largest, prometheus.GaugeValue,
				min(1, float64(*rec.LargestFreeBlock)/free), labels...)
		}
		for _, k := range []struct {
			desc *prometheus.Desc
			key  string
		}{{c.ooms, "num_ooms"}, {c.retries, "num_alloc_retries"}, {c.deviceAllocs, "num_device_alloc"}} {
			if v, ok := st[k.key]; ok {
				emit(ch, k.desc, prometheus.CounterValue, v, labels...)
			}
		}
		emit(ch, c.updated, prometheus.GaugeValue, rec.Time, labels...)
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
