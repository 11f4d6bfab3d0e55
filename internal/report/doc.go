// Package report renders what gpumem learns about memory: PyTorch's own
// torch.cuda.memory_summary() text, and reports of a replay for people
// (Table, Markdown, Timeline) and for programs (JSON).
//
// # Terms
//
// The figures are those of PyTorch's CUDA caching allocator, whose
// statistics (torch.cuda.memory_stats()) a figures.Replay carries as an
// alloc.Stats (its Map gives PyTorch's dotted keys, such as
// "allocated_bytes.all.current"); package figures computes the ratios
// below once, for every renderer. Each statistic has a
// current value, a peak, and running totals of what was added ("allocated")
// and taken away ("freed").
//
//   - Requested memory is the bytes the program asked for.
//   - Allocated memory is the bytes of the blocks handed out for those
//     requests: each request rounded up (to 512 B at least) and, when a
//     block was not worth splitting, the whole block.
//   - Active memory is allocated memory plus blocks already freed by the
//     program but still in use on another stream (pending frees). Pending
//     blocks cannot be reused yet.
//   - Reserved memory is the bytes the allocator holds from the device in
//     segments, used or not. Reserved minus active is cached free memory:
//     held, free, and reusable.
//   - Non-releasable memory is the free blocks inside segments that are
//     split: empty_cache cannot return them to the device, because the
//     rest of their segment is in use.
//   - Segments are the device allocations (cudaMalloc calls) the allocator
//     carves blocks from.
//
// A replay also gives the lower bound: the peak of live bytes, each
// request rounded up to 512 B, which no allocator aligning as PyTorch does
// could go below.
//
// # Fragmentation
//
// Reserved memory that is not allocated is lost to the program. Three
// ratios measure it, each 0 when nothing is lost:
//
//   - 1 − allocated/reserved, at the end and at the moment reserved
//     memory peaked (the latter is the one that decides whether a model
//     fits);
//   - 1 − peak allocated/peak reserved, from the two peaks, which need not
//     be simultaneous;
//   - 1 − largest free block/cached free bytes: how scattered the free
//     memory is. A large value means no big request can be served from
//     the cache even when plenty is free in total.
//
// The human reports colour a ratio yellow from Options.Warn (0.20) and red
// from Options.Alarm (0.30), and say "high" and "very high" in words, so
// that nothing depends on colour. Only ratios that mean trouble get a
// level: those at the peak, and those at an out-of-memory error, which a
// report names so ("at the out-of-memory"); after a run that completed
// the ratios "at the end" describe what the cache holds and get none, so
// that one row never has a level in one report and none in another. A
// run that freed everything and kept its cache is 100% at the end.
//
// An out-of-memory error is a fragmentation OOM when the free cached bytes
// and what the device (and the cap) would still give together hold the
// request, yet no block or new segment was big enough; otherwise it is a
// real shortage.
//
// # Output
//
// Tables are drawn with github.com/olekukonko/tablewriter (box borders for
// terminals, its Markdown renderer for Markdown); the timeline with
// github.com/guptarohit/asciigraph. Colours come from fatih/color objects
// switched on or off one by one from Options.Color: the package never
// reads or sets color.NoColor, and writes no escape codes unless asked.
package report
