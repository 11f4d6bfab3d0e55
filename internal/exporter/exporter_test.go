package exporter

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const gib = 1 << 30

const (
	uuid0 = "GPU-00000000-1111-2222-3333-444444444444"
	uuid1 = "GPU-55555555-6666-7777-8888-999999999999"
)

// newDevice returns a mock H200 (143771 MiB, 552 MiB reserved by the
// driver). Mock methods left nil panic, so a query the exporter should
// not make fails the test.
func newDevice(index int, uuid, bus string, used uint64, procs []nvml.ProcessInfo) *mock.Device {
	const total, reserved = 143771 * mib, 552 * mib
	var busID [32]int8
	for i, c := range bus {
		busID[i] = int8(c)
	}
	return &mock.Device{
		GetIndexFunc: func() (int, nvml.Return) { return index, nvml.SUCCESS },
		GetNameFunc:  func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
		GetUUIDFunc:  func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{BusId: busID}, nvml.SUCCESS
		},
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			// used is 1.5 MiB past a whole MiB on gpu 0: DCGM rounds down.
			return nvml.Memory_v2{Total: total, Reserved: reserved, Used: used,
				Free: total - reserved - used}, nvml.SUCCESS
		},
		GetBAR1MemoryInfoFunc: func() (nvml.BAR1Memory, nvml.Return) {
			return nvml.BAR1Memory{Bar1Total: 256 * gib}, nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 87, Memory: 41}, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc:  func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS },
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
	}
}

