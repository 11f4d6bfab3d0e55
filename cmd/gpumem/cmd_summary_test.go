package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// summaryWith runs gpumem summary against a fake NVML.
func summaryWith(t *testing.T, lib nvml.Interface, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, nvml: lib}
	root := newRootCmd(a)
	root.SetArgs(append([]string{"summary"}, args...))
	root.SetOut(&out)
	root.SetErr(&errb)
	code := printError(&errb, root.Execute())
	return out.String(), errb.String(), code
}

// --watch without a driver: one clear message, exit 3 (issue #16).
func TestSummaryWatchNoDriver(t *testing.T) {
	out, errs, code := summaryWith(t, noDriver(), "--watch")
	if code != exitNoGPU || out != "" ||
		errs != "gpumem: error: --watch: no nvidia driver found; it shows live GPUs (run without --watch for the simulated device)\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func noDriver() nvml.Interface {
	return &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
}

func oneH200() nvml.Interface {
	const gib = 1 << 30
	dev := &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-00000000-1111-2222-3333-444444444444", nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 140 * gib, Reserved: gib / 2, Used: 20 * gib, Free: 140*gib - gib/2 - 20*gib}, nvml.SUCCESS
		},
		GetBAR1MemoryInfoFunc: func() (nvml.BAR1Memory, nvml.Return) {
			return nvml.BAR1Memory{Bar1Total: 256 * gib, Bar1Used: gib}, nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 50, Memory: 20}, nvml.SUCCESS },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 20 * gib}}, nvml.SUCCESS
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
	}
	return &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "580.159.04", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 13000, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
		},
	}
}

// Without a driver (CI): a notice on stderr, and the summary carries on
// with the fragmentation demo on the simulated device.
func TestSummaryWithoutGPU(t *testing.T) {
	out, errs, code := summaryWith(t, noDriver())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "no nvidia driver found: showing the simulated device") {
		t.Errorf("stderr %q", errs)
	}
	for _, want := range []string{"Allocator (sim backend) after frag-demo", "Fragmentation", "39.3%"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	// the real library on a machine without a driver behaves the same
	if _, errs, code := gm(t, "summary", "--backend", "sim"); code != 0 {
		t.Errorf("real NVML: exit %d: %s", code, errs)
	}
}

func TestSummaryRequireGPU(t *testing.T) {
	_, errs, code := summaryWith(t, noDriver(), "--require-gpu")
	if code != exitNoGPU || !strings.HasPrefix(errs, "gpumem: error: no nvidia driver found") {
		t.Errorf("exit %d, stderr %q; want exit 3", code, errs)
	}
}

func TestSummaryDevices(t *testing.T) {
	out, errs, code := summaryWith(t, oneH200(), "--backend", "sim", "--trace", sweepFixture("seed_frag.pickle"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"Driver 580.159.04  CUDA 13.0", "NVIDIA H200", "4242", "after " + sweepFixture("seed_frag.pickle")} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	out, _, code = summaryWith(t, oneH200(), "--backend", "sim", "-o", "json")
	var doc struct {
		Devices struct {
			GPUs []struct {
				UUID string `json:"uuid"`
			} `json:"gpus"`
		} `json:"devices"`
		Allocator struct {
			MemoryStats map[string]int64 `json:"memory_stats"`
		} `json:"allocator"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("exit %d, %v:\n%s", code, err, out)
	}
	if len(doc.Devices.GPUs) != 1 || doc.Devices.GPUs[0].UUID != "GPU-00000000-1111-2222-3333-444444444444" ||
		doc.Allocator.MemoryStats["reserved_bytes.all.peak"] != 44<<20 {
		t.Errorf("json %+v", doc)
	}
}

// --backend cuda without a driver is a clear error with a hint.
func TestSummaryCUDAWithoutDriver(t *testing.T) {
	_, errs, code := summaryWith(t, noDriver(), "--backend", "cuda")
	if code != exitFailure || !strings.Contains(errs, "no usable cuda device") || !strings.Contains(errs, "gpumem: hint: ") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// --watch redraws the device table until the context ends (Ctrl-C).
func TestSummaryWatch(t *testing.T) {
	var out, errb bytes.Buffer
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, nvml: oneH200()}
	root := newRootCmd(a)
	root.SetArgs([]string{"summary", "--watch=10ms"})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "NVIDIA H200"); n < 2 {
		t.Errorf("the table was drawn %d times in 100 ms at 10 ms intervals", n)
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("escape codes written to a buffer that is not a terminal")
	}
}

// summary --trace over the ranks of a job: the rank table, the worst
// rank's allocator, and in JSON "ranks" beside it; never the real card.
func TestSummaryRanks(t *testing.T) {
	glob := sweepFixture("ddp/ddp_gpt2.rank*.pickle")
	out, errs, code := summaryWith(t, oneH200(), "--trace", glob)
	for _, want := range []string{"Allocator (sim backend) after 2 ranks", "worst rank  0", "operations  6,966 replayed"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("summary lacks %q (exit %d, %s):\n%s", want, code, errs, out)
		}
	}
	out, _, code = summaryWith(t, oneH200(), "--trace", glob, "-o", "json")
	var doc struct {
		Allocator struct {
			Source string `json:"source"`
		} `json:"allocator"`
		Ranks struct {
			Runs  []json.RawMessage `json:"runs"`
			Worst int               `json:"worst"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Ranks.Runs) != 2 ||
		!strings.HasSuffix(doc.Allocator.Source, "rank0.pickle") {
		t.Errorf("exit %d, %v: %+v", code, err, doc)
	}
	if _, errs, code := summaryWith(t, oneH200(), "--trace", glob, "--backend", "cuda"); code != exitUsage || !strings.Contains(errs, "a set of ranks replays on the simulated device") {
		t.Errorf("--backend cuda over ranks: exit %d, %s", code, errs)
	}
}

// h200With is the fake H200 of oneH200 with the given processes on it.
func h200With(procs ...nvml.ProcessInfo) nvml.Interface {
	lib := oneH200().(*mock.Interface)
	dev, _ := lib.DeviceGetHandleByIndex(0)
	dev.(*mock.Device).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS }
	return lib
}

