/* gm_alloc.h — gpumem's caching allocator, the only public C header.
 *
 * The allocator hands out blocks carved from segments it obtains from a
 * backend (a simulated device, or the CUDA driver). Its `pytorch` policy
 * reproduces PyTorch 2.11's native CUDA caching allocator decision for
 * decision: same rounding, pools, best fit, splits, merges, releases,
 * retries and statistics. The other policies (gm_policies.h lists them)
 * place blocks as other allocators do, for comparison; each is a plug-in
 * of one engine (gm_policy.h says what a policy must do).
 *
 * Terms (see doc.go for the long form):
 *   segment  memory obtained from the device in one call (cudaMalloc), or one
 *            expandable virtual range whose pages are mapped on demand.
 *   block    a piece of a segment: allocated, pending (freed but still used
 *            by another stream), free, or (expandable only) unmapped.
 *   pool     the small pool (blocks <= 1 MiB, 2 MiB segments) or the large
 *            pool; each keeps its free blocks ordered by (stream, size, addr).
 *            Besides the default pair, private pools (CUDA graphs,
 *            torch.cuda.MemPool; gm_pools.c) each own a small/large pair and
 *            their segments: an allocation routed to a private pool is
 *            served only from its segments, and the default pool never sees
 *            them. A private pool lives while its use count is positive;
 *            once released its whole free segments go back at the next
 *            empty_cache (or OOM retry), and it disappears with its last
 *            segment.
 *
 * Invariants, checked by gm_check() and by every test after every operation:
 *   I1 the blocks of a segment tile it: in address order, each starts where
 *      the previous ends, the first at the segment base, the last ends at
 *      base + size; no two segments overlap; only an expandable segment
 *      has unmapped blocks.
 *   I2 no two free mapped neighbours of one stream in a segment (they are
 *      merged), and no two unmapped neighbours.
 *   I3 a pool's free set holds exactly the free, mapped, idle blocks of that
 *      pool, each once, and is ordered by (stream, size, addr); the unmapped
 *      set likewise holds exactly the unmapped blocks, ordered by (stream,
 *      addr); each set's members are threaded in that order (each links to
 *      the one before and after it, the ends to none). A pool marked settled
 *      holds no free block a release would give back: none is a whole
 *      segment, none is in an expandable segment.
 *   I4 every block size is a multiple of 512, and every statistic's current
 *      value equals what the blocks add up to (allocated, active, requested,
 *      reserved, segments, inactive split), for all/large/small; its peak
 *      is not below it, and the totals gm_get_stats derives are not kept
 *      (every freed, and all's allocated, stay 0 inside).
 *   I5 a live allocation id maps to exactly one allocated or pending block.
 *   I6 every block belongs to the pool of its segment, and each private
 *      pool's free sets hold only its own blocks (with I3: all the pools'
 *      sets together hold every free block); a private pool's segment count
 *      (cudaMalloc_count) equals the segments that point at it, its use
 *      count is never negative, and no segment points at an erased pool.
 *   I7 on the simulated device (gm_sim.c), no two chunks overlap unless
 *      it noted that some may (sim_t.overlap); the room index agrees with the
 *      chunks: one leaf per chunk with room, each its chunk's room, each
 *      node the larger of its two children; the given-back list holds
 *      exactly the given-back chunks, by address; the hole index holds
 *      them too, in address order, each with its key (its size, or the
 *      largest key when it ends where the next below begins), each node
 *      the largest key of its subtree and of no higher priority than its
 *      parent; and the gap and the new
 *      chunk's place they find (requests of 2 MiB to 512 MiB, new chunks
 *      of 32 MiB to 1 GiB) equal those a walk of every chunk finds.
 *   I8 while a placement watch agrees (gm_placement_watch), it holds one
 *      range per segment, of the segment's base and size (and the base on
 *      the other device the segment keeps, if any), none overlapping
 *      another, and I7 holds on its other device; it counts the crossed
 *      neighbours among its ranges (those not apart and in the same order
 *      on the other device) and, while it keeps them, the bounds of the
 *      lowest and highest crossed pair, as its ranges give them.
 *
 * Threading: a gm_alloc_t is not thread-safe; the Go wrapper serialises calls.
 * Errors: every function returning int returns GM_OK (0) or a GM_E* code.
 */