// newLib returns a mock NVML holding devs; it counts Init and Shutdown so
// tests can check that every Init is paired.
func newLib(devs ...*mock.Device) (*mock.Interface, *atomic.Int64) {
	refs := new(atomic.Int64) // collectors run in parallel
	return &mock.Interface{
		InitFunc:                       func() nvml.Return { refs.Add(1); return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { refs.Add(-1); return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 13000, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		DeviceGetHandleByUUIDFunc: func(u string) (nvml.Device, nvml.Return) {
			for _, d := range devs {
				if id, _ := d.GetUUID(); id == u {
					return d, nvml.SUCCESS
				}
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
		},
	}, refs
}

func twoGPUs() (*mock.Interface, *atomic.Int64) {
	return newLib(
		newDevice(0, uuid0, "00000000:19:00.0", 100*gib+3*mib/2, []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 100 * gib}}),
		newDevice(1, uuid1, "00000000:3B:00.0", 0, nil))
}

func procNames(pid uint32) string { return map[uint32]string{4242: "python3"}[pid] }

var clock = time.Unix(1764550000, 0)

func newTest(t *testing.T, lib nvml.Interface, alive func(int) bool, edit ...func(*Options)) (*Exporter, string, *[]string) {
	t.Helper()
	dir := t.TempDir()
	var warnings []string
	if alive == nil {
		alive = func(int) bool { return true }
	}
	o := Options{NVML: lib, ProcName: procNames, Spool: dir, Interval: 10 * time.Second, PIDNamespace: 4026531836,
		Hostname: "node7", Now: func() time.Time { return clock }, Alive: alive,
		Warn: func(s string) { warnings = append(warnings, s) }}
	for _, f := range edit {
		f(&o)
	}
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, dir, &warnings
}

func TestDeviceMetrics(t *testing.T) {
	lib, refs := twoGPUs()
	e, _, warnings := newTest(t, lib, nil, func(o *Options) { o.DCGMCompat = true })
	want := `
# HELP gpumem_gpu_memory_used_bytes Device memory in use (NVML's used: every process, and the driver's own), in bytes.
# TYPE gpumem_gpu_memory_used_bytes gauge
gpumem_gpu_memory_used_bytes{UUID="GPU-00000000-1111-2222-3333-444444444444",gpu="0",hostname="node7",modelName="NVIDIA H200"} 1.07375755264e+11
gpumem_gpu_memory_used_bytes{UUID="GPU-55555555-6666-7777-8888-999999999999",gpu="1",hostname="node7",modelName="NVIDIA H200"} 0
# HELP gpumem_gpu_memory_total_bytes Device memory of the GPU, less what the driver reserves (NVML's total - reserved), in bytes.
# TYPE gpumem_gpu_memory_total_bytes gauge
gpumem_gpu_memory_total_bytes{UUID="GPU-00000000-1111-2222-3333-444444444444",gpu="0",hostname="node7",modelName="NVIDIA H200"} 1.50176006144e+11
gpumem_gpu_memory_total_bytes{UUID="GPU-55555555-6666-7777-8888-999999999999",gpu="1",hostname="node7",modelName="NVIDIA H200"} 1.50176006144e+11
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{UUID="GPU-00000000-1111-2222-3333-444444444444",device="nvidia0",gpu="0",hostname="node7",modelName="NVIDIA H200",pci_bus_id="00000000:19:00.0"} 40817
DCGM_FI_DEV_FB_FREE{UUID="GPU-55555555-6666-7777-8888-999999999999",device="nvidia1",gpu="1",hostname="node7",modelName="NVIDIA H200",pci_bus_id="00000000:3B:00.0"} 143219
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{UUID="GPU-00000000-1111-2222-3333-444444444444",device="nvidia0",gpu="0",hostname="node7",modelName="NVIDIA H200",pci_bus_id="00000000:19:00.0"} 102401
DCGM_FI_DEV_FB_USED{UUID="GPU-55555555-6666-7777-8888-999999999999",device="nvidia1",gpu="1",hostname="node7",modelName="NVIDIA H200",pci_bus_id="00000000:3B:00.0"} 0
# HELP DCGM_FI_DEV_FB_RESERVED Framebuffer memory reserved (in MiB).
# TYPE DCGM_FI_DEV_FB_RESERVED gauge
DCGM_FI_DEV_FB_RESERVED{UUID="GPU-00000000-1111-2222-3333-444444444444",device="nvidia0",gpu="0",hostname="node7",modelName="NVIDIA H200",pci_bus_id="00000000:19:00.0"} 552
DCGM_FI_DEV_FB_RESERVED{UUID="GPU-55555555-6666-7777-8888-999999999999",device="nvidia1",gpu="1",hostname="node7",modelName="NVIDIA H200",pci_bus_id="00000000:3B:00.0"} 552
# HELP DCGM_FI_DEV_FB_TOTAL Framebuffer memory total (in MiB).
# TYPE DCGM_FI_DEV_FB_TOTAL gauge
DCGM_FI_DEV_FB_TOTAL{UUID="GPU-00000000-1111-2222-3333-444444444444",device="nvidia0",gpu="0",hostname="node7",modelName="NVIDIA H200",pci_bus_id="00000000:19:00.0"} 143771
DCGM_FI_DEV_FB_TOTAL{UUID="GPU-55555555-6666-7777-8888-999999999999",device="nvidia1",gpu="1",hostname="node7",modelName="NVIDIA H200",pci_bus_id="00000000:3B:00.0"} 143771
# HELP gpumem_gpu_process_memory_used_bytes GPU memory the driver attributes to a process (0 when it cannot attribute it).
# TYPE gpumem_gpu_process_memory_used_bytes gauge
gpumem_gpu_process_memory_used_bytes{UUID="GPU-00000000-1111-2222-3333-444444444444",gpu="0",hostname="node7",pid="4242",process="python3"} 1.073741824e+11
# HELP gpumem_nvml_up 1 when NVML answered on this scrape, 0 when there is no driver or it failed.
# TYPE gpumem_nvml_up gauge
gpumem_nvml_up 1
`
	names := []string{"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_TOTAL",
		"gpumem_gpu_memory_used_bytes", "gpumem_gpu_memory_total_bytes", "gpumem_gpu_process_memory_used_bytes", "gpumem_nvml_up"}
	if err := testutil.GatherAndCompare(e.Gatherer(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if refs.Load() != 1 {
		t.Errorf("after a scrape NVML is initialized %d times, want 1 (held by the exporter)", refs.Load())
	}
	e.Close()
	if refs.Load() != 0 {
		t.Errorf("after Close NVML is initialized %d times, want 0", refs.Load())
	}
	if len(*warnings) != 0 {
		t.Errorf("warnings: %q", *warnings)
	}
	// without DCGMCompat, no DCGM_FI_ series: dcgm-exporter has them
	lib, _ = twoGPUs()
	e, _, _ = newTest(t, lib, nil)
	mfs, _ := e.Gatherer().Gather()
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "DCGM_") {
			t.Errorf("%s without DCGMCompat", mf.GetName())
		}
	}
}

func TestNoDriver(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	e, dir, warnings := newTest(t, lib, nil)
	writeRecord(t, dir, record(4242, 0, uuid0))
	for range 2 {
		if n := value(t, e, "gpumem_nvml_up"); n != 0 {
			t.Errorf("gpumem_nvml_up = %g, want 0", n)
		}
	}
	// The allocator metrics do not need the driver; without it the gpu
	// label is the device index the process saw.
	want := `
# HELP gpumem_torch_reserved_bytes Memory reserved from the device by the caching allocator, in bytes.
# TYPE gpumem_torch_reserved_bytes gauge
gpumem_torch_reserved_bytes{UUID="GPU-00000000-1111-2222-3333-444444444444",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pod="",rank="3"} 1.930428416e+10
`
	if err := testutil.GatherAndCompare(e.Gatherer(), strings.NewReader(want), "gpumem_torch_reserved_bytes"); err != nil {
		t.Error(err)
	}
	if len(*warnings) != 1 || !strings.HasPrefix((*warnings)[0], "nvml: no nvidia driver found") {
		t.Errorf("warnings = %q, want one about the missing driver", *warnings)
	}
}

var stats map[string]float64

func record(pid, device int, uuid string) map[string]any {
	return map[string]any{"pid": pid, "rank": 3, "device": device, "uuid": uuid, "time": float64(clock.Unix()) - 5,
		"interval": 10, "memory_stats": stats}
}

func writeRecord(t *testing.T, dir string, rec map[string]any) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, fmt.Sprint(rec["pid"])+".json"), string(b))
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) {
	// Loaded once: the fixture's truth is the figures a real process wrote.
	b, err := os.ReadFile("../../testdata/pytorch/gpt2_varlen.truth.json")
	if err == nil {
		var truth struct {
			MemoryStats map[string]float64 `json:"memory_stats"`
		}
		err = json.Unmarshal(b, &truth)
		stats = truth.MemoryStats
	}
	if err != nil || len(stats) == 0 {
		panic("reading the gpt2_varlen truth: " + err.Error())
	}
	os.Exit(m.Run())
}