// publishing is a spool folder in which process pid published reserved
// bytes, and the fake H200 with pid on it using used bytes, beside a
// process 4243 that publishes nothing.
func publishing(t *testing.T, pid int, used, reserved uint64) (nvml.Interface, string) {
	t.Helper()
	spool := t.TempDir()
	rec := fmt.Sprintf(`{"pid": %d, "rank": null, "device": 0, "uuid": "GPU-00000000-1111-2222-3333-444444444444",
		"time": %d, "interval": 15, "memory_stats": {"reserved_bytes.all.current": %d, "allocated_bytes.all.current": 0,
		"active_bytes.all.current": 0, "inactive_split_bytes.all.current": 0}}`, pid, time.Now().Unix(), reserved)
	if err := os.WriteFile(filepath.Join(spool, fmt.Sprint(pid)+".json"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	return h200With(nvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: used}, nvml.ProcessInfo{Pid: 4243, UsedGpuMemory: 512 << 20}), spool
}

// Each process on a GPU beside its caching allocator (issue #16): this
// test's own process publishes to a spool with 19.5 GiB reserved of its
// 20 GiB, so 512 MiB are context and libraries; the other publishes
// nothing and says so. A malformed spool file is a warning.
func TestSummaryProcesses(t *testing.T) {
	const gib = 1 << 30
	me := os.Getpid()
	lib, spool := publishing(t, me, 20*gib, 19*gib+gib/2)
	if err := os.WriteFile(filepath.Join(spool, "77.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	out, errs, code := summaryWith(t, lib, "--backend", "sim", "--spool", spool)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	flat := strings.Join(strings.Fields(out), " ") // the columns' widths aside
	for _, want := range []string{
		"│ GPU │ PID │ Name │ NVML used │ Allocator reserved │ Rest │",
		fmt.Sprintf("│ 0 │ %d │ gpumem.test │ 20.00 GiB │ 19.50 GiB │ 512.00 MiB │", me),
		"│ 0 │ 4243 │ - │ 512.00 MiB │ no allocator stats (process not publishing to spool) │ - │",
		"rest = NVML used − allocator reserved: context + libraries (not the caching allocator),",
		"allocator stats come from the spool " + spool,
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "gpumem: warning: spool: skipping "+filepath.Join(spool, "77.json")+": not a spool record") {
		t.Errorf("stderr %q", errs)
	}

	out, _, code = summaryWith(t, lib, "--backend", "sim", "--spool", spool, "-o", "json")
	var doc struct {
		Processes []struct {
			PID      uint32  `json:"pid"`
			Used     uint64  `json:"used_memory_bytes"`
			Reserved *uint64 `json:"allocator_reserved_bytes"`
			Rest     *int64  `json:"rest_bytes"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Processes) != 2 {
		t.Fatalf("exit %d, %v:\n%s", code, err, out)
	}
	p, q := doc.Processes[0], doc.Processes[1]
	if p.PID != uint32(me) || p.Used != 20*gib || p.Reserved == nil || *p.Reserved != 19*gib+gib/2 || p.Rest == nil || *p.Rest != gib/2 ||
		q.PID != 4243 || q.Reserved != nil || q.Rest != nil {
		t.Errorf("processes %s", out[strings.Index(out, `"processes"`):])
	}
}
