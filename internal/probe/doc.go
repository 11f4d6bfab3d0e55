// Package probe reads the state of the NVIDIA GPUs on this machine through
// NVML (libnvidia-ml.so.1): memory, BAR1 aperture, utilization and the
// processes holding device memory. It converts NVML's types into its own
// plain structs so that the rest of gpumem never imports go-nvml.
//
// # Memory terms
//
// NVML reports device memory in two ways. Newer drivers implement
// nvmlDeviceGetMemoryInfo_v2, which splits memory three ways:
//
//	Total = Reserved + Used + Free
//
// where Reserved is what the driver and firmware set aside and Used is what
// processes (and their CUDA contexts) have allocated. Older drivers only have
// the v1 call, whose Used includes the reserved part. [Probe] uses v2 when
// the loaded driver exports it and falls back to v1 otherwise; in that case
// [GPU.MemoryReserved] is 0 and [GPU.MemoryUsed] includes it. nvidia-smi
// follows the same rule, so the numbers agree with its "Used" column.
//
// # Missing driver, missing features
//
// On a machine without the driver, [Probe] returns [ErrNoDriver]. It calls
// nothing but Init in that case: go-nvml binds NVML symbols only when Init
// loads the library, and any other call before that kills the process.
// Queries a GPU or driver does not support (ERROR_NOT_SUPPORTED) leave the
// corresponding field zero rather than failing the whole probe.
//
// # Process names
//
// NVML reports only process IDs. Names come from /proc/<pid>/comm, read
// through [Prober.ProcName]. Inside a container with its own PID namespace
// the IDs NVML reports are host IDs, so a name there may be missing or may
// belong to an unrelated process.
//
// # Output
//
// [WriteTable] renders a [System] for people and [WriteJSON] for scripts.
package probe