// value gathers e and returns the value of the one series of name whose
// labels include the given name=value pairs.
func value(t *testing.T, e *Exporter, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := e.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := []float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.Metric {
			have := map[string]string{}
			for _, lp := range m.Label {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				found = append(found, m.Gauge.GetValue())
			case m.Counter != nil:
				found = append(found, m.Counter.GetValue())
			}
		}
	}
	if len(found) != 1 {
		// what there was, to tell a missing record from a label that differs
		var seen []string
		for _, mf := range mfs {
			if mf.GetName() == name || strings.HasPrefix(mf.GetName(), "gpumem_spool_") {
				for _, m := range mf.Metric {
					seen = append(seen, mf.GetName()+m.String())
				}
			}
		}
		t.Fatalf("%s%q: %d series, want 1; the exporter had:\n%s", name, labels, len(found), strings.Join(seen, "\n"))
	}
	return found[0]
}

func TestSpool(t *testing.T) {
	lib, _ := twoGPUs()
	e, dir, warnings := newTest(t, lib, func(pid int) bool { return pid != 5000 && pid != 5003 })

	r := record(4242, 0, uuid1) // CUDA_VISIBLE_DEVICES=1: device 0 is NVML's gpu 1
	r["job"] = "llm-7"
	writeRecord(t, dir, r)
	r = record(4300, 0, "")
	r["rank"], r["largest_free_block"] = nil, 500*mib
	writeRecord(t, dir, r)
	writeRecord(t, dir, record(5000, 0, uuid0)) // exited
	r = record(5003, 0, uuid0)
	r["pidns"] = 4026532000 // in a container: pid 5003 there is not pid 5003 here
	writeRecord(t, dir, r)
	r = record(5001, 0, uuid0)
	r["time"] = float64(clock.Unix()) - 31 // over three of the exporter's 10 s intervals
	writeRecord(t, dir, r)
	r = record(5002, 0, uuid0)
	r["time"], r["interval"] = float64(clock.Unix())-31, 20 // within three of its own intervals
	writeRecord(t, dir, r)
	writeFile(t, filepath.Join(dir, "6000.json"), "{")
	r = record(6002, 0, uuid0)
	writeRecord(t, dir, r)
	os.Rename(filepath.Join(dir, "6002.json"), filepath.Join(dir, "6001.json")) // pid does not match its name
	writeRecord(t, dir, record(6003, 0, uuid0))
	os.Rename(filepath.Join(dir, "6003.json"), filepath.Join(dir, ".6003.json.tmp1234")) // a writer's temporary file
	writeFile(t, filepath.Join(dir, "README"), "not a record")

	// 5002 and 5003 have the same labels (the pid is not one): their
	// figures are summed, and gpumem_torch_process_info tells them apart.
	want := `
# HELP gpumem_torch_reserved_bytes Memory reserved from the device by the caching allocator, in bytes.
# TYPE gpumem_torch_reserved_bytes gauge
gpumem_torch_reserved_bytes{UUID="",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pod="",rank=""} 1.930428416e+10
gpumem_torch_reserved_bytes{UUID="GPU-00000000-1111-2222-3333-444444444444",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pod="",rank="3"} 3.860856832e+10
gpumem_torch_reserved_bytes{UUID="GPU-55555555-6666-7777-8888-999999999999",container="",gpu="1",hostname="node7",hpc_job="llm-7",namespace="",pod="",rank="3"} 1.930428416e+10
# HELP gpumem_torch_inactive_split_peak_bytes Free memory inside split blocks (unusable for larger requests), peak since start or reset, in bytes.
# TYPE gpumem_torch_inactive_split_peak_bytes gauge
gpumem_torch_inactive_split_peak_bytes{UUID="",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pod="",rank=""} 4.54046208e+09
gpumem_torch_inactive_split_peak_bytes{UUID="GPU-00000000-1111-2222-3333-444444444444",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pod="",rank="3"} 9.08092416e+09
gpumem_torch_inactive_split_peak_bytes{UUID="GPU-55555555-6666-7777-8888-999999999999",container="",gpu="1",hostname="node7",hpc_job="llm-7",namespace="",pod="",rank="3"} 4.54046208e+09
# HELP gpumem_torch_largest_free_block_ratio Largest free block in the cache over all free cached memory (reserved - active); 1 is unfragmented.
# TYPE gpumem_torch_largest_free_block_ratio gauge
gpumem_torch_largest_free_block_ratio{UUID="",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pod="",rank=""} 0.02725538293813028
# HELP gpumem_torch_device_allocs_total cudaMalloc calls of the allocator (num_device_alloc).
# TYPE gpumem_torch_device_allocs_total counter
gpumem_torch_device_allocs_total{UUID="",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pod="",rank=""} 237
gpumem_torch_device_allocs_total{UUID="GPU-00000000-1111-2222-3333-444444444444",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pod="",rank="3"} 474
gpumem_torch_device_allocs_total{UUID="GPU-55555555-6666-7777-8888-999999999999",container="",gpu="1",hostname="node7",hpc_job="llm-7",namespace="",pod="",rank="3"} 237
# HELP gpumem_torch_process_info One series a process writing to the spool, with its pid; 1.
# TYPE gpumem_torch_process_info gauge
gpumem_torch_process_info{UUID="",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pid="4300",pod="",rank=""} 1
gpumem_torch_process_info{UUID="GPU-00000000-1111-2222-3333-444444444444",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pid="5002",pod="",rank="3"} 1
gpumem_torch_process_info{UUID="GPU-00000000-1111-2222-3333-444444444444",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pid="5003",pod="",rank="3"} 1
gpumem_torch_process_info{UUID="GPU-55555555-6666-7777-8888-999999999999",container="",gpu="1",hostname="node7",hpc_job="llm-7",namespace="",pid="4242",pod="",rank="3"} 1
# HELP gpumem_spool_processes Processes whose allocator metrics are exported.
# TYPE gpumem_spool_processes gauge
gpumem_spool_processes 4
# HELP gpumem_spool_removed_files_total Spool files removed: their process exited, or it stopped writing for three intervals.
# TYPE gpumem_spool_removed_files_total counter
gpumem_spool_removed_files_total{reason="exited"} 1
gpumem_spool_removed_files_total{reason="stale"} 1
# HELP gpumem_spool_malformed_files_total Spool files skipped because they could not be read or made no sense.
# TYPE gpumem_spool_malformed_files_total counter
gpumem_spool_malformed_files_total 2
`
	names := []string{"gpumem_torch_reserved_bytes", "gpumem_torch_inactive_split_peak_bytes", "gpumem_torch_largest_free_block_ratio",
		"gpumem_torch_device_allocs_total", "gpumem_torch_process_info", "gpumem_spool_processes", "gpumem_spool_removed_files_total", "gpumem_spool_malformed_files_total"}
	if err := testutil.GatherAndCompare(e.Gatherer(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// 1 - allocated/reserved of PyTorch's own figures: 68157440/19304284160.
	if got := value(t, e, "gpumem_torch_fragmentation_ratio", "UUID", uuid1); got != 0.996469310157523 {
		t.Errorf("fragmentation = %v", got)
	}
	if got := value(t, e, "gpumem_torch_last_update_timestamp_seconds", "UUID", uuid1); got != float64(clock.Unix()-5) {
		t.Errorf("last update = %v", got)
	}
	for _, name := range []string{"5000.json", "5001.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still in the spool (%v)", name, err)
		}
	}
	// Bad files are counted and told once, not once per scrape.
	if got := value(t, e, "gpumem_spool_malformed_files_total"); got != 2 {
		t.Errorf("second scrape: %g malformed, want 2", got)
	}
	wantWarn := []string{"spool: skipping " + filepath.Join(dir, "6000.json") + ": not a spool record: unexpected end of JSON input",
		"spool: skipping " + filepath.Join(dir, "6001.json") + ": pid 6002 does not match the file name"}
	if strings.Join(*warnings, "\n") != strings.Join(wantWarn, "\n") {
		t.Errorf("warnings:\n%s\nwant\n%s", strings.Join(*warnings, "\n"), strings.Join(wantWarn, "\n"))
	}
	// A new bad version of a file counts again.
	writeFile(t, filepath.Join(dir, "6000.json"), `{"pid": 6000}`)
	if got := value(t, e, "gpumem_spool_malformed_files_total"); got != 3 {
		t.Errorf("after a rewrite: %g malformed, want 3", got)
	}
}

