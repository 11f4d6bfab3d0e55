// Package sweep replays one allocation stream under many allocator
// settings at once and says which setting reserves least.
//
// A [Setting] is a label, an [alloc.Config] (PYTORCH_CUDA_ALLOC_CONF,
// parsed, or another policy such as nocache) and an optional
// per-process memory fraction. [Run] replays a plan under every setting of
// a grid, in parallel, one fresh allocator per replay; [RunCases] does the
// same for several plans (the strategy workloads, say), each under its own
// setting. Both return one [Row] per setting or case.
//
// # Cards
//
// With no card sizes, each setting is replayed once, on an unlimited
// simulated device: nothing fails, and the figures are what the program
// would reserve. With cards, each setting is replayed on each card (a
// simulated device of that size, under the setting's memory fraction as
// set_per_process_memory_fraction would cap it), and each [Row.Cards]
// entry says whether it fits or at which operation it runs out of memory.
// The row's own figures are then those of the largest card: retries,
// garbage collection and out-of-memory errors happen only under a limit.
//
// # Choosing
//
// [Sort] orders rows by peak reserved memory, rows that ran out of memory
// last. [Recommend] picks the setting with the lowest peak reserved among
// those a user can set through PYTORCH_CUDA_ALLOC_CONF that fit every
// card, ties going to fewer device allocations (each a slow cudaMalloc on
// a real GPU), and compares it with PyTorch's defaults. A card that no
// such setting fits cannot tell them apart and is left out of the choice.
// Other policies (nocache, say) are never recommended; the rows among
// them that would reserve less are listed apart.
package sweep
