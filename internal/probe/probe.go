package probe

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoDriver is returned by [Probe] when NVML cannot be used at all: the
// library is not installed, the kernel driver is not loaded, or the driver
// finds no GPU. The returned error wraps both ErrNoDriver and the
// [nvml.Return] that Init gave.
var ErrNoDriver = errors.New("no nvidia driver found")

// System is the state of all GPUs at one moment.
type System struct {
	DriverVersion string `json:"driver_version"` // e.g. "580.65.06"
	CUDAVersion   string `json:"cuda_version"`   // highest CUDA version the driver supports, e.g. "13.0"
	GPUs          []GPU  `json:"gpus"`           // in NVML index order
}

// GPU is one device. Byte counts are exact, as NVML reports them; a field
// the driver does not support is zero.
type GPU struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	UUID  string `json:"uuid"`

	// MemoryTotal = MemoryReserved + MemoryUsed + MemoryFree. MemoryReserved
	// is known only from drivers with nvmlDeviceGetMemoryInfo_v2; otherwise
	// it is 0 and MemoryUsed includes it.
	MemoryTotal    uint64 `json:"memory_total_bytes"`
	MemoryUsed     uint64 `json:"memory_used_bytes"`
	MemoryFree     uint64 `json:"memory_free_bytes"`
	MemoryReserved uint64 `json:"memory_reserved_bytes"`

	// BAR1 is the window through which the CPU and peers map device memory.
	BAR1Total uint64 `json:"bar1_total_bytes"`
	BAR1Used  uint64 `json:"bar1_used_bytes"`

	// Percent of the last sample period (1/6 s to 1 s, depending on the
	// GPU) during which a kernel ran, or device memory was read or written.
	UtilGPU    uint32 `json:"utilization_gpu_percent"`
	UtilMemory uint32 `json:"utilization_memory_percent"`

	// Processes with a context on the device, largest first.
	Processes []Process `json:"processes"`
}

// Process is one process using a GPU.
type Process struct {
	PID  uint32 `json:"pid"`
	Name string `json:"name"` // "" when unknown
	// UsedMemory is 0 when the driver cannot attribute memory to processes
	// (for example without privileges, or in some virtualized setups).
	UsedMemory uint64 `json:"used_memory_bytes"`
}

// A Prober queries NVML. The zero value queries the real library and reads
// process names from /proc.
type Prober struct {
	// Lib is the NVML library to query; nil means [Default].
	Lib nvml.Interface
	// ProcName returns the command name of a process, or "" if unknown;
	// nil means reading /proc/<pid>/comm.
	ProcName func(pid uint32) string
}

// Default returns the real NVML library, loaded from libnvidia-ml.so.1 on
// the first Init.
func Default() nvml.Interface { return nvml.New() }

// NoGPU says why a probe that returned sys and err found no usable GPU
// ("no nvidia driver found", "no gpu found", or its error), or "" when
// one is usable.
func NoGPU(sys *System, err error) string {
	switch {
	case errors.Is(err, ErrNoDriver):
		return ErrNoDriver.Error()
	case err != nil:
		return "probing gpus: " + err.Error()
	case sys == nil || len(sys.GPUs) == 0:
		return "no gpu found"
	}
	return ""
}

// Probe is shorthand for a [Prober] with the given library and default
// process names.
func Probe(lib nvml.Interface) (*System, error) {
	return Prober{Lib: lib}.Probe()
}

// memoryInfoV2 is the NVML entry point that reports reserved memory. Older
// drivers lack it, and calling a missing symbol kills the process, so its
// presence is checked before use.
const memoryInfoV2 = "nvmlDeviceGetMemoryInfo_v2"

// notAvailable is NVML_VALUE_NOT_AVAILABLE in an unsigned field.
const notAvailable = math.MaxUint64

