package exporter

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	keys                           []string // the memory_stats keys summed per group
	frag, peakFrag, largest        *prometheus.Desc
	updated, info                  *prometheus.Desc
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

// procLabels are the labels of every allocator metric: they stay the
// same from one run of a job to the next, so a restart does not make new
// series, and they join dcgm-exporter's (hostname, gpu, UUID, hpc_job;
// namespace, pod, container as its Kubernetes mapping names them).
// "hpc_job" is dcgm-exporter's job label; "job" would clash with
// Prometheus's own. The pid is on gpumem_torch_process_info alone.
var procLabels = []string{"hostname", "gpu", "UUID", "rank", "hpc_job", "namespace", "pod", "container"}

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
	c.frag = d("fragmentation_ratio", "1 - allocated/reserved now: the share of reserved memory not holding tensors (high between steps in healthy training).")
	c.peakFrag = d("peak_fragmentation_ratio", "1 - allocated peak/reserved peak: how much more the cache grew than the tensors ever needed.")
	c.info = prometheus.NewDesc("gpumem_torch_process_info", "One series a process writing to the spool, with its pid; 1.",
		append(slices.Clone(procLabels), "pid"), nil)
	c.largest = d("largest_free_block_ratio", "Largest free block in the cache over all free cached memory (reserved - active); 1 is unfragmented.")
	c.updated = d("last_update_timestamp_seconds", "When the process last wrote its statistics, in Unix seconds.")
	for _, g := range c.gauges {
		c.keys = append(c.keys, g.key)
	}
	c.keys = append(c.keys, "allocated_bytes.all.peak", "num_ooms", "num_alloc_retries", "num_device_alloc")
	slices.Sort(c.keys)
	c.keys = slices.Compact(c.keys)
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
	for _, d := range []*prometheus.Desc{c.frag, c.peakFrag, c.info, c.largest, c.updated, c.ooms, c.retries, c.deviceAllocs,
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
	for _, g := range groupRecords(res.records, c.hostname, gpus) {
		c.emitGroup(ch, g)
	}
}

// group is the records of one allocator label set: one process, or
// several that the labels do not tell apart (two processes of one pod on
// one GPU without ranks), whose figures are summed.
type group struct {
	labels []string // procLabels' values
	recs   []Record
}

// groupRecords groups the records by their allocator labels, in the
// order of their first record.
func groupRecords(recs []Record, hostname string, gpus map[string]string) []*group {
	var out []*group
	byKey := map[string]*group{}
	for _, rec := range recs {
		rank := ""
		if rec.Rank != nil {
			rank = strconv.Itoa(*rec.Rank)
		}
		gpu, ok := gpus[rec.UUID]
		if !ok {
			gpu = strconv.Itoa(rec.Device)
		}
		labels := []string{hostname, gpu, rec.UUID, rank, rec.Job, rec.Namespace, rec.Pod, rec.Container}
		for i, l := range labels {
			labels[i] = labelValue(l)
		}
		key := strings.Join(labels, "\x00")
		g := byKey[key]
		if g == nil {
			g = &group{labels: labels}
			byKey[key] = g
			out = append(out, g)
		}
		g.recs = append(g.recs, rec)
	}
	return out
}

// emitGroup sends the allocator metrics of one label set, and one info
// series a process carrying its pid.
func (c *spoolCollector) emitGroup(ch chan<- prometheus.Metric, g *group) {
	sum := map[string]float64{}
	var latest float64
	var largest *int64
	for i, rec := range g.recs {
		for _, k := range c.keys {
			if v, ok := rec.MemoryStats[k]; ok {
				sum[k] += v
			}
		}
		latest = max(latest, rec.Time)
		if rec.LargestFreeBlock != nil && (largest == nil || *rec.LargestFreeBlock > *largest) {
			largest = rec.LargestFreeBlock
		}
		// two PID 1s of two containers may share a label set: one series
		if !slices.ContainsFunc(g.recs[:i], func(r Record) bool { return r.PID == rec.PID }) {
			emit(ch, c.info, prometheus.GaugeValue, 1, append(slices.Clone(g.labels), strconv.Itoa(rec.PID))...)
		}
	}
	for _, gg := range c.gauges {
		if v, ok := sum[gg.key]; ok {
			emit(ch, gg.desc, prometheus.GaugeValue, v, g.labels...)
		}
	}
	emit(ch, c.frag, prometheus.GaugeValue, unused(sum["allocated_bytes.all.current"], sum["reserved_bytes.all.current"]), g.labels...)
	if _, ok := sum["reserved_bytes.all.peak"]; ok {
		emit(ch, c.peakFrag, prometheus.GaugeValue, unused(sum["allocated_bytes.all.peak"], sum["reserved_bytes.all.peak"]), g.labels...)
	}
	if free := sum["reserved_bytes.all.current"] - sum["active_bytes.all.current"]; largest != nil && free > 0 {
		emit(ch, c.largest, prometheus.GaugeValue, min(1, float64(*largest)/free), g.labels...)
	}
	for _, k := range []struct {
		desc *prometheus.Desc
		key  string
	}{{c.ooms, "num_ooms"}, {c.retries, "num_alloc_retries"}, {c.deviceAllocs, "num_device_alloc"}} {
		if v, ok := sum[k.key]; ok {
			emit(ch, k.desc, prometheus.CounterValue, v, g.labels...)
		}
	}
	emit(ch, c.updated, prometheus.GaugeValue, latest, g.labels...)
}

// unused is 1 - allocated/reserved, 0 when nothing is reserved.
func unused(allocated, reserved float64) float64 {
	if reserved <= 0 {
		return 0
	}
	return max(0, 1-allocated/reserved)
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
