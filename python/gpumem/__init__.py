"""gpumem from Python: replay PyTorch memory snapshots through an exact
replica of PyTorch's CUDA caching allocator, on any card, under any
PYTORCH_CUDA_ALLOC_CONF, and read the result as a dict.

    import gpumem
    r = gpumem.replay("snapshot.pickle", device_memory="24GiB")
    r.peak_reserved, r["memory_stats"]["num_alloc_retries"], r.fits

In Jupyter a result shows as the report's summary table with its memory
chart. Each call runs the gpumem command that came with this package (or
$GPUMEM_BINARY) and reads its JSON: the keys are those of the command's
`-o json`, described by the JSON Schemas in the repository's docs/schema.

The recording helpers install beside this package as top-level modules,
as their single files can also be copied into a project:
`gpumem_spool` (publish memory_stats for `gpumem exporter`),
`gpumem_hooks` (dump snapshots from training-framework callbacks),
`gpumem_trace_writer` (write gpumem's text trace format) and
`gpumem_record` (run a script with recording on, as `gpumem record`).
"""

from ._cli import GpumemError, Result, binary, diff, estimate, replay, sweep, version

__all__ = ["GpumemError", "Result", "binary", "diff", "estimate", "replay", "sweep", "version"]
