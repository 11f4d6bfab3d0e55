package probe

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

const (
	mib = 1 << 20
	gib = 1 << 30

	h200Total    = 143771 * mib // as nvidia-smi reports an H200
	h200Reserved = 552 * mib
	h200BAR1     = 256 * gib
)

// newDevice returns a mock H200 on which every query gpumem makes succeeds.
// Mock methods left nil panic, so a test that forgets one fails loudly.
func newDevice(uuid string, used uint64, compute, graphics []nvml.ProcessInfo) *mock.Device {
	return &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: h200Total, Reserved: h200Reserved, Used: used,
				Free: h200Total - h200Reserved - used}, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: h200Total, Used: h200Reserved + used,
				Free: h200Total - h200Reserved - used}, nvml.SUCCESS
		},
		GetBAR1MemoryInfoFunc: func() (nvml.BAR1Memory, nvml.Return) {
			return nvml.BAR1Memory{Bar1Total: h200BAR1, Bar1Used: 48 * mib,
				Bar1Free: h200BAR1 - 48*mib}, nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 87, Memory: 41}, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return compute, nvml.SUCCESS
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return graphics, nvml.SUCCESS
		},
	}
}

// newLib returns a mock NVML with the given devices and a driver that
// exports nvmlDeviceGetMemoryInfo_v2.
func newLib(devs ...*mock.Device) *mock.Interface {
	return &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 13000, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
		},
	}
}

// twoGPUs is the golden scenario: a yellow and a red H200 with processes,
// one of which does compute and graphics and one whose memory the driver
// cannot attribute.
func twoGPUs() (*mock.Interface, []*mock.Device) {
	devs := []*mock.Device{
		newDevice("GPU-00000000-1111-2222-3333-444444444444", 110*gib,
			[]nvml.ProcessInfo{{Pid: 4300, UsedGpuMemory: 10 * gib}, {Pid: 4242, UsedGpuMemory: 100 * gib}},
			[]nvml.ProcessInfo{{Pid: 4300, UsedGpuMemory: 10 * gib}}),
		newDevice("GPU-55555555-6666-7777-8888-999999999999", 135*gib,
			[]nvml.ProcessInfo{{Pid: 4243, UsedGpuMemory: 135*gib - 300*mib},
				{Pid: 4999, UsedGpuMemory: math.MaxUint64}, {Pid: 5001, UsedGpuMemory: 300 * mib}},
			nil),
	}
	return newLib(devs...), devs
}

func procNames(pid uint32) string {
	return map[uint32]string{4242: "python3", 4243: "python3", 4300: "pt_main_thread", 5001: "nccl-tests"}[pid]
}

func TestProbeTwoGPUs(t *testing.T) {
	lib, devs := twoGPUs()
	p := Prober{Lib: lib, ProcName: procNames}
	sys, err := p.Probe()
	if err != nil {
		t.Fatal(err)
	}
	want := &System{
		DriverVersion: "580.65.06",
		CUDAVersion:   "13.0",
		GPUs: []GPU{
			{
				Index: 0, Name: "NVIDIA H200", UUID: "GPU-00000000-1111-2222-3333-444444444444",
				MemoryTotal: h200Total, MemoryUsed: 110 * gib, MemoryFree: h200Total - h200Reserved - 110*gib,
				MemoryReserved: h200Reserved, BAR1Total: h200BAR1, BAR1Used: 48 * mib, UtilGPU: 87, UtilMemory: 41,
				Processes: []Process{
					{PID: 4242, Name: "python3", UsedMemory: 100 * gib},
					{PID: 4300, Name: "pt_main_thread", UsedMemory: 10 * gib}, // compute+graphics, once
				},
			},
			{
				Index: 1, Name: "NVIDIA H200", UUID: "GPU-55555555-6666-7777-8888-999999999999",
				MemoryTotal: h200Total, MemoryUsed: 135 * gib, MemoryFree: h200Total - h200Reserved - 135*gib,
				MemoryReserved: h200Reserved, BAR1Total: h200BAR1, BAR1Used: 48 * mib, UtilGPU: 87, UtilMemory: 41,
				Processes: []Process{
					{PID: 4243, Name: "python3", UsedMemory: 135*gib - 300*mib},
					{PID: 5001, Name: "nccl-tests", UsedMemory: 300 * mib},
					{PID: 4999, Name: "", UsedMemory: 0}, // NVML_VALUE_NOT_AVAILABLE
				},
			},
		},
	}
	if !reflect.DeepEqual(sys, want) {
		t.Errorf("Probe() =\n%+v\nwant\n%+v", sys, want)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times, want 1", n)
	}
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
	if n := len(devs[0].GetMemoryInfoCalls()); n != 0 {
		t.Errorf("v1 memory info called %d times although v2 works", n)
	}
}