#ifndef GM_ALLOC_H
#define GM_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  GM_OK = 0,
  GM_ENOMEM = 1,    /* out of memory: the request cannot be met */
  GM_EINVAL = 2,    /* bad argument (unknown id, id already live, bad op) */
  GM_EBACKEND = 3,  /* the backend failed for another reason than memory */
  GM_ECORRUPT = 4   /* gm_check found a broken invariant */
};

/* Policies: PyTorch's, gpumem's own (page-granular virtual memory; see
 * gm_policy_gpumem.c), RMM's pool, TensorFlow's BFC, CuPy's pool, an
 * approximation of cudaMallocAsync, and no caching. GM_POLICY_<ID> comes
 * from the rows of gm_policies.h, in their order; GM_POLICY_COUNT ends it. */
#include "gm_policies.h"
enum {
#define GM_POLICY_ENUM(id, sym) GM_POLICY_##id,
  GM_POLICIES(GM_POLICY_ENUM)
#undef GM_POLICY_ENUM
  GM_POLICY_COUNT
};

/* What a policy is, for the Go side (names, help text, sweep notes) and the
 * tests (traits). */
enum {
  /* PYTORCH_CUDA_ALLOC_CONF selects it: PyTorch's own caching allocator. */
  GM_TRAIT_SETTABLE = 1,
  /* empty_cache returns no memory to the device (the pool keeps it). */
  GM_TRAIT_KEEPS_CACHE = 2,
  /* It reads max_split_size and expandable_segments; without this trait
   * gm_new turns both off (unlimited, off) before the policy's init. */
  GM_TRAIT_PYTORCH_KNOBS = 4
};

typedef struct gm_policy_info {
  const char *name;    /* as --policy takes it: "pytorch", "rmm-pool", ... */
  const char *summary; /* one line for help text */
  /* Why a sweep does not advise it, or NULL for the generic reason;
   * "{device_allocs}" stands for the run's number of device allocations. */
  const char *note;
  unsigned traits;     /* GM_TRAIT_* */
} gm_policy_info_t;

/* gm_policy_info fills *out for policy (0 <= policy < GM_POLICY_COUNT);
 * GM_EINVAL for any other number. */
int gm_policy_info(int policy, gm_policy_info_t *out);

/* ---------------------------------------------------------------------
 * Backend contract: the only way the allocator touches a device.
 * Every function returns GM_OK, GM_ENOMEM (the device has no room) or
 * GM_EBACKEND. Addresses and sizes are those of the device.
 * ------------------------------------------------------------------- */
typedef struct gm_backend {
  void *ctx;
  /* cudaMalloc: obtain `size` bytes; `hint` is a preferred address (0 = none)
   * the backend may ignore. pre: size > 0, size % 512 == 0. */
  int (*malloc)(void *ctx, uint64_t size, uint64_t hint, uint64_t *addr);
  /* cudaFree of a range obtained from malloc, whole. */
  int (*free)(void *ctx, uint64_t addr, uint64_t size);
  /* Reserve `size` bytes of address space with no memory behind it
   * (expandable segments). pre: size is a multiple of the page size. */
  int (*va_reserve)(void *ctx, uint64_t size, uint64_t page, uint64_t *addr);
  int (*va_release)(void *ctx, uint64_t addr, uint64_t size);
  /* Back [addr, addr+size) with memory, pages of `page` bytes each.
   * pre: the range lies in one reservation, is page-aligned, unmapped.
   * On GM_ENOMEM nothing stays mapped. */
  int (*map)(void *ctx, uint64_t addr, uint64_t size, uint64_t page);
  /* Return the memory behind a mapped, page-aligned range. */
  int (*unmap)(void *ctx, uint64_t addr, uint64_t size, uint64_t page);
  /* cudaMemGetInfo. */
  int (*mem_info)(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes);
  /* Release everything the backend holds and the backend itself. */
  void (*destroy)(void *ctx);
  /* The last failure's message, or NULL; may itself be NULL. */
  const char *(*error)(void *ctx);
} gm_backend_t;

