/* gm_bestfit.h — a library for policies: coalescing best fit over whole
 * device allocations (gm_bestfit.c), which the rmm-pool, bfc, cupy and
 * cuda-async policies are built from.
 *
 * These policies keep every block in the large pool (they have no small
 * pool), so the small-pool statistics stay zero. Free blocks live in
 * a->large.free keyed (stream, size, addr): a lower_bound there is best fit,
 * smallest block first and the lowest address among equals, which is what
 * RMM's, TensorFlow's and CuPy's searches return. A policy that shares free
 * memory between streams gives every free block the same stream key.
 * Segments come from gm_pol_seg_alloc, which starts the free-byte and
 * block counts of gm_seg_t that keep inactive_split current in O(1). */
#ifndef GM_BESTFIT_H
#define GM_BESTFIT_H

#include "gm_policy.h"

/* best fit: the smallest free block of stream's key holding size bytes */
static inline gm_block_t *gm_pol_best_fit(gm_alloc_t *a, uint64_t stream, uint64_t size) {
  gm_block_t key = {0};
  key.stream = stream;
  key.size = size;
  gm_block_t *b = gm_treap_lower_bound(a->large.free, &key, gm_less_size);
  return b && b->stream == stream ? b : NULL;
}

/* gm_pol_seg_alloc is gm_seg_alloc in the large pool for these policies:
 * a new segment of one free block b (in no set), its counts started. */
int gm_pol_seg_alloc(gm_alloc_t *a, uint64_t size, uint64_t stream, uint64_t hint,
                     gm_block_t **out);

/* gm_pol_take hands out `size` bytes from the front of free block b (in the
 * free set or not), splitting off the rest as a free block when split is
 * set and something is left. The result is allocated and counted. */
gm_block_t *gm_pol_take(gm_alloc_t *a, gm_block_t *b, uint64_t size, int split, uint64_t orig);

/* gm_pol_give makes block b free again under stream key `key`, merging it
 * with free neighbours of the same key (b's active counts are undone). */
void gm_pol_give(gm_alloc_t *a, gm_block_t *b, uint64_t key);

/* gm_pol_rekey moves free block b to stream key `key`, merging it with free
 * neighbours of that key. */
void gm_pol_rekey(gm_alloc_t *a, gm_block_t *b, uint64_t key);

/* gm_pol_release_idle returns every segment that is one free block to the
 * device; the bytes returned. */
uint64_t gm_pol_release_idle(gm_alloc_t *a);

#endif
