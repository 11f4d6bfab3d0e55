/* gm_policy.h — the contract between the engine (gm_alloc.c) and the
 * allocation policies (gm_policy_*.c, one file each, listed in
 * gm_policies.h), and the one set of bookkeeping helpers every policy uses.
 *
 * The engine owns what every policy shares: allocation ids, pending frees
 * (record_stream, free requests), the "more than 1 EB" refusal, the
 * allocation statistics of gm_run's frees, the timeline, the peaks, seeding's
 * checks, the private pools' use counts (gm_pools.c), the checker after
 * every op. A policy owns where blocks go: it obtains segments, places,
 * splits, merges and releases blocks, and moves the statistics of what it
 * does. Policies call the helpers below; the engine calls a policy only
 * through its gm_policy_t.
 *
 * Every policy keeps the invariants of gm_alloc.h (I1-I6) after each hook
 * returns: gm_check runs after every op in the tests. */
#ifndef GM_POLICY_H
#define GM_POLICY_H

#include <stdlib.h>

#include "gm_treap.h"

#define GM_PAGE 2097152ull /* the CUDA virtual-memory granule on current GPUs */

/* One allocation request, as the engine hands it to a policy's malloc and
 * releases hooks: a GM_OP_ALLOC's fields (or, when a truncated trace is
 * seeded without a seed hook, a seeded block's). */
typedef struct gm_request {
  uint64_t size;   /* bytes asked for: 0 < size < 2^60 */
  uint64_t stream;
  uint64_t hint;   /* the recorded address, passed on to the backend when a
                      segment is made; 0 = none */
  uint32_t pool;   /* the private pool it is routed to (gm_op_t.pool);
                      0 = the default pools */
  uint8_t claim;   /* GM_OPF_CLAIM: it takes the free block starting at
                      hint in that pool, whatever its size class */
} gm_request_t;

/* A policy: its description and its hooks. */
struct gm_policy {
  gm_policy_info_t info; /* name, summary, sweep note, GM_TRAIT_* */

  /* init (optional): set up a->pol_state and adjust a->cfg. Called once by
   * gm_new, before any other hook, with the config already stripped of
   * PyTorch's knobs unless info.traits has GM_TRAIT_PYTORCH_KNOBS. A
   * non-GM_OK result fails gm_new (destroy is not called). */
  int (*init)(gm_alloc_t *a);

  /* malloc: serve request rq (rq->pool and rq->claim matter only to a
   * policy with private pools; see release_pool_blocks).
   * On GM_OK *out is a block of the request's pool with allocated = 1,
   * requested = rq->size, uses = 0, out of every set, and every statistic
   * moved: segments and reserved bytes for what was obtained,
   * allocation/active/requested through gm_count_alloc. The engine then
   * sets its id. On GM_ENOMEM (gm_oom: counted, *oom filled) the policy
   * holds no more than before the request beyond what it keeps cached,
   * and no block is handed out; other codes are backend failures. */
  int (*malloc)(gm_alloc_t *a, const gm_request_t *rq, gm_block_t **out, gm_oom_t *oom);

  /* free: b's last use is over. The engine has already cleared allocated,
   * pending and the id, and moved the allocation statistics (allocation,
   * allocated_bytes, oversize_allocations); b is in no set. The policy
   * undoes the active and requested counts (gm_count_free or its own
   * equivalent) and makes the memory reusable or gives it back. */
  void (*free)(gm_alloc_t *a, gm_block_t *b);

  /* empty_cache: torch.cuda.empty_cache(). Pending frees may be completed
   * first (gm_synchronize_and_free_events); what is returned to the device
   * is the policy's choice (GM_TRAIT_KEEPS_CACHE: nothing). */
  void (*empty_cache)(gm_alloc_t *a);

  /* seed (optional): lay out a truncated trace's starting segment of `size`
   * bytes holding blocks[0..n) as recorded (gm_seed_segment's contract;
   * the engine has checked the blocks and that their ids are free). Live
   * blocks move every statistic an allocation moves and are gm_live_add'ed;
   * pending ones are gm_pend_push'ed and move only the active ones. The
   * engine sets no id: the hook maps a->ids[id] to each block. NULL: the engine seeds each block by its
   * own malloc instead, as the policy would have placed it. */
  int (*seed)(gm_alloc_t *a, uint64_t hint, uint64_t size, uint64_t stream, int small,
              const gm_seed_block_t *blocks, size_t n);

