// Package trace reads allocation traces into one model, [Snapshot]: PyTorch
// CUDA memory snapshots (package pickle), RAPIDS RMM logging_resource_adaptor
// CSV logs ([ReadRMM]) and gpumem's own line-oriented text format
// ([ReadText], [WriteText]; docs/trace-format.md). [Formats] lists them;
// [Open] recognises the format from the content.
//
// Every reader bounds what a hostile or corrupt file can cost: lines are
// at most 64 KiB, memory is budgeted in proportion to the file size and
// capped at half the process's soft memory limit (debug.SetMemoryLimit)
// whatever the size, a zstd window is at most 128 MiB unless the caller
// allows more ([DecompressWindow]), stack frames are truncated and capped, and errors quote at most a short
// prefix of the offending value, naming the file and the line or byte.
//
// Terms: a segment's total_size is reserved memory; blocks in state
// active_allocated are allocated memory; active_pending_free blocks were
// freed by the program but wait for stream work to finish before the
// allocator may reuse them.
package trace