/* gm_sim_backend fills `b` with the simulated device: deterministic, pure C.
 * capacity: the card's memory in bytes (0 = unlimited; mem_info then reports
 * 1 TiB, which also sizes expandable segments' address ranges). Hints are
 * honoured until the first malloc without a usable one (the replay has left
 * its recording); addresses then come from a model of the CUDA driver (see
 * gm_sim.c) for a program that runs kernels. gm_sim_backend_opts takes
 * GM_SIM_* flags: GM_SIM_IGNORE_HINTS honours only the first malloc's hint;
 * GM_SIM_NO_KERNELS models a process that launches no kernels (the driver's
 * start-up range below the first segment stays taken); GM_SIM_KERNEL_SIGNAL
 * opens that range when gm_sim_kernels_started says the program's first
 * kernel ran (an emulated run knows), not once the first chunk is carved.
 * Returns GM_ENOMEM if the simulator itself cannot be allocated. */
enum { GM_SIM_IGNORE_HINTS = 1, GM_SIM_NO_KERNELS = 2, GM_SIM_KERNEL_SIGNAL = 4 };
int gm_sim_backend(uint64_t capacity, gm_backend_t *b);
int gm_sim_backend_opts(uint64_t capacity, int flags, gm_backend_t *b);

/* How the simulated device chose its cudaMalloc addresses. */
typedef struct gm_sim_addressing {
  uint64_t mallocs;      /* cudaMallocs served */
  uint64_t hinted;       /* of them, those that came with a recorded address */
  uint64_t matched;      /* of those, the ones placed at that address */
  uint64_t predicted;    /* recorded addresses followed (not the first) that
                            the model would have chosen itself */
  int64_t modelled_from; /* index of the first malloc the model placed; -1 = none */
} gm_sim_addressing_t;

/* gm_cuda_backend fills `b` with the CUDA driver backend for `device`, loading
 * libcuda.so.1 at run time. Returns GM_EBACKEND with a message in err (NUL
 * terminated, at most errlen bytes) when no usable driver or device exists. */
int gm_cuda_backend(int device, gm_backend_t *b, char *err, size_t errlen);

/* ---------------------------------------------------------------------
 * Configuration: PYTORCH_CUDA_ALLOC_CONF, already parsed (the Go side
 * parses and validates the string), plus the memory fraction.
 * ------------------------------------------------------------------- */
typedef struct gm_config {
  int policy;                           /* GM_POLICY_* */
  uint64_t max_split_size;              /* UINT64_MAX = unlimited */
  uint64_t max_non_split_rounding_size; /* default = large_segment_size */
  uint64_t large_segment_size;          /* default 20 MiB */
  uint32_t roundup_power2_divisions[16];/* per interval [2^(20+i), ..); 0 = off */
  double gc_threshold;                  /* 0 = off, else in (0, 1) */
  int expandable_segments;              /* bool */
  uint64_t allowed_memory_maximum;      /* fraction * total; 0 = no limit */
  uint64_t device_total;                /* sizes expandable VA ranges; 0 = the
                                           backend's total (mem_info) */
  int check;                            /* bool: gm_check after every op in gm_run */
} gm_config_t;

/* gm_config_default fills c with PyTorch's defaults. */
void gm_config_default(gm_config_t *c);

/* ---------------------------------------------------------------------
 * Statistics: torch.cuda.memory_stats(), field for field.
 * ------------------------------------------------------------------- */
typedef struct gm_stat {
  int64_t current, peak, allocated, freed;
} gm_stat_t;

enum { GM_STAT_ALL = 0, GM_STAT_LARGE = 1, GM_STAT_SMALL = 2 };

typedef struct gm_stats {
  gm_stat_t allocation[3], segment[3], active[3], inactive_split[3];
  gm_stat_t allocated_bytes[3], reserved_bytes[3], active_bytes[3];
  gm_stat_t inactive_split_bytes[3], requested_bytes[3];
  gm_stat_t oversize_allocations, oversize_segments;
  int64_t num_alloc_retries, num_ooms, num_sync_all_streams;
  int64_t num_device_alloc, num_device_free;
  int64_t max_split_size; /* -1 = unlimited */
} gm_stats_t;

/* ---------------------------------------------------------------------
 * The allocator.
 * ------------------------------------------------------------------- */
typedef struct gm_alloc gm_alloc_t;

/* gm_new creates an allocator. It takes ownership of the backend (destroyed
 * by gm_free). pre: c and b non-NULL. */
int gm_new(const gm_config_t *c, const gm_backend_t *b, gm_alloc_t **out);

/* gm_free returns every segment to the backend, destroys it and frees a. */
void gm_free(gm_alloc_t *a);