  /* release_pool_blocks (optional): give the whole free segments of
   * `pool`, the small or the large half of a private pool, back to the
   * device, as empty_cache does for the default pools (PyTorch's
   * release_blocks). A policy has private pools (PyTorch's graph pools and
   * MemPool; gm_pools.c) exactly when it has this hook: its malloc routes
   * each request to the pool rq->pool names (0 = the default pools)
   * through gm_pool_for, and the engine applies GM_OP_POOL_RELEASE (the
   * pool's use count drops; at 0 it is freeable) and GM_OP_POOL_EMPTY. The
   * hook is called from gm_pools.c for both halves of each freeable pool
   * that gm_pools_release_freeable or GM_OP_POOL_EMPTY frees. Without it
   * both ops are no-ops and the policy ignores rq->pool and rq->claim. */
  void (*release_pool_blocks)(gm_alloc_t *a, gm_pool_t *pool);

  /* releases (optional): whether malloc, asked now to serve rq, would give
   * cached memory back before it got the memory: no cached block serves it
   * and the cap or the device refuses a new segment. It changes nothing.
   * Without it the engine never empties the cache for
   * GM_OPF_RELEASED_BEFORE. */
  int (*releases)(gm_alloc_t *a, const gm_request_t *rq);

  /* destroy (optional): free a->pol_state and leave segments gm_free can
   * return whole (gm_free frees each segment, unmapping mapped blocks of
   * expandable ones). */
  void (*destroy)(gm_alloc_t *a);
};

#define GM_POLICY_DECL(id, sym) extern const gm_policy_t sym;
GM_POLICIES(GM_POLICY_DECL)
#undef GM_POLICY_DECL

static inline uint64_t gm_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

static inline unsigned gm_log2_floor(uint64_t x) { return 63u - (unsigned)__builtin_clzll(x); }

static inline uint64_t gm_roundup_power2_next_division(uint64_t size, uint64_t div) {
  if ((size & (size - 1)) == 0) return size;
  uint64_t floor = 1ull << gm_log2_floor(size);
  uint64_t step = floor >> gm_log2_floor(div);
  if (step == 0) return floor << 1;
  uint64_t r = size & ~(step - 1);
  return r == size ? size : r + step;
}

/* gm_round_size's body (PyTorch's round_size), inlined where a malloc
 * calls it. */
