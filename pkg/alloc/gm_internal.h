/* gm_internal.h — data structures shared by the allocator's C files.
 * Not part of the public API: only gm_*.c include it. */
#ifndef GM_INTERNAL_H
#define GM_INTERNAL_H

#include "gm_alloc.h"

#define GM_MIN_BLOCK 512ull
#define GM_SMALL_SIZE 1048576ull       /* kSmallSize: largest small-pool request */
#define GM_SMALL_BUFFER 2097152ull     /* kSmallBuffer: small segment size */
#define GM_MIN_LARGE_ALLOC 10485760ull /* kMinLargeAlloc */
#define GM_ROUND_LARGE 2097152ull      /* kRoundLarge */
#define GM_NO_ID UINT32_MAX
#define GM_FIT_HINTS 256             /* a power of two: gm_alloc_t's fit_hint */

typedef struct gm_pool gm_pool_t;
typedef struct gm_seg gm_seg_t;
typedef struct gm_ppool gm_ppool_t;

/* A block. Free mapped idle blocks live in their pool's `free` treap keyed
 * (stream, size, ptr); unmapped blocks in its `unmapped` treap keyed
 * (stream, ptr). prev/next link the blocks of one segment in address order;
 * snext/sprev the members of a set in the set's order (gm_treap.h). */
typedef struct gm_block {
  /* the treap's key and links first: what a search step and a walk along
   * the set read */
  uint64_t stream, size, ptr;
  struct gm_block *left, *right;  /* treap children */
  struct gm_block *snext;         /* the next member of its set, NULL at the end */
  uint32_t prio;                  /* treap priority */
  uint32_t id;                    /* allocation id while allocated or pending */
  struct gm_block *sprev;         /* the member before it, NULL at the start */
  struct gm_block *parent;        /* treap parent, NULL at the root */
  uint64_t requested;
  struct gm_block *prev, *next;   /* segment neighbours */
  struct gm_block *pend_next;     /* FIFO of pending frees */
  gm_pool_t *pool;
  gm_seg_t *seg;
  int64_t gc_base;                /* pool clock when inserted in the free set */
  uint8_t allocated;
  uint8_t mapped;
  uint8_t pending;                /* freed, waiting for other streams */
  uint8_t uses;                   /* record_stream recorded another stream */
  uint8_t in_set;                 /* 0, GM_SET_FREE or GM_SET_UNMAPPED */
} gm_block_t;

enum { GM_SET_FREE = 1, GM_SET_UNMAPPED = 2 };

struct gm_pool {
  gm_block_t *free;       /* free mapped idle blocks */
  gm_block_t *unmapped;   /* unmapped expandable ranges */
  int is_small;
  /* settled: the free set holds nothing release_cached_blocks would give
   * back (a whole segment, or a block of an expandable one), as the last
   * release found it; a block entering the set that a release would give
   * back clears it (gm_unsettle) */
  int settled;
  int64_t clock;          /* get_free_blocks_call_count: the GC clock */
  gm_ppool_t *owner;      /* the private pool it belongs to; NULL = default */
};

/* A private pool (PyTorch's PrivatePool; gm_pools.c): its own small and
 * large pools, and the segments that point at them. */
struct gm_ppool {
  uint32_t id;
  int64_t use_count;      /* 0 = released (graph_pools_freeable) */
  uint64_t nsegs;         /* cudaMalloc_count */
  gm_pool_t small, large;
};

/* A segment: one cudaMalloc, or one expandable virtual range. */
struct gm_seg {
  uint64_t base, size, stream, page;
  gm_pool_t *pool;
  gm_block_t *head;       /* lowest block */
  gm_seg_t *prev_seg, *next_seg;
  int expandable;
  /* kept by the best-fit helpers of gm_bestfit.c only, from
   * gm_pol_seg_alloc on (they make inactive_split O(1)): free bytes,
   * blocks, free blocks; 0 in other policies' segments */
  uint64_t free_bytes;
  uint32_t nblocks, nfree;
  /* for gm_steps.c's stepped block list: the allocator, the segment's
   * index in gm_flat_t's address order, and whether it is watched for
   * changes (GM_WATCHED) or changed since the last step (GM_TOUCHED) */
  struct gm_alloc *owner;
  uint32_t flat_k;
  uint8_t touch;
  /* its base on the other placement while a placement watch agrees
   * (gm_watch.c), once the watch has looked it up; 0 before */
  uint64_t other;
};

