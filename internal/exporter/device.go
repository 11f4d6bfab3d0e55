package exporter

import (
	"strconv"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumem/gpumem/internal/probe"
)

const mib = 1 << 20

// dcgmLabels are dcgm-exporter's labels on every device metric, in its
// order (internal/pkg/rendermetrics). dcgm-exporter renamed Hostname to
// hostname in 4.5.1 (PR #655); gpumem follows the current name.
var dcgmLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname"}

// deviceCollector reads every GPU through NVML on each scrape.
type deviceCollector struct {
	lib      nvml.Interface
	prober   probe.Prober
	hostname string
	warn     func(string)

	fbFree, fbUsed, fbReserved, fbTotal *prometheus.Desc
	memUsed, memTotal                   *prometheus.Desc
	procUsed, up                        *prometheus.Desc
	dcgm                                bool // also the DCGM_FI_DEV_FB_* series

	mu     sync.Mutex
	lastUp bool // for warning once per change, not per scrape
}

// gpuLabels are the labels of gpumem's own device metrics: dcgm-exporter's
// that identify a GPU, so the two join on gpu, UUID and hostname.
var gpuLabels = []string{"gpu", "UUID", "modelName", "hostname"}

func newDeviceCollector(lib nvml.Interface, procName func(uint32) string, hostname string, dcgm bool, warn func(string)) *deviceCollector {
	fb := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, dcgmLabels, nil)
	}
	return &deviceCollector{
		lib:      lib,
		prober:   probe.Prober{Lib: lib, ProcName: procName},
		hostname: hostname,
		warn:     warn,
		dcgm:     dcgm,
		memUsed: prometheus.NewDesc("gpumem_gpu_memory_used_bytes",
			"Device memory in use (NVML's used: every process, and the driver's own), in bytes.", gpuLabels, nil),
		memTotal: prometheus.NewDesc("gpumem_gpu_memory_total_bytes",
			"Device memory of the GPU, less what the driver reserves (NVML's total - reserved), in bytes.", gpuLabels, nil),
		// dcgm-exporter's help texts (etc/default-counters.csv).
		fbFree:     fb("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
		fbUsed:     fb("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
		fbReserved: fb("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB)."),
		fbTotal:    fb("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB)."),
		procUsed: prometheus.NewDesc("gpumem_gpu_process_memory_used_bytes",
			"GPU memory the driver attributes to a process (0 when it cannot attribute it).",
			[]string{"gpu", "UUID", "hostname", "pid", "process"}, nil),
		up: prometheus.NewDesc("gpumem_nvml_up",
			"1 when NVML answered on this scrape, 0 when there is no driver or it failed.", nil, nil),
		lastUp: true,
	}
}

func (c *deviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.memUsed, c.memTotal, c.procUsed, c.up} {
		ch <- d
	}
	if c.dcgm {
		for _, d := range []*prometheus.Desc{c.fbFree, c.fbUsed, c.fbReserved, c.fbTotal} {
			ch <- d
		}
	}
}

func (c *deviceCollector) Collect(ch chan<- prometheus.Metric) {
	// Our own Init keeps the library loaded past the probe's Shutdown, for
	// busID; without it, calling NVML would kill the process.
	if c.lib.Init() == nvml.SUCCESS {
		defer c.lib.Shutdown()
	}
	sys, err := c.prober.Probe()
	c.mu.Lock()
	if (err == nil) != c.lastUp && c.warn != nil {
		if err != nil {
			c.warn("nvml: " + err.Error() + "; serving allocator metrics only")
		} else {
			c.warn("nvml: answering again")
		}
	}
	c.lastUp = err == nil
	c.mu.Unlock()
	if err != nil {
		emit(ch, c.up, prometheus.GaugeValue, 0)
		return
	}
	emit(ch, c.up, prometheus.GaugeValue, 1)
	for _, g := range sys.GPUs {
		idx := strconv.Itoa(g.Index)
		labels := []string{idx, g.UUID, c.busID(g.Index), "nvidia" + idx, g.Name, c.hostname}
		gauge := func(d *prometheus.Desc, bytes uint64) {
			// DCGM reports whole MiB, rounded down.
			emit(ch, d, prometheus.GaugeValue, float64(bytes/mib), labels...)
		}
		own := []string{idx, g.UUID, g.Name, c.hostname}
		emit(ch, c.memUsed, prometheus.GaugeValue, float64(g.MemoryUsed), own...)
		emit(ch, c.memTotal, prometheus.GaugeValue, float64(g.MemoryTotal-min(g.MemoryReserved, g.MemoryTotal)), own...)
		if c.dcgm {
			gauge(c.fbFree, g.MemoryFree)
			gauge(c.fbUsed, g.MemoryUsed)
			gauge(c.fbReserved, g.MemoryReserved)
			gauge(c.fbTotal, g.MemoryTotal)
		}
		for _, p := range g.Processes {
			emit(ch, c.procUsed, prometheus.GaugeValue, float64(p.UsedMemory),
				idx, g.UUID, c.hostname, strconv.FormatUint(uint64(p.PID), 10), p.Name)
		}
	}
}

// busID is the PCI bus id as dcgm-exporter prints it ("00000000:19:00.0"),
// or "" when NVML does not tell. The probe does not read it.
func (c *deviceCollector) busID(i int) string {
	dev, ret := c.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return ""
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return ""
	}
	b := make([]byte, 0, len(pci.BusId))
	for _, ch := range pci.BusId {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(b)
}