static inline uint64_t gm_round(const gm_config_t *c, uint64_t size) {
  if (size < GM_MIN_BLOCK) return GM_MIN_BLOCK;
  unsigned lg = gm_log2_floor(size);
  unsigned idx = lg > 20 ? lg - 20 : 0;
  if (idx > 15) idx = 15;
  uint64_t div = c->roundup_power2_divisions[idx];
  if (div > 1 && size > GM_MIN_BLOCK * div) return gm_roundup_power2_next_division(size, div);
  return GM_MIN_BLOCK * ((size + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK);
}


/* ---- statistics ---- */

/* a->st keeps, of each stat, what moves on every op: current and peak,
 * and allocated of the single stats and of the large and small entries.
 * The rest follows from these, and gm_get_stats fills it in: freed is
 * allocated - current (both start at 0 and move by the same amounts, and
 * nothing resets them), and the "all" entry's allocated is large's plus
 * small's (GM_INC moves "all" with the pool's entry, always). Leaving them
 * out saves fifteen additions an alloc-and-free pair. So in a->st every
 * freed and the "all" entries' allocated stay 0 (gm_check's I4). */
static inline void gm_st_inc(gm_stat_t *s, int64_t n) {
  s->current += n;
  if (s->current > s->peak) s->peak = s->current;
  s->allocated += n;
}

/* gm_st_inc for an "all" entry: no allocated. */
static inline void gm_st_inc_all(gm_stat_t *s, int64_t n) {
  s->current += n;
  if (s->current > s->peak) s->peak = s->current;
}

static inline void gm_st_dec(gm_stat_t *s, int64_t n) { s->current -= n; }

/* by arithmetic (is_small is 0 or 1): an add where a select took four
 * instructions, on every move of a pool's statistic */
_Static_assert(GM_STAT_SMALL == GM_STAT_LARGE + 1, "gm_pool_stat adds is_small");
static inline int gm_pool_stat(const gm_pool_t *p) { return GM_STAT_LARGE + p->is_small; }

/* Move a stat array for "all" and the pool's type: the only way a stat
 * array changes. */
#define GM_INC(a, arr, pool, n) \
  (gm_st_inc_all(&(a)->st.arr[GM_STAT_ALL], (n)), gm_st_inc(&(a)->st.arr[gm_pool_stat(pool)], (n)))
#define GM_DEC(a, arr, pool, n) \
  (gm_st_dec(&(a)->st.arr[GM_STAT_ALL], (n)), gm_st_dec(&(a)->st.arr[gm_pool_stat(pool)], (n)))

/* Account for the live block a malloc returns: allocated = 1, requested,
 * uses = 0; allocation, allocated, active, requested and oversize counts.
 * gm_count_free undoes the active and requested counts of a block that
 * stops being active. These and the block helpers below are inline: they
 * run on every alloc and free. */
static inline void gm_count_alloc(gm_alloc_t *a, gm_block_t *b, uint64_t orig) {
  gm_pool_t *pool = b->pool;
  gm_touch(b);
  b->allocated = 1;
  b->requested = orig;
  b->uses = 0;
  GM_INC(a, allocation, pool, 1);
  GM_INC(a, allocated_bytes, pool, (int64_t)b->size);
  GM_INC(a, active, pool, 1);
  GM_INC(a, active_bytes, pool, (int64_t)b->size);
  GM_INC(a, requested_bytes, pool, (int64_t)orig);
  if (b->size >= a->cfg.max_split_size) gm_st_inc(&a->st.oversize_allocations, 1);
}

static inline void gm_count_free(gm_alloc_t *a, gm_block_t *b) {
  GM_DEC(a, active, b->pool, 1);
  GM_DEC(a, active_bytes, b->pool, (int64_t)b->size);
  GM_DEC(a, requested_bytes, b->pool, (int64_t)b->requested);
}


/* Fill *oom (may be NULL) with the request and the memory in use. */
void gm_oom_record(gm_alloc_t *a, uint64_t orig, uint64_t rounded, uint64_t alloc_size,
                   uint64_t stream, gm_oom_t *oom);
/* An out-of-memory: counted (num_ooms) and recorded; returns GM_ENOMEM. */
int gm_oom(gm_alloc_t *a, uint64_t orig, uint64_t rounded, uint64_t alloc_size, uint64_t stream,
           gm_oom_t *oom);

/* ---- blocks and the free and unmapped sets ---- */

/* Block structs, recycled (gm_block_new, gm_block_delete); treap
 * priorities are deterministic, so the order of gm_block_new calls is part
 * of a policy's behaviour. gm_block_of: a new block [ptr, ptr+size) of b's
 * segment, with b's stream and pool, in no list or set yet. gm_block_beside:
 * the same, linked into the segment's list right after b (after != 0) or
 * right before it; the caller shrinks b to match and puts the block in a
 * set. Both NULL when out of host memory. */
/* gm_block_fill sets every field of block struct b but its priority:
 * one store each (a compound literal of the whole struct became a `rep
 * stos`, slow to start for 136 bytes), in no list or set. */
static inline void gm_block_fill(gm_block_t *b, uint64_t stream, uint64_t size, uint64_t ptr,
                                 gm_pool_t *pool, gm_seg_t *seg) {
  b->stream = stream;
  b->size = size;
  b->ptr = ptr;
  b->left = b->right = b->parent = b->snext = b->sprev = NULL;
  b->requested = 0;
  b->prev = b->next = b->pend_next = NULL;
  b->pool = pool;
  b->seg = seg;
  b->gc_base = 0;
  b->allocated = b->pending = b->uses = b->in_set = 0;
  b->id = GM_NO_ID;
  b->mapped = 1;
}

/* gm_block_raw: a block struct, recycled or new, with its priority drawn
 * and nothing else set. */
static inline gm_block_t *gm_block_raw(gm_alloc_t *a) {
  gm_block_t *b = a->spare;
  if (b)
    a->spare = b->next;
  else if (!(b = malloc(sizeof *b)))
    return NULL;
  /* xorshift32: deterministic treap priorities */
  uint32_t x = a->rng;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  a->rng = x;
  b->prio = x;
  return b;
}

static inline gm_block_t *gm_block_new(gm_alloc_t *a) {
  gm_block_t *b = gm_block_raw(a);
  if (b) gm_block_fill(b, 0, 0, 0, NULL, NULL);
  return b;
}

/* b's fields are read before x's are written: the compiler cannot know
 * that x, off the spare list, is not b, and would otherwise store every
 * field twice. */
static inline gm_block_t *gm_block_of(gm_alloc_t *a, const gm_block_t *b, uint64_t ptr, uint64_t size) {
  uint64_t stream = b->stream;
  gm_pool_t *pool = b->pool;
  gm_seg_t *seg = b->seg;
  gm_block_t *x = gm_block_raw(a);
  if (!x) return NULL;
  gm_block_fill(x, stream, size, ptr, pool, seg);
  gm_touch(x);
  return x;
}

static inline gm_block_t *gm_block_beside(gm_alloc_t *a, gm_block_t *b, uint64_t ptr, uint64_t size, int after) {
  gm_block_t *x = gm_block_of(a, b, ptr, size);
  if (!x) return NULL;
  if (after) {
    x->prev = b;
    x->next = b->next;
    if (b->next) b->next->prev = x;
    b->next = x;
  } else {
    x->prev = b->prev;
    x->next = b;
    if (b->prev) b->prev->next = x;
    else b->seg->head = x;
    b->prev = x;
  }
  return x;
}

static inline void gm_block_delete(gm_alloc_t *a, gm_block_t *b) {
  b->seg = NULL; /* in no segment: gm_flat_step skips it among the touched */
  b->in_set = 0;  /* in no set, for a best-fit hint that still points at it */
  b->next = a->spare;
  a->spare = b;
}


static inline int gm_idle_free(const gm_block_t *b) {
  return b && !(b->allocated | b->pending | b->uses); /* one branch for three flags */
}

/* Free blocks: the pool's free set, keyed (stream, size, ptr); a
 * lower_bound there is best fit, lowest address among equals. */
/* A block a release would give back (a whole segment, or one of an
 * expandable segment) enters pool's free set: the pool is not settled.
 * The policy with releases (pytorch) calls it where such a block enters;
 * a block leaving the set, or split, makes none. Nor does the remainder
 * of a split: the block split was in the free set, so its pool was not
 * settled (I3), or its pages were mapped just now (map_block calls it). */
static inline void gm_unsettle(gm_pool_t *pool) { pool->settled = 0; }

static inline void gm_free_insert(gm_block_t *b) {
  gm_touch(b);
  b->gc_base = b->pool->clock;
  b->in_set = GM_SET_FREE;
  gm_treap_insert(&b->pool->free, b, gm_less_size);
}

static inline void gm_free_erase(gm_block_t *b) {
  gm_touch(b);
  gm_treap_erase(&b->pool->free, b);
  b->in_set = 0;
}

/* Unmapped ranges of expandable segments, keyed (stream, ptr). */
static inline void gm_unmapped_insert(gm_block_t *b) {
  gm_touch(b);
  b->in_set = GM_SET_UNMAPPED;
  gm_treap_insert(&b->pool->unmapped, b, gm_less_addr);
}

static inline void gm_unmapped_erase(gm_block_t *b) {
  gm_touch(b);
  gm_treap_erase(&b->pool->unmapped, b);
  b->in_set = 0;
}

/* Merge src, a neighbour of dst in its segment, into dst. src leaves
 * whichever set holds it; dst's place in a set is the caller's business
 * (its key changes). Every policy merges through this. */
static inline void gm_block_absorb(gm_alloc_t *a, gm_block_t *dst, gm_block_t *src) {
  gm_touch(dst);
  if (src->in_set == GM_SET_FREE) gm_free_erase(src);
  else if (src->in_set == GM_SET_UNMAPPED) gm_unmapped_erase(src);
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
    if (dst->seg->head == src) dst->seg->head = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  dst->size += src->size;
  gm_block_delete(a, src);
}


/* ---- segments ---- */

/* A segment record, linked first in a->segs; no block yet. */
gm_seg_t *gm_seg_new(gm_alloc_t *a, uint64_t base, uint64_t size, uint64_t stream,
                     gm_pool_t *pool, int expandable, uint64_t page);
void gm_seg_delete(gm_alloc_t *a, gm_seg_t *s);
/* A new segment [base, base+size) and one block covering it, its head:
 * mapped unless the segment is expandable. The block is in no set and
 * counted nowhere yet; NULL, with nothing kept, when host memory runs out. */
gm_block_t *gm_seg_new_whole(gm_alloc_t *a, uint64_t base, uint64_t size, uint64_t stream,
                             gm_pool_t *pool, int expandable, uint64_t page);

/* gm_over_cap: a new segment (or mapping) of size bytes would pass the
 * memory-fraction cap (PyTorch's allowed_memory_maximum). */
static inline int gm_over_cap(const gm_alloc_t *a, uint64_t size) {
  return a->cfg.allowed_memory_maximum && a->total_allocated + size > a->cfg.allowed_memory_maximum;
}

/* gm_seg_count moves the counts of a new segment s obtained whole from the
 * device: device bytes, segments, reserved and oversize-segment counts
 * (not the device-allocation count). gm_release_block undoes them. */
void gm_seg_count(gm_alloc_t *a, const gm_seg_t *s);

/* gm_seg_alloc obtains `size` bytes from the device (cudaMalloc) as a new
 * segment of `pool` holding one free block keyed `stream`, in no set; GM_ENOMEM
 * past the memory fraction. Moves segment, reserved, oversize-segment and
 * device-allocation counts. */
int gm_seg_alloc(gm_alloc_t *a, gm_pool_t *pool, uint64_t size, uint64_t stream, uint64_t hint,
                 gm_block_t **out);

/* gm_pages_mapped and gm_pages_unmapped move the counts of n bytes of an
 * expandable segment of `pool` mapped or unmapped in one backend call:
 * device bytes, reserved bytes, and one device allocation or free. */
void gm_pages_mapped(gm_alloc_t *a, gm_pool_t *pool, uint64_t n);
void gm_pages_unmapped(gm_alloc_t *a, gm_pool_t *pool, uint64_t n);

/* gm_device_total is the card's memory, which sizes an expandable
 * segment's address range: cfg.device_total, else the backend's total
 * (mem_info, asked on the first call only), else 2^40. */
uint64_t gm_device_total(gm_alloc_t *a);

/* gm_release_block returns a non-expandable segment that is the one block
 * b (not allocated) to the device, undoing gm_seg_alloc's counts. */
void gm_release_block(gm_alloc_t *a, gm_block_t *b);

/* ---- private pools (gm_pools.c), for a policy that has them ---- */

/* The pool of this size class that a request routed to pool `id`
 * (rq->pool) goes to: the default pools for 0, else private pool id's
 * (created on first use). NULL when the pool was released (it takes no
 * new allocations) or could not be created. gm_pool_for_private is the
 * out-of-line half, for a private pool. */
gm_pool_t *gm_pool_for_private(gm_alloc_t *a, uint32_t id, int small);
static inline gm_pool_t *gm_pool_for(gm_alloc_t *a, uint32_t id, int small) {
  /* small or large by arithmetic (gm_alloc_t has large right after
   * small): the two interleave in a trace, and a branch mispredicts */
  if (id == 0) return &a->small + !small;
  return gm_pool_for_private(a, id, small);
}
_Static_assert(offsetof(gm_alloc_t, large) == offsetof(gm_alloc_t, small) + sizeof(gm_pool_t) &&
                   offsetof(gm_ppool_t, large) == offsetof(gm_ppool_t, small) + sizeof(gm_pool_t),
               "gm_pool_for finds large right after small");
/* gm_pool_find is gm_pool_for without creating the pool: NULL when private
 * pool id does not exist or is released. */
gm_pool_t *gm_pool_find(gm_alloc_t *a, uint32_t id, int small);
/* The free block of pool owner (NULL = default) starting at addr with at
 * least size bytes, taken out of its free set; NULL when there is none. */
gm_block_t *gm_pool_claim(gm_alloc_t *a, gm_ppool_t *owner, uint64_t addr, uint64_t size,
                          uint64_t stream);
/* release_cached_blocks' tail: every released pool's small then large
 * half goes to the policy's release_pool_blocks; pools left without
 * segments are erased. */
void gm_pools_release_freeable(gm_alloc_t *a);

/* ---- the placement watch (gm_watch.c, gm_placement_watch) ---- */

/* gm_placement_pick: best fit took `it`, the lowest address among the free
 * blocks equal to it in (stream, size); the watch stops unless `it` is the
 * lowest on the other placement too. gm_placement_unfollowed: the policy
 * takes a path whose decisions depend on addresses otherwise (it does not
 * follow them): gm_placement_ties is 1 from then on, and the watch stops. */
void gm_placement_pick_slow(gm_alloc_t *a, const gm_block_t *it);
static inline void gm_placement_pick(gm_alloc_t *a, const gm_block_t *it) {
  /* `it` alone of its size and stream is the lowest on both placements:
   * no call (most picks, in a training loop's replay) */
  const gm_block_t *n = it->snext;
  if (a->watch && n && n->stream == it->stream && n->size == it->size) gm_placement_pick_slow(a, it);
}
void gm_placement_unfollowed(gm_alloc_t *a);

/* ---- pending frees and seeding ---- */

/* Queue b (not allocated) to wait for a later GM_OP_FREE_COMPLETE. */
void gm_pend_push(gm_alloc_t *a, gm_block_t *b);
/* Every pending free completes (a device synchronisation). */
void gm_synchronize_and_free_events(gm_alloc_t *a);
/* A live request of `requested` bytes begins: live_bytes and its peak. */
void gm_live_add(gm_alloc_t *a, uint64_t requested);

#endif