/* One operation; the layout matches Go's alloc.Op. */
enum {
  GM_OP_ALLOC = 1,        /* allocate size bytes on stream, name it id */
  GM_OP_FREE = 2,         /* free id (pending if streams were recorded) */
  GM_OP_FREE_REQUEST = 3, /* free id, memory still in use: stays pending */
  GM_OP_FREE_COMPLETE = 4,/* the pending free of id completes */
  GM_OP_RECORD_STREAM = 5,/* stream uses id */
  GM_OP_EMPTY_CACHE = 6,  /* empty_cache(): default pools, then released private ones */
  GM_OP_POOL_RELEASE = 7, /* releasePool(pool): its use count drops by one */
  GM_OP_POOL_EMPTY = 8    /* ~MemPool's emptyCache(pool): sync, then that pool only */
};

/* gm_op_t.flags */
enum {
  GM_OPF_RECORDED_OOM = 1, /* alloc: the recording ran out of memory here and
                              went on; a failure is counted, holds nothing and
                              does not stop gm_run */
  GM_OPF_CLAIM = 2,        /* alloc: take the free block starting at hint in
                              the routed pool, whatever its size class
                              (a CUDA-graph-tree checkpoint restore); an
                              ordinary malloc when there is no such block */
  GM_OPF_RELEASED_BEFORE = 4 /* alloc: the recording released cached
                              segments just before it, by empty_cache() or by
                              this malloc's own retry; when the malloc would
                              not release (a cached block serves it, or a
                              new segment fits), it was empty_cache(), which
                              runs first (gm_set_follows_recording) */
};

/* pool: 0 = the default pools; k > 0 = private pool k, created on the first
 * allocation routed to it with a use count of 1. Ids index a table (a
 * pointer for every id up to the highest used), so callers number their
 * pools densely, as the replay does (1, 2, ...: one a lifetime). Only a
 * policy with private pools (pytorch) routes allocations and applies the
 * two pool ops; the others serve every allocation from their own pools and
 * treat the pool ops as no-ops. */
typedef struct gm_op {
  uint8_t kind;
  uint8_t flags;  /* GM_OPF_* */
  uint32_t pool;  /* alloc: the pool it is routed to; POOL_*: the pool */
  uint32_t id;
  uint64_t stream;
  uint64_t size;
  uint64_t hint;
} gm_op_t;

/* What an out-of-memory looked like when it happened. */
typedef struct gm_oom {
  uint64_t size;        /* the request as asked */
  uint64_t rounded;     /* after round_size */
  uint64_t alloc_size;  /* the segment it needed ("Tried to allocate") */
  uint64_t stream;
  uint64_t device_free, device_total, allowed;
  int64_t allocated, reserved; /* after the release steps, as PyTorch reports */
  uint64_t private_free;        /* free cached bytes in private pools
                                   ("allocated in private pools") */
} gm_oom_t;

/* Timeline sampling for gm_run: op i lands in bucket (base + i) / stride;
 * each bucket keeps the maxima seen after its ops. NULL arrays = off. */
typedef struct gm_timeline {
  uint64_t stride, base, nbuckets;
  int64_t *allocated, *reserved, *active;
  /* allocated_op[k], when not NULL: the first op (counted from 0, as base
   * is) after which allocated[k] was reached; -1 while bucket k has had
   * no op */
  int64_t *allocated_op;
} gm_timeline_t;

/* gm_set_follows_recording says that the replay runs under its recording's
 * settings and cap (off after creation): only then does gm_run honour
 * GM_OPF_RELEASED_BEFORE, whose test reads the replay's cache and cap for
 * the recording's; elsewhere the flag is ignored and the malloc decides. */
void gm_set_follows_recording(gm_alloc_t *a, int on);

/* gm_run applies ops[0..n) in order and stops at the first error.
 * *done = the number of ops applied. On GM_ENOMEM ops[*done] is the failing
 * allocation and *oom describes it (oom may be NULL); the allocator stays
 * usable. An allocation flagged GM_OPF_RECORDED_OOM that fails is no error:
 * it is counted, listed (gm_oom_events) and gm_run goes on. GM_EINVAL: an
 * op named an unknown or already-live id, or, under a policy with private
 * pools, routed an allocation to a released pool, released a pool that
 * does not exist or is already released, or emptied pool 0. tl may be NULL.
 * addr, if non-NULL, receives the address of the last allocation made.
 * sizes, if non-NULL, receives at the index of each free and free request
 * applied the size of the block it freed (0 for one of an allocation that
 * held nothing: of 0 bytes, or a recorded out-of-memory's); the entries of
 * other ops are unspecified. */