func TestProbeNoDriver(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_GPU_NOT_FOUND} {
		t.Run(ret.String(), func(t *testing.T) {
			// Only Init is set: any other call panics, as it would kill
			// the process with the real library.
			lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
			sys, err := Probe(lib)
			if !errors.Is(err, ErrNoDriver) || !errors.Is(err, ret) {
				t.Fatalf("Probe() error = %v, want ErrNoDriver wrapping %v", err, ret)
			}
			if sys != nil {
				t.Errorf("Probe() = %+v, want nil", sys)
			}
			if n := len(lib.InitCalls()); n != 1 {
				t.Errorf("Init called %d times, want 1", n)
			}
		})
	}
}

func TestProbeInitError(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }}
	_, err := Probe(lib)
	if err == nil || errors.Is(err, ErrNoDriver) || !errors.Is(err, nvml.ERROR_NO_PERMISSION) {
		t.Fatalf("Probe() error = %v, want an init error other than ErrNoDriver", err)
	}
	if !strings.HasPrefix(err.Error(), "initializing nvml: ") {
		t.Errorf("error %q does not say what failed", err)
	}
}

// TestProbeUnsupported covers a driver and device that lack optional
// queries: those fields stay zero and the probe succeeds.
func TestProbeUnsupported(t *testing.T) {
	dev := newDevice("GPU-a", 1*gib, nil, nil)
	dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED }
	dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	dev.GetBAR1MemoryInfoFunc = func() (nvml.BAR1Memory, nvml.Return) { return nvml.BAR1Memory{}, nvml.ERROR_NOT_SUPPORTED }
	dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_FUNCTION_NOT_FOUND }
	lib := newLib(dev)
	lib.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }

	sys, err := Probe(lib)
	if err != nil {
		t.Fatal(err)
	}
	want := GPU{
		Name: "NVIDIA H200", UUID: "GPU-a",
		// v1: Used includes the reserved memory, which is not known apart.
		MemoryTotal: h200Total, MemoryUsed: h200Reserved + 1*gib, MemoryFree: h200Total - h200Reserved - 1*gib,
		Processes: []Process{},
	}
	if len(sys.GPUs) != 1 || !reflect.DeepEqual(sys.GPUs[0], want) {
		t.Errorf("GPUs = %+v, want [%+v]", sys.GPUs, want)
	}
	if sys.CUDAVersion != "" {
		t.Errorf("CUDAVersion = %q, want empty", sys.CUDAVersion)
	}
}

// TestProbeNoV2Symbol checks that the v2 memory call is never made when the
// driver does not export it: with the real library that would be fatal.
func TestProbeNoV2Symbol(t *testing.T) {
	dev := newDevice("GPU-a", 1*gib, nil, nil)
	dev.GetMemoryInfo_v2Func = nil // panics if called
	lib := newLib(dev)
	lib.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(name string) error {
			return errors.New("undefined symbol: " + name)
		}}
	}
	sys, err := Probe(lib)
	if err != nil {
		t.Fatal(err)
	}
	if g := sys.GPUs[0]; g.MemoryUsed != h200Reserved+1*gib || g.MemoryReserved != 0 {
		t.Errorf("memory used/reserved = %d/%d, want v1 values %d/0", g.MemoryUsed, g.MemoryReserved, h200Reserved+1*gib)
	}
}

func TestProbeDeviceError(t *testing.T) {
	lib, devs := twoGPUs()
	devs[1].GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	sys, err := Prober{Lib: lib, ProcName: procNames}.Probe()
	if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) || !strings.HasPrefix(err.Error(), "gpu 1: getting uuid: ") {
		t.Fatalf("Probe() error = %v, want gpu 1 uuid error", err)
	}
	if sys != nil {
		t.Errorf("Probe() = %+v, want nil on error", sys)
	}
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times after an error, want 1", n)
	}
}

