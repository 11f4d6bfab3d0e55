package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// exporterBuf is a stderr the exporter's goroutines and the test share.
type exporterBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *exporterBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *exporterBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// exporterGPU is one mock H200 with 2 GiB used.
func exporterGPU() nvml.Interface {
	dev := &mock.Device{
		GetIndexFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		GetNameFunc:  func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
		GetUUIDFunc:  func() (string, nvml.Return) { return "GPU-0", nvml.SUCCESS },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED
		},
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 143771 << 20, Reserved: 552 << 20, Used: 2 << 30,
				Free: (143771 - 552 - 2048) << 20}, nvml.SUCCESS
		},
		GetBAR1MemoryInfoFunc:           func() (nvml.BAR1Memory, nvml.Return) { return nvml.BAR1Memory{}, nvml.SUCCESS },
		GetUtilizationRatesFunc:         func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.SUCCESS },
		GetComputeRunningProcessesFunc:  func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
	}
	return &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 13000, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc:      func(string) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
		},
	}
}

// startExporter runs `gpumem exporter args...` until the returned stop is
// called; stop gives its exit code.
func startExporter(t *testing.T, args ...string) (stderr *exporterBuf, stop func() int) {
	t.Helper()
	stderr = &exporterBuf{}
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: stderr,
		getenv: func(string) string { return "" }, nvml: exporterGPU()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		root := newRootCmd(a)
		root.SetArgs(append([]string{"exporter"}, args...))
		done <- printError(stderr, root.ExecuteContext(ctx))
	}()
	return stderr, func() int { cancel(); return <-done }
}

