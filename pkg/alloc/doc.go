// Package alloc is gpumem's caching allocator: a replica, in C, of the
// CUDA caching allocator of PyTorch 2.11, driven from Go.
//
// # Terms
//
//   - Segment: memory the allocator obtained from the device in one call
//     (cudaMalloc), or, with expandable segments, one reserved virtual
//     range whose pages are mapped as needed.
//   - Block: a piece of a segment. The blocks of a segment tile it. A
//     block is allocated (handed to the program), pending (freed by the
//     program but still in use by another stream), free (cached, ready for
//     reuse) or, in an expandable segment, unmapped.
//   - Pool: requests of at most 1 MiB are served from the small pool (2 MiB
//     segments), larger ones from the large pool. Free blocks are reused
//     only by requests on the stream they were allocated on.
//   - Private pool: a pool of its own (a CUDA graph's, a torch.cuda.MemPool's)
//     that an [Op] routes allocations to with Op.Pool. It owns its segments:
//     only its requests use them, and empty_cache leaves them alone until
//     OpPoolRelease says the graph or MemPool holding it is gone.
//   - Allocated: bytes of allocated blocks (rounded sizes, including slack
//     a block was not split for). Requested: the bytes asked for.
//   - Active: allocated plus pending blocks.
//   - Reserved: bytes held from the device (segments, mapped pages).
//   - Non-releasable (inactive split): free blocks inside segments that
//     also hold other blocks; empty_cache cannot return them.
//   - Fragmentation: reserved memory that allocations do not use, as a
//     ratio. Reports give 1 − allocated/reserved (now and at the peak),
//     1 − peak allocated/peak reserved, and 1 − largest free block/free
//     cached bytes.
//   - Other placement: the simulated device's other model of where the
//     driver puts segments (for a process that launches kernels, or for
//     one that does not; [SimOtherPlacement]). A watch of it
//     ([Allocator.WatchOtherPlacement]) makes every device call on it too
//     and tells whether an allocator there would have gone alike
//     ([Allocator.OtherPlacementAgrees]).
//
// # Use
//
// [New] makes an [Allocator] over a [Device] ([Sim], the simulated device,
// or the CUDA backend) with a [Config] parsed from PYTORCH_CUDA_ALLOC_CONF
// syntax by [ParseConfig]. [Allocator.Run] applies a batch of [Op] values
// in one call into C, which is how replays stay fast; [Allocator.Alloc]
// and friends apply one. [Allocator.Stats] gives torch.cuda.memory_stats()
// (use [Stats.Map] for PyTorch's key names) and [Allocator.Snapshot] the
// segments and blocks.
//
// # Policies
//
// [Config.Policy] picks how blocks are placed; [Policies] lists them all.
// Every policy reports the same statistics and keeps the invariants that
// gm_check verifies. Which to use:
//
//   - pytorch: what PyTorch does; use it to predict or explain a real run,
//     and to try PYTORCH_CUDA_ALLOC_CONF settings (expandable_segments,
//     max_split_size_mb, ...). The only policy the settings apply to.
//   - gpumem: the least memory an online allocator needs. Page-granular
//     virtual memory per stream: whole free pages are unmapped before a new
//     peak is set and mapped again wherever they are needed (GMLake's
//     stitching), free pages otherwise stay mapped so a steady loop makes no
//     device calls. Peak reserved stays within 1% plus one 2 MiB page of the
//     lower bound on the shared traces, never above PyTorch's expandable
//     segments, at the speed of the pytorch policy. Use it to see what a
//     better allocator would save.
//   - rmm-pool, bfc, cupy: the pools of RAPIDS RMM, TensorFlow (with
//     allow_growth) and CuPy; use them to compare frameworks on one trace
//     or to size a job for them. RMM's and BFC's doubling growth can
//     reserve up to twice the live bytes; CuPy's exact-size segments waste
//     little on steady traces but fragment across streams.
//   - cuda-async: an approximation of cudaMallocAsync (the driver's pool is
//     closed source): 2 MiB-granular chunks, per-stream best fit, idle
//     chunks remapped before the pool grows. Use it for a rough answer to
//     "would backend:cudaMallocAsync help", not for exact figures.
//   - nocache: every request goes to the device; its peak equals the lower
//     bound, at the cost of a device call per operation (the
//     PYTORCH_NO_CUDA_MEMORY_CACHING=1 baseline).
//
// The lower bound is the peak of live bytes, each request rounded up to
// 512 B ([Extra].LiveBytesPeak): no allocator reserves less. All policies
// here round to 512 B (RMM and TensorFlow round to 256 B).
//
// # The C core
//
// gm_alloc.h is the only public C header; it states the backend contract
// and the invariants that gm_check verifies (tests run it after every
// operation with Options.Check). Every policy is a plug-in of one engine:
// gm_alloc.c (ids, pending frees, gm_run and gm_run_packed, peaks, statistics, seeding, the
// checker hook) calls a policy only through its gm_policy_t, whose hooks
// gm_policy.h documents along with the bookkeeping helpers every policy
// uses. gm_policies.h is the table, one row per policy, from which the C
// enum, the engine's table and this package's [Policies] and [PolicyInfo]
// come. Each policy is one file, gm_policy_<name>.c: pytorch (named after
// PyTorch's functions), nocache, gpumem, and rmm-pool, bfc, cupy and
// cuda-async built on the best-fit library gm_bestfit.c. gm_treap.h holds
// the ordered free sets; gm_inspect.c the checker and snapshots; gm_sim.c
// the simulated device (its state and search structures in gm_sim.h);
// gm_pack.h the reader of the replay's packed op log (gm_unpack.c unpacks
// it into an array, gm_run_packed applies it as it reads it);
// gm_devlog.c and gm_watch.c the decorators around a device that log its
// calls and watch the other placement; gm_cuda.c the CUDA driver backend, loaded with
// dlopen so that no CUDA toolkit is needed to build (its tests,
// cuda_test.go, skip without a GPU). The conformance suite
// (conformance_test.go) holds every policy of the table to the rules all
// must keep.
package alloc
