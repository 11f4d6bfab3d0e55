/* gm_policy.h — what the policies other than pytorch and nocache share
 * (gm_policy_common.c): statistics, block and segment bookkeeping, and the
 * coalescing best-fit engine over whole device allocations that the rmm-pool,
 * bfc, cupy and cuda-async policies are built from.
 *
 * These policies keep every block in the large pool (they have no small
 * pool), so the small-pool statistics stay zero. Free blocks live in
 * a->large.free keyed (stream, size, addr): a lower_bound there is best fit,
 * smallest block first and the lowest address among equals, which is what
 * RMM's, TensorFlow's and CuPy's searches return. A policy that shares free
 * memory between streams gives every free block the same stream key. */
#ifndef GM_POLICY_H
#define GM_POLICY_H

#include "gm_treap.h"

#define GM_PAGE 2097152ull /* the CUDA virtual-memory granule on current GPUs */

static inline uint64_t gm_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

/* statistics, as gm_alloc.c moves them */
static inline void gm_st_inc(gm_stat_t *s, int64_t n) {
  s->current += n;
  if (s->current > s->peak) s->peak = s->current;
  s->allocated += n;
}

static inline void gm_st_dec(gm_stat_t *s, int64_t n) {
  s->current -= n;
  s->freed += n;
}

#define GM_POOL_STAT(pool) ((pool)->is_small ? GM_STAT_SMALL : GM_STAT_LARGE)
#define GM_INC(a, arr, pool, n) \
  (gm_st_inc(&(a)->st.arr[GM_STAT_ALL], (n)), gm_st_inc(&(a)->st.arr[GM_POOL_STAT(pool)], (n)))
#define GM_DEC(a, arr, pool, n) \
  (gm_st_dec(&(a)->st.arr[GM_STAT_ALL], (n)), gm_st_dec(&(a)->st.arr[GM_POOL_STAT(pool)], (n)))

/* A segment with the counts that keep inactive_split current in O(1): a
 * segment of more than one block contributes its free blocks. */
typedef struct gm_pseg {
  gm_seg_t s; /* first: a gm_seg_t* to it is a gm_pseg_t* */
  uint64_t free_bytes;
  uint32_t nblocks, nfree;
} gm_pseg_t;

gm_seg_t *gm_pol_seg_new(gm_alloc_t *a, uint64_t base, uint64_t size, uint64_t stream,
                         int expandable, uint64_t page);
void gm_pol_seg_delete(gm_alloc_t *a, gm_seg_t *s);

static inline void gm_free_insert(gm_block_t *b) {
  b->in_set = GM_SET_FREE;
  gm_treap_insert(&b->pool->free, b, gm_cmp_size);
}

static inline void gm_free_erase(gm_block_t *b) {
  gm_treap_erase(&b->pool->free, b);
  b->in_set = 0;
}

/* best fit: the smallest free block of stream's key holding size bytes */
static inline gm_block_t *gm_pol_best_fit(gm_alloc_t *a, uint64_t stream, uint64_t size) {
  gm_block_t key = {0};
  key.stream = stream;
  key.size = size;
  gm_block_t *b = gm_treap_lower_bound(a->large.free, &key, gm_cmp_size);
  return b && b->stream == stream ? b : NULL;
}

/* Account for the live block a malloc returns (allocated, active, requested). */
void gm_pol_count_alloc(gm_alloc_t *a, gm_block_t *b, uint64_t orig);
/* Undo the active and requested counts of a block that stops being active. */
void gm_pol_count_free(gm_alloc_t *a, gm_block_t *b);

/* Fill *oom (may be NULL) and count the out-of-memory. */
int gm_pol_oom(gm_alloc_t *a, uint64_t orig, uint64_t rounded, uint64_t alloc_size,
               uint64_t stream, gm_oom_t *oom);

/* ---- the engine over whole device allocations (non-expandable) ---- */

/* gm_pol_segment obtains `size` bytes from the device as a new segment
 * holding one free block, not yet in the free set, keyed `stream`. */
int gm_pol_segment(gm_alloc_t *a, uint64_t size, uint64_t stream, uint64_t hint, gm_block_t **out);

/* gm_pol_take hands out `size` bytes from the front of free block b (in the
 * free set or not), splitting off the rest as a free block when split is
 * set and something is left. The result is allocated and counted. */
gm_block_t *gm_pol_take(gm_alloc_t *a, gm_block_t *b, uint64_t size, int split, uint64_t orig);

/* gm_pol_give makes block b free again under stream key `key`, merging it
 * with free neighbours of the same key. */
void gm_pol_give(gm_alloc_t *a, gm_block_t *b, uint64_t key);

/* gm_pol_rekey moves free block b to stream key `key`, merging it with free
 * neighbours of that key. */
void gm_pol_rekey(gm_alloc_t *a, gm_block_t *b, uint64_t key);

/* gm_pol_release_idle returns every segment that is one free block to the
 * device; the bytes returned. */
uint64_t gm_pol_release_idle(gm_alloc_t *a);

#endif