// Probe initializes NVML, reads every GPU and shuts NVML down again. If Init
// fails, nothing else is called: without a loaded library any other NVML
// call would kill the process.
func (p Prober) Probe() (sys *System, err error) {
	lib := p.Lib
	if lib == nil {
		lib = Default()
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		switch ret {
		case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_GPU_NOT_FOUND:
			return nil, fmt.Errorf("%w: %w", ErrNoDriver, ret)
		}
		return nil, fmt.Errorf("initializing nvml: %w", ret)
	}
	defer func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS && err == nil {
			sys, err = nil, fmt.Errorf("shutting down nvml: %w", ret)
		}
	}()

	sys = &System{GPUs: []GPU{}}
	if sys.DriverVersion, err = get("driver version", lib.SystemGetDriverVersion); err != nil {
		return nil, err
	}
	cuda, err := get("cuda driver version", lib.SystemGetCudaDriverVersion)
	if err != nil {
		return nil, err
	}
	sys.CUDAVersion = cudaVersion(cuda)

	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting gpus: %w", ret)
	}
	hasV2 := lib.Extensions().LookupSymbol(memoryInfoV2) == nil
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu %d: getting handle: %w", i, ret)
		}
		g, err := p.device(dev, hasV2)
		if err != nil {
			return nil, fmt.Errorf("gpu %d: %w", i, err)
		}
		g.Index = i
		sys.GPUs = append(sys.GPUs, g)
	}
	return sys, nil
}

// device reads one GPU; hasV2 says whether the driver exports memoryInfoV2.
func (p Prober) device(dev nvml.Device, hasV2 bool) (GPU, error) {
	var g GPU
	var err error
	if g.Name, err = get("name", dev.GetName); err != nil {
		return g, err
	}
	if g.UUID, err = get("uuid", dev.GetUUID); err != nil {
		return g, err
	}
	if err := memory(dev, hasV2, &g); err != nil {
		return g, err
	}
	bar1, err := get("bar1 memory info", dev.GetBAR1MemoryInfo)
	if err != nil {
		return g, err
	}
	g.BAR1Total, g.BAR1Used = bar1.Bar1Total, bar1.Bar1Used
	util, err := get("utilization", dev.GetUtilizationRates)
	if err != nil {
		return g, err
	}
	g.UtilGPU, g.UtilMemory = util.Gpu, util.Memory
	g.Processes, err = p.processes(dev)
	return g, err
}

// memory fills the memory fields, from the v2 call when the driver has it
// and supports it for this device, else from v1.
func memory(dev nvml.Device, hasV2 bool, g *GPU) error {
	if hasV2 {
		m, ret := dev.GetMemoryInfo_v2()
		switch {
		case ret == nvml.SUCCESS:
			g.MemoryTotal, g.MemoryUsed, g.MemoryFree, g.MemoryReserved = m.Total, m.Used, m.Free, m.Reserved
			return nil
		case !unsupported(ret) && ret != nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
			return fmt.Errorf("getting memory info v2: %w", ret)
		}
	}
	m, err := get("memory info", dev.GetMemoryInfo)
	g.MemoryTotal, g.MemoryUsed, g.MemoryFree = m.Total, m.Used, m.Free
	return err
}

// processes lists compute and graphics processes. A process doing both
// appears in both NVML lists with the same memory; it is reported once.
func (p Prober) processes(dev nvml.Device) ([]Process, error) {
	compute, err := get("compute processes", dev.GetComputeRunningProcesses)
	if err != nil {
		return nil, err
	}
	graphics, err := get("graphics processes", dev.GetGraphicsRunningProcesses)
	if err != nil {
		return nil, err
	}
	name := p.ProcName
	if name == nil {
		name = procComm
	}
	procs := []Process{}
	seen := make(map[uint32]int) // pid → index in procs
	for _, info := range slices.Concat(compute, graphics) {
		used := info.UsedGpuMemory
		if used == notAvailable {
			used = 0
		}
		if i, ok := seen[info.Pid]; ok {
			procs[i].UsedMemory = max(procs[i].UsedMemory, used)
			continue
		}
		seen[info.Pid] = len(procs)
		procs = append(procs, Process{PID: info.Pid, Name: name(info.Pid), UsedMemory: used})
	}
	slices.SortFunc(procs, func(a, b Process) int {
		return cmp.Or(cmp.Compare(b.UsedMemory, a.UsedMemory), cmp.Compare(a.PID, b.PID))
	})
	return procs, nil
}

// get calls an NVML query. A query the driver or device does not support
// yields the zero value and no error.
func get[T any](what string, query func() (T, nvml.Return)) (T, error) {
	v, ret := query()
	if ret == nvml.SUCCESS {
		return v, nil
	}
	var zero T
	if unsupported(ret) {
		return zero, nil
	}
	return zero, fmt.Errorf("getting %s: %w", what, ret)
}

func unsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// cudaVersion formats NVML's encoding of a CUDA version, 1000*major +
// 10*minor (13000 → "13.0"); 0 means unknown.
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
}

// procComm reads a process's command name from procfs.
func procComm(pid uint32) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "" // exited, or not visible from this PID namespace
	}
	return strings.TrimSuffix(string(b), "\n")
}