func TestRecordChecks(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		edit func(map[string]any)
		want string
	}{
		{func(r map[string]any) { r["rank"] = -1 }, "negative rank -1"},
		{func(r map[string]any) { r["device"] = -2 }, "negative device -2"},
		{func(r map[string]any) { delete(r, "time") }, "no time"},
		{func(r map[string]any) { r["interval"] = 1e9 }, "interval 1e+09 s out of range"},
		{func(r map[string]any) { r["pod"] = strings.Repeat("p", 300) }, "pod longer than 253 bytes or not utf-8"},
		{func(r map[string]any) {
			ms := maps.Clone(stats)
			for i := range 2000 {
				ms[fmt.Sprint("k", i)] = 1
			}
			r["memory_stats"] = ms
		}, "2"}, // 2xxx memory_stats keys, more than 1024
		{func(r map[string]any) { r["job"] = strings.Repeat("j", 200) }, "job longer than 128 bytes or not utf-8"},
		{func(r map[string]any) { delete(r, "memory_stats") }, "no memory_stats"},
		{func(r map[string]any) { r["memory_stats"] = map[string]float64{"reserved_bytes.all.current": 1} }, "memory_stats lacks allocated_bytes.all.current"},
		{func(r map[string]any) { r["largest_free_block"] = -1 }, "negative largest_free_block"},
		{func(r map[string]any) { r["pid"] = "7" }, "not a spool record: json: cannot unmarshal"},
	} {
		r := record(7, 0, uuid0)
		c.edit(r)
		b, _ := json.Marshal(r)
		path := filepath.Join(dir, "7.json")
		writeFile(t, path, string(b))
		_, _, _, err := readRecord(path)
		if err == nil || !strings.HasPrefix(err.Error(), path+": "+c.want) {
			t.Errorf("got %v, want %s: %s", err, path, c.want)
		}
	}
	writeFile(t, filepath.Join(dir, "7.json"), strings.Repeat(" ", maxSpoolFile+1))
	if _, _, _, err := readRecord(filepath.Join(dir, "7.json")); err == nil || !strings.Contains(err.Error(), "more than a spool file may have") {
		t.Errorf("a huge file: %v", err)
	}
}

