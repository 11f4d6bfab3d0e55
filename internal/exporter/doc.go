// Package exporter serves Prometheus metrics of the GPUs of one machine and
// of the PyTorch caching allocators running on them.
//
// Device metrics come from NVML: gpumem_gpu_memory_used_bytes and
// _total_bytes per GPU, and the memory the driver attributes to each
// process. With [Options.DCGMCompat] the same figures are also served under
// dcgm-exporter's names, units (MiB) and labels (DCGM_FI_DEV_FB_*), for a
// node that does not run dcgm-exporter; by default they are left to it.
//
// Allocator metrics come from the spool: a folder into which opted-in
// training processes (the writers, python/gpumem_spool.py) write their
// torch.cuda.memory_stats() every few seconds, one record each, as
// <pid>-<token>.json (the token is random, drawn once per process, so that
// no two writers' names collide and none can guess another's). A record's
// label set is hostname, gpu, UUID, rank, hpc_job and the Kubernetes
// namespace, pod and container; records of one label set form a group,
// whose figures are summed, and gpumem_torch_process_info names each
// record's pid. Files of processes that are gone or have stopped writing
// are dropped from the output and deleted.
//
// The spool is shared, so the reader trusts a record's contents as its
// writer's claim and nothing more: it opens entries without following
// links or blocking, and bounds what one file and one scrape may cost
// (see the limits in spool.go); what it skips is counted in metrics.
//
// Every [Exporter] has its own registry; the package keeps no global state.
package exporter