int gm_run(gm_alloc_t *a, const gm_op_t *ops, size_t n, size_t *done,
           gm_oom_t *oom, gm_timeline_t *tl, uint64_t *addr, uint64_t *sizes);

/* The packed op log: how the replay keeps a streamed plan's ops (Go's
 * replay.opLog writes it; gm_unpack reads it), 2 to 4 bytes an op instead
 * of gm_op_t's 40. Each op, with the Event and Stack the replay keeps
 * beside it (int32s), is:
 *   a header byte: kind (GM_PK_KIND) and GM_PK_* flags;
 *   with GM_PK_EXTRA, a byte of GM_PKX_* flags;
 *   id, a uvarint (7 bits a byte, low first, 0x80 on all but the last);
 *   with GM_PK_STACK_NEW, the Stack as a uvarint of its 32 bits; else the
 *     previous op's Stack with GM_PK_STACK_SAME, else -1;
 *   with GM_PKX_SIZE, size as a uvarint; else, for a GM_OP_ALLOC, size as
 *     one byte below GM_PK_SIZE_SLOTS, the slot of the reader's size cache
 *     holding it, or as a uvarint of size + GM_PK_SIZE_SLOTS, which the
 *     reader then stores in slot gm_pk_slot(size); else size is 0;
 *   with GM_PKX_STREAM, GM_PKX_HINT, GM_PKX_POOL, in that order, the field
 *     as a uvarint; with GM_PKX_FLAGS, the flags byte; the others are 0;
 *   with GM_PKX_EVENT, the Event less the previous op's, a uvarint of its
 *     32 bits (wrapping); else the previous op's Event, plus 1 with
 *     GM_PK_EVENT_NEXT.
 * The "previous op" of the log's first is Event 0, Stack 0, and the size
 * cache starts all 0: a zeroed gm_unpack_t. */
enum {
  GM_PK_KIND = 0x0f,
  GM_PK_EVENT_NEXT = 0x10,
  GM_PK_STACK_SAME = 0x20,
  GM_PK_STACK_NEW = 0x40,
  GM_PK_EXTRA = 0x80,
  GM_PKX_SIZE = 1,
  GM_PKX_STREAM = 2,
  GM_PKX_HINT = 4,
  GM_PKX_POOL = 8,
  GM_PKX_FLAGS = 16,
  GM_PKX_EVENT = 32,
  GM_PK_SIZE_SLOTS = 128
};

/* The size cache's slot of size n: the top 7 bits of a Fibonacci hash. */
static inline unsigned gm_pk_slot(uint64_t n) { return (unsigned)(n * 0x9E3779B97F4A7C15ull >> 57); }

/* What a reader of a packed log carries from one op to the next: the last
 * op's Event and Stack and the size cache; zeroed at the log's start. */
typedef struct gm_unpack {
  int32_t event, stack;
  uint64_t sizes[GM_PK_SIZE_SLOTS];
} gm_unpack_t;

/* gm_unpack reads up to n ops packed in b[0..len) with u into ops, event
 * and stack (room for n each): each op, its Event, its Stack. It stops at
 * the end of b or after n ops; *done = the ops read, *used = their bytes.
 * Preconditions: b holds whole ops as the format above packs them, and u
 * has read every op before them, in order. It checks no field, only that
 * the ops end with b: GM_EINVAL when the last overran it (having read past
 * b: a log cut short or garbled), else GM_OK. */
int gm_unpack(gm_unpack_t *u, const uint8_t *b, size_t len, size_t n, gm_op_t *ops, int32_t *event,
              int32_t *stack, size_t *done, size_t *used);

/* gm_run_packed is gm_run of the ops packed in b[0..len) (no addr), read
 * with u as gm_unpack reads them and each applied as soon as it is read:
 * no array is written before the run for it to read back. It applies up
 * to n ops and stops at the end of b, after n ops, or at the first error,
 * as gm_run does; *done = the ops applied, *used = their bytes (on a
 * GM_ECORRUPT from the check, the failing op's too, as it was applied).
 * Each op read is stored in ops and event (room for n each) as gm_unpack
 * stores it (its Stack only in u: the replay's ride wants none): the ops
 * applied, and at ops[*done] the one that failed. sizes (NULL: none) is gm_run's. Preconditions: as gm_unpack's
 * (b holds whole ops, u has read every op before them, in order).
 * GM_EINVAL too when an op overran b (a log cut short or garbled; it is
 * not applied, and *used > len says so). After any error u is past the op that failed: it reads
 * the log no further from *used. */