// waitFor polls until cond holds, for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestExporterServes(t *testing.T) {
	spool, textfile := t.TempDir(), t.TempDir()
	pid := os.Getpid() // alive for as long as the test runs
	rec := fmt.Sprintf(`{"pid": %d, "rank": 0, "device": 0, "uuid": "GPU-0", "time": %d, "memory_stats": {
		"reserved_bytes.all.current": 4194304, "allocated_bytes.all.current": 1048576,
		"active_bytes.all.current": 1048576, "inactive_split_bytes.all.current": 0, "num_ooms": 2}}`, pid, time.Now().Unix())
	os.WriteFile(filepath.Join(spool, fmt.Sprintf("%d.json", pid)), []byte(rec), 0o600)
	os.WriteFile(filepath.Join(spool, "99.json"), []byte("not json"), 0o600)

	stderr, stop := startExporter(t, "--listen", "127.0.0.1:0", "--spool", spool, "--textfile", textfile, "--interval", "1s")
	addr := regexp.MustCompile(`serving http://([0-9.:]+)/metrics`)
	waitFor(t, "the serving line", func() bool { return addr.MatchString(stderr.String()) })
	url := "http://" + addr.FindStringSubmatch(stderr.String())[1] + "/metrics"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		fmt.Sprintf(`gpumem_gpu_memory_used_bytes{UUID="GPU-0",gpu="0",hostname="%s",modelName="NVIDIA H200"} 2.147483648e+09`, hostname(t)),
		fmt.Sprintf(`gpumem_torch_reserved_bytes{UUID="GPU-0",container="",gpu="0",hostname="%s",hpc_job="",namespace="",pod="",rank="0"} 4.194304e+06`, hostname(t)),
		fmt.Sprintf(`gpumem_torch_fragmentation_ratio{UUID="GPU-0",container="",gpu="0",hostname="%s",hpc_job="",namespace="",pod="",rank="0"} 0.75`, hostname(t)),
		fmt.Sprintf(`gpumem_torch_ooms_total{UUID="GPU-0",container="",gpu="0",hostname="%s",hpc_job="",namespace="",pod="",rank="0"} 2`, hostname(t)),
		fmt.Sprintf(`gpumem_torch_process_info{UUID="GPU-0",container="",gpu="0",hostname="%s",hpc_job="",namespace="",pid="%d",pod="",rank="0"} 1`, hostname(t), pid),
		"gpumem_spool_malformed_files_total 1",
		"gpumem_nvml_up 1",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	prom := filepath.Join(textfile, "gpumem.prom")
	waitFor(t, "gpumem.prom", func() bool { _, err := os.Stat(prom); return err == nil })
	if code := stop(); code != exitOK {
		t.Errorf("exit %d after a stop, want 0; stderr:\n%s", code, stderr)
	}
	// One warning for the bad file however often it was read.
	if n := strings.Count(stderr.String(), "gpumem: warning: spool: skipping "+filepath.Join(spool, "99.json")); n != 1 {
		t.Errorf("%d warnings about 99.json, want 1; stderr:\n%s", n, stderr)
	}
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestExporterTextfileOnly(t *testing.T) {
	textfile := t.TempDir()
	stderr, stop := startExporter(t, "--spool", t.TempDir(), "--textfile", textfile, "--interval", "1s")
	prom := filepath.Join(textfile, "gpumem.prom")
	waitFor(t, "gpumem.prom", func() bool { _, err := os.Stat(prom); return err == nil })
	if code := stop(); code != exitOK {
		t.Errorf("exit %d, want 0", code)
	}
	if strings.Contains(stderr.String(), "serving") {
		t.Errorf("--textfile alone opened a port:\n%s", stderr)
	}
	b, _ := os.ReadFile(prom)
	if !strings.Contains(string(b), "gpumem_gpu_memory_used_bytes{") || strings.Contains(string(b), "DCGM_FI_") {
		t.Errorf("gpumem.prom lacks gpumem_gpu_memory_used_bytes, or has DCGM_FI_ without --dcgm-compat:\n%s", b)
	}
	// with --dcgm-compat, dcgm-exporter's series too
	stderr, stop = startExporter(t, "--spool", t.TempDir(), "--textfile", textfile, "--interval", "1s", "--dcgm-compat")
	os.Remove(prom)
	waitFor(t, "gpumem.prom", func() bool { _, err := os.Stat(prom); return err == nil })
	stop()
	if b, _ := os.ReadFile(prom); !strings.Contains(string(b), `DCGM_FI_DEV_FB_USED{UUID="GPU-0",device="nvidia0",gpu="0",`) {
		t.Errorf("--dcgm-compat: gpumem.prom lacks DCGM_FI_DEV_FB_USED:\n%s\n%s", b, stderr)
	}
}

func TestExporterBadFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o600)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--interval", "10ms"}, exitUsage, "gpumem: error: --interval 10ms: must be at least 1s\n"},
		{[]string{"--textfile", file}, exitUsage, "gpumem: error: --textfile " + file + ": not a folder\n"},
		{[]string{"--listen", "256.0.0.1:1"}, exitFailure, "gpumem: error: --listen 256.0.0.1:1: listen tcp: "},
		{[]string{"extra"}, exitUsage, "gpumem: error: unknown command \"extra\" for \"gpumem exporter\"\n"},
	} {
		stderr, stop := startExporter(t, append(c.args, "--spool", t.TempDir())...)
		waitFor(t, "an error", func() bool { return strings.Contains(stderr.String(), "error") })
		if code := stop(); code != c.code || !strings.HasPrefix(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d, %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// The daemon asked to stop, by SIGINT (Ctrl-C) or SIGTERM, exits 0, as
// its help and the README say.
func TestExporterStopsWithZero(t *testing.T) {
	exe := gpumemExe(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(exe, "exporter", "--listen", "127.0.0.1:0", "--spool", t.TempDir())
		stderr := &exporterBuf{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the serving line", func() bool { return strings.Contains(stderr.String(), "serving http://") })
		cmd.Process.Signal(sig)
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%v: exit %d, want 0; stderr:\n%s", sig, code, stderr)
		}
	}
}
