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
// # The C core
//
// gm_alloc.h is the only public C header; it states the backend contract
// and the invariants that gm_check verifies (tests run it after every
// operation with Options.Check). gm_alloc.c holds the policy, named after
// PyTorch's functions; gm_treap.c the ordered free sets; gm_inspect.c the
// checker and snapshots; gm_sim.c the simulated device; gm_cuda.c the CUDA
// driver backend, loaded with dlopen so that no CUDA toolkit is needed to
// build.
package alloc