int gm_run_packed(gm_alloc_t *a, gm_unpack_t *u, const uint8_t *b, size_t len, size_t n,
                  size_t *done, size_t *used, gm_oom_t *oom, gm_timeline_t *tl, gm_op_t *ops,
                  int32_t *event, uint64_t *sizes);

/* An out-of-memory the recording had, survived by gm_run: the op's index
 * (counted over every op applied by this allocator, from 0) and what it
 * looked like. */
typedef struct gm_oom_event {
  uint64_t op;
  gm_oom_t oom;
} gm_oom_event_t;

/* gm_oom_events copies the survived out-of-memory events from index `from`
 * on into out (at most n) and returns how many there are in all. */
size_t gm_oom_events(const gm_alloc_t *a, size_t from, gm_oom_event_t *out, size_t n);

/* A private pool as PyTorch's PrivatePool keeps it. */
typedef struct gm_pool_info {
  int exists;          /* created and not yet erased */
  int64_t use_count;   /* 0 = released: freeable */
  uint64_t segments;   /* cudaMalloc_count: segments it owns */
} gm_pool_info_t;

/* gm_pool_get describes private pool id (id > 0). */
void gm_pool_get(const gm_alloc_t *a, uint32_t id, gm_pool_info_t *out);

/* gm_sim_addressing reads how the simulated device chose its addresses;
 * GM_EINVAL when a's backend is not the simulator. */
int gm_sim_addressing(const gm_alloc_t *a, gm_sim_addressing_t *out);

/* gm_sim_kernels_started tells a simulator made with GM_SIM_KERNEL_SIGNAL that
 * the program's first kernel ran (a no-op after the first call, or without the
 * flag); GM_EINVAL when a's backend is not the simulator. */
int gm_sim_kernels_started(gm_alloc_t *a);
/* gm_sim_backend_kernels_started is the same for a simulator's backend. */
int gm_sim_backend_kernels_started(const gm_backend_t *b);

/* gm_sim_tenant tells the simulator that the driver mapped `size` bytes of
 * its own now (the modules a library loads at its first call): they take
 * address space where a cudaMalloc of that size would go, for good, and no
 * memory of the card. A no-op before the first cudaMalloc. */
int gm_sim_tenant(gm_alloc_t *a, uint64_t size);
int gm_sim_backend_tenant(const gm_backend_t *b, uint64_t size);

/* gm_backend_error is the backend's message for its last failure, or "". */
const char *gm_backend_error(const gm_alloc_t *a);

/* gm_mem_info is the backend's cudaMemGetInfo. */
int gm_mem_info(const gm_alloc_t *a, uint64_t *free_bytes, uint64_t *total_bytes);

/* Seeding: the state a truncated trace starts in. */
typedef struct gm_seed_block {
  uint64_t offset;    /* from the segment's base */
  uint64_t size;      /* 0 = round_size(requested) */
  uint64_t requested;
  uint32_t id;        /* allocation id for later frees */
  int pending;        /* freed, waiting on other streams */
} gm_seed_block_t;

/* gm_seed_segment creates a segment of `size` bytes (the backend is asked
 * for `hint`) holding the given live blocks, sorted by offset; the gaps
 * between them become free blocks. Statistics move as if the blocks had
 * been allocated, but no device allocation is counted. A block that would
 * overlap the next one or the segment's end is cut short.
 * pre: size is a multiple of 512; ids are not live. Returns GM_EINVAL for
 * unsorted or out-of-range blocks, GM_ENOMEM/GM_EBACKEND from the backend. */
int gm_seed_segment(gm_alloc_t *a, uint64_t hint, uint64_t size, uint64_t stream, int small,
                    const gm_seed_block_t *blocks, size_t n);

/* gm_get_stats copies the statistics. */
void gm_get_stats(const gm_alloc_t *a, gm_stats_t *s);

/* gm_reset_peak sets every peak to its current value
 * (torch.cuda.reset_peak_memory_stats). */
void gm_reset_peak(gm_alloc_t *a);