func TestProbeMemoryV2Error(t *testing.T) {
	lib, devs := twoGPUs()
	devs[0].GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_UNKNOWN }
	_, err := Probe(lib)
	if !errors.Is(err, nvml.ERROR_UNKNOWN) || !strings.Contains(err.Error(), "gpu 0: getting memory info v2") {
		t.Fatalf("Probe() error = %v, want gpu 0 memory error", err)
	}
}

func TestProbeShutdownError(t *testing.T) {
	lib, _ := twoGPUs()
	lib.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	sys, err := Prober{Lib: lib, ProcName: procNames}.Probe()
	if !errors.Is(err, nvml.ERROR_UNKNOWN) || sys != nil {
		t.Fatalf("Probe() = %v, %v; want nil and a shutdown error", sys, err)
	}
}

func TestProbeNoGPUs(t *testing.T) {
	sys, err := Probe(newLib())
	if err != nil {
		t.Fatal(err)
	}
	if sys.GPUs == nil || len(sys.GPUs) != 0 {
		t.Errorf("GPUs = %#v, want an empty, non-nil slice", sys.GPUs)
	}
}

// TestDefault runs the real go-nvml library. With a library path that does
// not exist it must fail cleanly, and so must Default on a machine without a
// driver (CI): reaching the end of the test shows that no NVML call was made
// without a loaded library. Where a driver exists, the numbers must add up.
func TestDefault(t *testing.T) {
	_, err := Probe(nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")))
	if !errors.Is(err, ErrNoDriver) || !errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Fatalf("Probe(missing library) error = %v, want ErrNoDriver", err)
	}

	sys, err := Probe(Default())
	if errors.Is(err, ErrNoDriver) {
		t.Logf("no driver: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("Probe(Default()) error = %v, want nil or ErrNoDriver", err)
	}
	var buf strings.Builder
	if err := WriteTable(&buf, sys, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("driver present:\n%s", buf.String())
	if sys.DriverVersion == "" || len(sys.GPUs) == 0 {
		t.Errorf("driver %q with %d gpus, want a version and at least one gpu", sys.DriverVersion, len(sys.GPUs))
	}
	for _, g := range sys.GPUs {
		if g.Name == "" || !strings.HasPrefix(g.UUID, "GPU-") {
			t.Errorf("gpu %d: name %q, uuid %q", g.Index, g.Name, g.UUID)
		}
		if sum := g.MemoryReserved + g.MemoryUsed + g.MemoryFree; g.MemoryTotal == 0 || sum != g.MemoryTotal {
			t.Errorf("gpu %d: reserved %d + used %d + free %d = %d, want total %d",
				g.Index, g.MemoryReserved, g.MemoryUsed, g.MemoryFree, sum, g.MemoryTotal)
		}
	}
}

func TestCUDAVersion(t *testing.T) {
	for v, want := range map[int]string{13000: "13.0", 12040: "12.4", 12090: "12.9", 11080: "11.8", 0: "", -1: ""} {
		if got := cudaVersion(v); got != want {
			t.Errorf("cudaVersion(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestProcComm(t *testing.T) {
	want, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip("no procfs:", err)
	}
	if got := procComm(uint32(os.Getpid())); got+"\n" != string(want) || got == "" {
		t.Errorf("procComm(self) = %q, want %q", got, strings.TrimSpace(string(want)))
	}
	if got := procComm(math.MaxUint32); got != "" {
		t.Errorf("procComm(no such pid) = %q, want empty", got)
	}
}

func TestNoGPU(t *testing.T) {
	for _, tc := range []struct {
		sys  *System
		err  error
		want string
	}{
		{nil, fmt.Errorf("%w: %w", ErrNoDriver, errors.New("libnvidia-ml.so.1 not found")), "no nvidia driver found"},
		{nil, errors.New("device 0: unknown error"), "probing gpus: device 0: unknown error"},
		{&System{}, nil, "no gpu found"},
		{&System{GPUs: []GPU{{}}}, nil, ""},
	} {
		if got := NoGPU(tc.sys, tc.err); got != tc.want {
			t.Errorf("NoGPU(%v, %v) = %q, want %q", tc.sys, tc.err, got, tc.want)
		}
	}
}