enum { GM_WATCHED = 1, GM_TOUCHED = 2 };

typedef struct gm_policy gm_policy_t; /* gm_policy.h */

struct gm_alloc {
  const gm_policy_t *pol;  /* from the table in gm_policies.h; never NULL */
  void *pol_state;         /* the policy's own, from its init */
  gm_config_t cfg;
  gm_backend_t be;
  gm_pool_t small, large;
  gm_seg_t *segs;          /* all segments, most recent first */
  gm_block_t **ids;        /* allocation id -> block */
  uint32_t nids;
  gm_block_t *pend_head, *pend_tail;
  gm_block_t *spare;       /* recycled block structs */
  uint64_t total_allocated; /* bytes obtained from the backend */
  uint64_t device_total;   /* the backend's total, once gm_device_total asked it */
  uint32_t rng;
  gm_stats_t st;
  gm_extra_t ex;
  int64_t peak_seen;       /* reserved peak already recorded in ex */
  uint64_t freed;          /* the size of the block the last free freed (gm_run's sizes) */
  /* private pools (gm_pools.c), indexed by id; NULL = none */
  gm_ppool_t **ppools;
  size_t nppools;    /* slots: the highest id ever used + 1, rounded up */
  /* the ids of the freeable pools (use_count 0, not erased), ascending:
   * release_cached_blocks visits these, not every id ever used */
  uint32_t *freeable;
  size_t nfreeable, capfreeable;
  uint8_t follows_recording; /* gm_set_follows_recording: honour GM_OPF_RELEASED_BEFORE */
  gm_oom_event_t *oomev;   /* out-of-memory events gm_run went past */
  size_t noomev, capoomev;
  /* what gm_flat_step follows from one step to the next: the watched
   * segments whose blocks changed since (gm_touch), the blocks of those
   * that are not expandable it was handed (some since merged away),
   * whether one was lost to a failed allocation, a count of segments
   * made and removed, and the list indexes (flat_k) of the watched
   * segments removed since */
  gm_seg_t **touched;
  size_t ntouched, touched_cap;
  gm_block_t **tblocks;
  size_t ntblocks, tblocks_cap;
  uint8_t touch_lost;
  uint64_t seg_gen;
  uint32_t *gone;
  size_t ngone, gone_cap;
  uint8_t placement_ties; /* gm_placement_ties */
  struct gm_watch *watch;  /* the placement watch while it agrees (gm_watch.c); NULL otherwise */
  /* best fit's hints (gm_policy_pytorch.c, find_free_block): by a hash of
   * a request's rounded size, the member that came right before the last
   * search for it (or, with none before, the one it found). A hint is only
   * a guess: it is taken only when the set's threads prove it, or a member
   * a few steps on or back, next to the search's key's place (with I3,
   * which gm_check checks), so it holds no invariant of its own and
   * never needs clearing. Blocks are never freed while the allocator
   * lives (the spare list recycles them), so a hint always points at a
   * block. */
  gm_block_t *fit_hint[GM_FIT_HINTS];
  /* insertion's hints, the same kind of guess, proved the same way
   * (gm_policy_pytorch.c, free_insert_learn): by a hash of a block's
   * size, the member that came right after the last block of that size a
   * split or a merge put in the free set. */
  gm_block_t *ins_hint[GM_FIT_HINTS];
};