/* Snapshot of segments and blocks, in address order. */
typedef struct gm_segment_info {
  uint64_t address, total_size, allocated_size, active_size, requested_size;
  uint64_t stream;
  int is_small, is_expandable;
  uint32_t pool;                 /* 0 = default, else the private pool's id */
  uint32_t first_block, nblocks; /* index range into the block array */
} gm_segment_info_t;

enum { GM_BLOCK_INACTIVE = 0, GM_BLOCK_ALLOCATED = 1, GM_BLOCK_PENDING = 2 };

typedef struct gm_block_info {
  uint64_t address, size, requested_size;
  uint32_t id;   /* allocation id, or UINT32_MAX when inactive */
  int state;     /* GM_BLOCK_* */
} gm_block_info_t;

/* gm_snapshot fills up to nseg segments and nblk blocks and stores the
 * numbers needed in *need_seg and *need_blk; call with zero capacities
 * first to size the arrays. Expandable segments appear as one segment per
 * mapped run, as PyTorch's snapshot shows them. */
void gm_snapshot(const gm_alloc_t *a, gm_segment_info_t *segs, size_t nseg,
                 gm_block_info_t *blks, size_t nblk, size_t *need_seg,
                 size_t *need_blk);

/* A flat block of gm_flat_step: every mapped block in address order,
 * seg_size on the first block of each segment (mapped run), 0 on the rest.
 * Go's alloc.FlatBlock has its layout (TestFlatBlockLayout), so that Go
 * reads a step's blocks in place. */
typedef struct gm_flat_block {
  uint64_t address, size, seg_size;
  uint32_t seg_blocks; /* blocks of its segment */
  uint32_t id;         /* allocation id, or UINT32_MAX when inactive */
  uint8_t state;       /* GM_BLOCK_* */
  uint8_t pad[7];
} gm_flat_block_t;

/* gm_flat_t follows the block list from one gm_flat_step to the next;
 * zero it before the first, gm_flat_free it after the last. */
typedef struct gm_flat_seg gm_flat_seg_t; /* gm_steps.c */
typedef struct gm_flat {
  /* the list is kept segment by segment (segv, in address order; fen
   * counts their blocks, a Fenwick tree); cur is the whole list, made
   * when asked (gm_flat_list), prev the last list for a whole walk */
  gm_flat_block_t *prev, *cur, *ins, *ins_buf;
  size_t nprev, ncur, prev_cap, cur_cap, ins_cap;
  int cur_ok; /* cur holds the list now */
  size_t pos, del, nins; /* the last list's [pos, pos+del) became ins[0, nins) */
  gm_flat_seg_t **segv; /* each its own allocation: a step moves pointers */
  uint64_t *fen;
  size_t nseg, segv_cap, fen_cap;
  const void *alloc; /* the allocator, as it was when its segment count */
  uint64_t seg_gen;  /* was seg_gen */
  uint64_t since_key, last_key; /* gm_run_steps's whole lists */
  /* the changes of two segments' block counts not yet in fen, the
   * latest first: segment fen_k[j] (its index + 1; 0 none) changed by
   * fen_d[j], and fen_pre[j] is fen's count of the blocks before it
   * (gm_steps.c, fen_add) */
  size_t fen_k[2], fen_pre[2];
  uint64_t fen_d[2];
} gm_flat_t;

/* gm_flat_step sets pos, del and ins (nins blocks): the one replacement
 * that turns the previous call's list into the list now (the blocks
 * between their common head and tail), and ncur, the list's length. It
 * walks again only the segments changed since the last call (the
 * allocator marks them) and those made since, and takes those removed
 * since out of its list (the allocator lists them), where segments were
 * made or removed comparing the whole list with the last; under the checker (gm_config_t's check) it compares the list
 * and the change with a walk of every segment (GM_ECORRUPT when they
 * differ). GM_EBACKEND when out of host memory. */
int gm_flat_step(gm_alloc_t *a, gm_flat_t *f);
/* gm_flat_list makes cur the whole list after the last step (ncur
 * blocks); GM_EBACKEND when out of host memory. */
int gm_flat_list(gm_flat_t *f);
void gm_flat_free(gm_flat_t *f);

/* One op of gm_run_steps: its change of the list (gm_flat_t's pos, del,
 * nins), the list's length after it, whether the whole list follows
 * its inserted blocks in gm_steps_t's blocks, and whether the op raised
 * the reserved peak (gm_extra_t's peak_op became this op). */
