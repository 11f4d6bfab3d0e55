// Package exporter serves Prometheus metrics of the GPUs of one machine and
// of the PyTorch caching allocators running on them.
//
// Device metrics come from NVML and carry dcgm-exporter's names, units
// (MiB) and labels, so dashboards and alerts written for dcgm-exporter keep
// working. Allocator metrics come from a spool folder into which opted-in
// training processes write their torch.cuda.memory_stats() as <pid>-<token>.json
// every few seconds (scripts/gpumem_spool.py); files of processes that are
// gone or have stopped writing are dropped from the output and deleted.
//
// Every [Exporter] has its own registry; the package keeps no global state.
package exporter
