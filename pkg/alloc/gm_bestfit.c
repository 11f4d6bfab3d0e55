/* gm_bestfit.c — the coalescing best-fit engine over whole device
 * allocations that the rmm-pool, bfc, cupy and cuda-async policies are
 * built from (see gm_bestfit.h). */
#include "gm_bestfit.h"

/* ------------------------------------------------------------------ */
/* inactive split: the free blocks of segments holding more than one   */

static void acct(gm_alloc_t *a, gm_seg_t *ps, int sign) {
  if (ps->nblocks < 2 || ps->nfree == 0) return;
  gm_pool_t *pool = ps->pool;
  if (sign > 0) {
    GM_INC(a, inactive_split, pool, ps->nfree);
    GM_INC(a, inactive_split_bytes, pool, (int64_t)ps->free_bytes);
  } else {
    GM_DEC(a, inactive_split, pool, ps->nfree);
    GM_DEC(a, inactive_split_bytes, pool, (int64_t)ps->free_bytes);
  }
}

int gm_pol_seg_alloc(gm_alloc_t *a, uint64_t size, uint64_t stream, uint64_t hint,
                     gm_block_t **out) {
  int rc = gm_seg_alloc(a, &a->large, size, stream, hint, out);
  if (rc != GM_OK) return rc;
  gm_seg_t *s = (*out)->seg;
  s->nblocks = s->nfree = 1;
  s->free_bytes = size;
  return GM_OK;
}

gm_block_t *gm_pol_take(gm_alloc_t *a, gm_block_t *b, uint64_t size, int split, uint64_t orig) {
  gm_seg_t *ps = b->seg;
  acct(a, ps, -1);
  if (b->in_set == GM_SET_FREE) gm_free_erase(b);
  if (split && b->size > size) {
    gm_block_t *rest = gm_block_beside(a, b, b->ptr + size, b->size - size, 1);
    if (!rest) return NULL;
    b->size = size;
    gm_free_insert(rest);
    ps->nblocks++;
  } else {
    ps->nfree--;
  }
  ps->free_bytes -= b->size;
  acct(a, ps, +1);
  gm_count_alloc(a, b, orig);
  return b;
}

static int mergeable(const gm_block_t *n, uint64_t key) {
  return n && n->in_set == GM_SET_FREE && n->stream == key;
}

/* merge free block b (not in the set) with its free neighbours of the same
 * key and insert it */
static void coalesce(gm_alloc_t *a, gm_seg_t *ps, gm_block_t *b) {
  if (mergeable(b->prev, b->stream)) {
    gm_block_absorb(a, b, b->prev);
    ps->nblocks--;
    ps->nfree--;
  }
  if (mergeable(b->next, b->stream)) {
    gm_block_absorb(a, b, b->next);
    ps->nblocks--;
    ps->nfree--;
  }
  gm_free_insert(b);
}

void gm_pol_give(gm_alloc_t *a, gm_block_t *b, uint64_t key) {
  gm_seg_t *ps = b->seg;
  gm_count_free(a, b);
  acct(a, ps, -1);
  ps->nfree++;
  ps->free_bytes += b->size;
  b->stream = key;
  coalesce(a, ps, b);
  acct(a, ps, +1);
}

void gm_pol_rekey(gm_alloc_t *a, gm_block_t *b, uint64_t key) {
  gm_seg_t *ps = b->seg;
  acct(a, ps, -1);
  gm_free_erase(b);
  b->stream = key;
  coalesce(a, ps, b);
  acct(a, ps, +1);
}

uint64_t gm_pol_release_idle(gm_alloc_t *a) {
  uint64_t n = 0;
  for (gm_seg_t *s = a->segs, *next; s; s = next) {
    next = s->next_seg;
    gm_block_t *b = s->head;
    if (s->expandable || !b || b->next || b->in_set != GM_SET_FREE) continue;
    n += s->size;
    gm_release_block(a, b);
  }
  return n;
}