func TestTextfile(t *testing.T) {
	lib, _ := twoGPUs()
	e, spool, _ := newTest(t, lib, nil)
	writeRecord(t, spool, record(4242, 0, uuid0))
	dir := t.TempDir()
	if err := e.WriteTextfile(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "gpumem.prom" {
		t.Fatalf("textfile folder holds %v, want gpumem.prom alone", entries)
	}
	info, _ := entries[0].Info()
	if info.Mode().Perm() != 0o644 {
		t.Errorf("gpumem.prom has mode %v; node_exporter must be able to read it", info.Mode().Perm())
	}
	f, err := os.Open(filepath.Join(dir, "gpumem.prom"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The file holds what a scrape shows.
	n, err := testutil.GatherAndCount(e.Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f.Name())
	lines := 0
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines++
		}
	}
	if lines != n || n < 20 {
		t.Errorf("gpumem.prom has %d series, a scrape %d", lines, n)
	}
	want := `gpumem_gpu_memory_used_bytes{UUID="GPU-00000000-1111-2222-3333-444444444444",gpu="0",hostname="node7",modelName="NVIDIA H200"} 1.07375755264e+11`
	if !strings.Contains(string(b), want+"\n") || !strings.Contains(string(b), `gpumem_torch_allocated_bytes{UUID="GPU-00000000-1111-2222-3333-444444444444",container="",gpu="0",hostname="node7",hpc_job="",namespace="",pod="",rank="3"} 6.815744e+07`) {
		t.Errorf("gpumem.prom lacks the device or allocator series:\n%s", b)
	}
}

func TestDefaultSpool(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GPUMEM_SPOOL": "/run/gpumem", "XDG_RUNTIME_DIR": "/run/user/1000"}, "/run/gpumem"},
		{map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"}, "/run/user/1000/gpumem-spool"},
		{map[string]string{}, filepath.Join(os.TempDir(), "gpumem-spool-1000")},
	} {
		if got := DefaultSpool(env(c.env), 1000); got != c.want {
			t.Errorf("%v: %s, want %s", c.env, got, c.want)
		}
	}
}

func TestUnreadableSpool(t *testing.T) {
	lib, _ := twoGPUs()
	e, dir, warnings := newTest(t, lib, nil)
	// A file where the folder should be: reading fails the same way every scrape.
	os.Remove(dir)
	writeFile(t, dir, "")
	for range 3 {
		if up := value(t, e, "gpumem_spool_up"); up != 0 {
			t.Errorf("gpumem_spool_up = %g, want 0", up)
		}
	}
	if len(*warnings) != 1 || !strings.HasPrefix((*warnings)[0], "spool: ") {
		t.Errorf("warnings = %q, want one", *warnings)
	}
	if up := value(t, e, "gpumem_nvml_up"); up != 1 {
		t.Errorf("gpumem_nvml_up = %g: the device metrics stop with the spool", up)
	}
}