/* gm_touch: block b may have changed (made, split, merged, allocated,
 * freed, pending, mapped or unmapped). Every change of a block goes
 * through a function that calls it with that block (gm_block_of,
 * gm_block_absorb, the free and unmapped sets, the allocation
 * bookkeeping), at some time during the op, so that gm_flat_step walks
 * only the segments an op changed, and in a segment that is not
 * expandable only the blocks between the first and the last it was
 * handed that are still there (a block merged away is not: its
 * neighbour that took it is); gm_run_steps checks that against a whole
 * walk under the checker. */
void gm_touch_slow(gm_block_t *b);
/* gm_untouch_seg: watched segment s is being removed (gm_seg_delete). */
void gm_untouch_seg(gm_alloc_t *a, gm_seg_t *s);
static inline void gm_touch(gm_block_t *b) {
  if (b->seg->touch) gm_touch_slow(b);
}

/* gm_pools.c, for the engine and the checker: the private pools' segment
 * counts, the ops on pools, what the checker and the OOM message read.
 * What a policy with private pools calls is in gm_policy.h. */
/* A segment was created in / removed from s->pool (counts cudaMalloc_count). */
void gm_pool_seg_added(gm_seg_t *s);
void gm_pool_seg_removed(gm_seg_t *s);
/* GM_OP_POOL_RELEASE and GM_OP_POOL_EMPTY, which the engine applies for a
 * policy with private pools (gm_policy.h, release_pool_blocks). */
int gm_pool_release(gm_alloc_t *a, uint32_t id);
int gm_pool_empty(gm_alloc_t *a, uint32_t id);
/* Every private small/large pool, for the checker; returns how many. */
size_t gm_pools_list(const gm_alloc_t *a, const gm_pool_t **out, size_t n);
int gm_pools_check(const gm_alloc_t *a, char *msg, size_t len);
/* gm_sim.c, for the checker: I7 on a simulated device's index (GM_OK for
 * any other backend). */
int gm_sim_check(const gm_backend_t *b, char *msg, size_t len);
void gm_pools_destroy(gm_alloc_t *a);
/* Free cached bytes in private pools, for the OOM message. */
uint64_t gm_pools_free_bytes(const gm_alloc_t *a);

/* gm_watch.c, for the device log and the checker: the backend a watch
 * decorates (be itself when it is none); I8. gm_devlog_under is the
 * backend under a's device log, or a's own without one. */
const gm_backend_t *gm_watch_inner(const gm_backend_t *be);
int gm_watch_check(const gm_alloc_t *a, char *msg, size_t len);
/* gm_inspect.c: a checker's failure. Writes the message made from fmt
 * into msg (len bytes, NULL or 0 for none) and returns GM_ECORRUPT. */
int gm_check_fail(char *msg, size_t len, const char *fmt, ...);
const gm_backend_t *gm_devlog_under(const gm_alloc_t *a);

/* gm_grow makes the array *p of *cap elements of elem bytes hold at
 * least need, doubling (from 64) and updating *p and *cap; GM_EBACKEND,
 * with *p unchanged, when the host is out of memory. For the buffers
 * gm_flat_step and gm_run_steps keep from call to call: inline, as it
 * mostly finds the room there (gm_grow_slow, in gm_inspect.c, makes it). */
int gm_grow_slow(void **p, size_t *cap, size_t need, size_t elem);

/* gm_first_at_least is the index of the first of the n elements at base,
 * elem bytes apart, whose uint64_t field at byte offset off is at least
 * key; n when none is. Precondition: the elements are sorted by that
 * field. The address-sorted arrays (the simulated device's chunks, the
 * watch's ranges, a step's blocks) are searched with it; inline, so that
 * elem and off are constants where it is called. */
static inline size_t gm_first_at_least(const void *base, size_t n, size_t elem, size_t off, uint64_t key) {
  const char *b = base;
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (*(const uint64_t *)(b + mid * elem + off) < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
static inline int gm_grow(void **p, size_t *cap, size_t need, size_t elem) {
  return need <= *cap ? GM_OK : gm_grow_slow(p, cap, need, elem);
}

#endif
