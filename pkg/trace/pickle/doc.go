// Package pickle decodes PyTorch CUDA memory snapshots into a
// model.Snapshot.
//
// torch.cuda.memory._dump_snapshot writes a pickle (protocol 2 to 5) of a
// dict with four parts:
//
//   - segments: the allocator's state when the snapshot was taken; one
//     entry per cudaMalloc'd segment (or mapped range of an expandable
//     segment), each split into contiguous blocks.
//   - device_traces: per device, the recorded allocator events (alloc,
//     free_requested, free_completed, segment_alloc, ...) oldest first.
//     Only the last max_entries events survive the ring buffer, so the
//     trace may start after some segments and blocks already existed.
//   - allocator_settings: the parsed PYTORCH_CUDA_ALLOC_CONF.
//   - external_annotations: record_function markers, when recorded.
//
// A pickled bare list (older releases, or torch.cuda.memory_snapshot())
// is read as the segments part alone.
//
// Snapshots with long histories reach gigabytes, so Read is a
// streaming decoder written for the small opcode subset these files use,
// not a general unpickler: it never builds an object tree for the whole
// file. Event dicts are turned into Event values as each one closes,
// strings are interned, and identical stack traces (lists of frames) are
// stored once in Snapshot.Stacks and referred to by index. Every length
// read from the input is checked against the bytes left, and what the
// decoder builds is charged to a budget proportional to the input
// (limits.Memory), so a corrupt or hostile file yields a *FormatError,
// never a panic or a huge allocation. Strings are cut to 4 KiB as they
// are read; stacks are bounded (see internStack). Stream hands each
// event to a sink instead of keeping it, for a caller that plans the
// trace as it is read. Event dicts of the usual shape (scalar values,
// frames an empty list or frame dicts fetched from the memo) are read in
// one go by fastEvent, which leaves anything else to the general path;
// dicts laid out like one it read are matched against a template of its
// bytes (template.go).
//
// Terms: a segment's total_size is reserved memory; blocks in state
// active_allocated are allocated memory; active_pending_free blocks were
// freed by the program but wait for stream work to finish before the
// allocator may reuse them.
package pickle