typedef struct gm_step {
  uint64_t pos, del, nins, nlist;
  uint64_t key, peak;
} gm_step_t;

typedef struct gm_steps {
  gm_step_t *ops;
  gm_flat_block_t *blocks;
  size_t nops, nblocks, ops_cap, blocks_cap;
  gm_oom_t oom; /* of an op that ran out of memory */
  /* with keep_peak set: the whole list after the last op of the call that
   * raised the reserved peak (its index among the call's ops, peak_at),
   * npeak blocks; peak_in says one did */
  int keep_peak, peak_in;
  size_t peak_at;
  gm_flat_block_t *peak;
  size_t npeak, peak_cap;
} gm_steps_t;

/* gm_run_steps applies ops one at a time (op numbers from base, as
 * gm_devlog_at), each as gm_run would (tl, when not NULL, sampled as
 * gm_run samples it, its base the first op's) and followed by
 * gm_flat_step, writing each op's change to s (emptied first): its
 * inserted blocks, and the whole list after an op where the changes since
 * the last whole list hold as many blocks as it and at least key_gap ops
 * (key_gap > 0) passed since. It stops after an op that failed for memory
 * (GM_ENOMEM, its change written, s->oom set) or at an error (the op's
 * status; GM_EBACKEND when host memory ran out); *done counts the ops
 * applied. With s->keep_peak it copies the whole list after each op that
 * raises the reserved peak into s->peak (the call's last such op's
 * stays). */
int gm_run_steps(gm_alloc_t *a, const gm_op_t *ops, size_t n, uint64_t base, uint64_t key_gap,
                 gm_timeline_t *tl, gm_flat_t *f, gm_steps_t *s, size_t *done);
void gm_steps_free(gm_steps_t *s);

/* gm_largest_free returns the size of the largest free mapped block. */
uint64_t gm_largest_free(const gm_alloc_t *a);

/* gm_placement_ties is 0 while no decision so far could have gone
 * otherwise had the segments sat at other addresses (those the simulated
 * device's other placement gives), with the same sizes and offsets: 1 once
 * one could. Only the pytorch policy watches (it is 1 from the start under
 * any other): best fit found a block whose equals in (stream, size) span
 * two segments, which only addresses order; or it took a path it does not
 * follow (expandable segments, a claim by address, the release of
 * oversize blocks). Releasing every free segment (empty_cache, garbage
 * collection) is a set, in whatever order. */
int gm_placement_ties(const gm_alloc_t *a);

/* gm_placement_watch runs `other`, a second simulated device (the other
 * placement), beside a's own device, call for call (gm_watch.c), and takes
 * ownership of it; a must not have obtained memory yet. While the other
 * device answers every call alike and puts each live range (cudaMalloc or
 * reservation) in the same order among the others, an allocator on it
 * would make a's decisions and end with a's statistics:
 * gm_placement_agrees is 1 then, 0 once a call disagreed or an op claimed
 * a block by address (the other device is then no longer called), and -1
 * without a watch. GM_EINVAL when a already has memory or a watch, or a
 * backend lacks an entry. */
int gm_placement_watch(gm_alloc_t *a, const gm_backend_t *other);
int gm_placement_agrees(const gm_alloc_t *a);

/* Figures beyond memory_stats that reports need. */
typedef struct gm_extra {
  uint64_t ops;              /* operations applied so far */
  uint64_t peak_op;          /* the op after which reserved first reached its peak */
  int64_t allocated_at_peak; /* most allocated bytes seen while reserved was at its peak */
  int64_t live_bytes;        /* live requests, each rounded up to 512 B */
  int64_t live_bytes_peak;   /* its peak: a lower bound for any allocator */
} gm_extra_t;

void gm_get_extra(const gm_alloc_t *a, gm_extra_t *e);

/* gm_check verifies invariants I1-I8; on failure it returns GM_ECORRUPT and
 * writes a one-line reason to msg (NUL terminated, at most len bytes). */
int gm_check(const gm_alloc_t *a, char *msg, size_t len);

/* gm_round_size is PyTorch's round_size under config c (exposed for tests
 * and reports). */
uint64_t gm_round_size(const gm_config_t *c, uint64_t size);

#ifdef __cplusplus
}
#endif
#endif /* GM_ALLOC_H */
