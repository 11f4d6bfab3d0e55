package main

import (
	"bytes"
	"context"
	"encoding/json"
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
