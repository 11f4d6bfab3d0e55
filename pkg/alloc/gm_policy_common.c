/* gm_policy_common.c — bookkeeping shared by the policies other than
 * pytorch and nocache, and the coalescing best-fit engine the rmm-pool, bfc,
 * cupy and cuda-async policies are built from (see gm_policy.h). */
#include <stdlib.h>
#include <string.h>

#include "gm_policy.h"

gm_seg_t *gm_pol_seg_new(gm_alloc_t *a, uint64_t base, uint64_t size, uint64_t stream,
                         int expandable, uint64_t page) {
  gm_pseg_t *ps = calloc(1, sizeof *ps);
  if (!ps) return NULL;
  gm_seg_t *s = &ps->s;
  s->base = base;
  s->size = size;
  s->stream = stream;
  s->pool = &a->large;
  s->expandable = expandable;
  s->page = page;
  s->next_seg = a->segs;
  if (a->segs) a->segs->prev_seg = s;
  a->segs = s;
  return s;
}

void gm_pol_seg_delete(gm_alloc_t *a, gm_seg_t *s) {
  if (s->prev_seg) s->prev_seg->next_seg = s->next_seg;
  else a->segs = s->next_seg;
  if (s->next_seg) s->next_seg->prev_seg = s->prev_seg;
  free(s);
}

void gm_pol_count_alloc(gm_alloc_t *a, gm_block_t *b, uint64_t orig) {
  gm_pool_t *pool = b->pool;
  b->allocated = 1;
  b->requested = orig;
  b->uses = 0;
  GM_INC(a, allocation, pool, 1);
  GM_INC(a, allocated_bytes, pool, (int64_t)b->size);
  GM_INC(a, active, pool, 1);
  GM_INC(a, active_bytes, pool, (int64_t)b->size);
  GM_INC(a, requested_bytes, pool, (int64_t)orig);
}

void gm_pol_count_free(gm_alloc_t *a, gm_block_t *b) {
  GM_DEC(a, active, b->pool, 1);
  GM_DEC(a, active_bytes, b->pool, (int64_t)b->size);
  GM_DEC(a, requested_bytes, b->pool, (int64_t)b->requested);
}

int gm_pol_oom(gm_alloc_t *a, uint64_t orig, uint64_t rounded, uint64_t alloc_size,
               uint64_t stream, gm_oom_t *oom) {
  a->st.num_ooms++;
  if (oom) {
    memset(oom, 0, sizeof *oom);
    oom->size = orig;
    oom->rounded = rounded;
    oom->alloc_size = alloc_size;
    oom->stream = stream;
    a->be.mem_info(a->be.ctx, &oom->device_free, &oom->device_total);
    oom->allowed = a->cfg.allowed_memory_maximum;
    oom->allocated = a->st.allocated_bytes[GM_STAT_ALL].current;
    oom->reserved = a->st.reserved_bytes[GM_STAT_ALL].current;
  }
  return GM_ENOMEM;
}

/* ------------------------------------------------------------------ */
/* inactive split: the free blocks of segments holding more than one   */

static void acct(gm_alloc_t *a, gm_pseg_t *ps, int sign) {
  if (ps->nblocks < 2 || ps->nfree == 0) return;
  gm_pool_t *pool = ps->s.pool;
  if (sign > 0) {
    GM_INC(a, inactive_split, pool, ps->nfree);
    GM_INC(a, inactive_split_bytes, pool, (int64_t)ps->free_bytes);
  } else {
    GM_DEC(a, inactive_split, pool, ps->nfree);
    GM_DEC(a, inactive_split_bytes, pool, (int64_t)ps->free_bytes);
  }
}

int gm_pol_segment(gm_alloc_t *a, uint64_t size, uint64_t stream, uint64_t hint, gm_block_t **out) {
  if (a->cfg.allowed_memory_maximum && a->total_allocated + size > a->cfg.allowed_memory_maximum)
    return GM_ENOMEM;
  uint64_t ptr = 0;
  int rc = a->be.malloc(a->be.ctx, size, hint, &ptr);
  if (rc != GM_OK) return rc;
  gm_seg_t *s = gm_pol_seg_new(a, ptr, size, stream, 0, 0);
  gm_block_t *b = s ? gm_block_new(a) : NULL;
  if (!b) {
    if (s) gm_pol_seg_delete(a, s);
    a->be.free(a->be.ctx, ptr, size);
    return GM_EBACKEND;
  }
  b->ptr = ptr;
  b->size = size;
  b->stream = stream;
  b->pool = &a->large;
  b->seg = s;
  s->head = b;
  gm_pseg_t *ps = (gm_pseg_t *)s;
  ps->nblocks = ps->nfree = 1;
  ps->free_bytes = size;
  a->total_allocated += size;
  GM_INC(a, segment, &a->large, 1);
  GM_INC(a, reserved_bytes, &a->large, (int64_t)size);
  a->st.num_device_alloc++;
  *out = b;
  return GM_OK;
}

gm_block_t *gm_pol_take(gm_alloc_t *a, gm_block_t *b, uint64_t size, int split, uint64_t orig) {
  gm_pseg_t *ps = (gm_pseg_t *)b->seg;
  acct(a, ps, -1);
  if (b->in_set == GM_SET_FREE) gm_free_erase(b);
  if (split && b->size > size) {
    gm_block_t *rest = gm_block_new(a);
    if (!rest) return NULL;
    rest->ptr = b->ptr + size;
    rest->size = b->size - size;
    rest->stream = b->stream;
    rest->pool = b->pool;
    rest->seg = b->seg;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    gm_free_insert(rest);
    ps->nblocks++;
  } else {
    ps->nfree--;
  }
  ps->free_bytes -= b->size;
  acct(a, ps, +1);
  gm_pol_count_alloc(a, b, orig);
  return b;
}

static int mergeable(const gm_block_t *n, uint64_t key) {
  return n && n->in_set == GM_SET_FREE && n->stream == key;
}

/* merge free block b (not in the set) with its free neighbours of the same
 * key and insert it */
static void coalesce(gm_alloc_t *a, gm_pseg_t *ps, gm_block_t *b) {
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
  gm_pseg_t *ps = (gm_pseg_t *)b->seg;
  gm_pol_count_free(a, b);
  acct(a, ps, -1);
  ps->nfree++;
  ps->free_bytes += b->size;
  b->stream = key;
  coalesce(a, ps, b);
  acct(a, ps, +1);
}

void gm_pol_rekey(gm_alloc_t *a, gm_block_t *b, uint64_t key) {
  gm_pseg_t *ps = (gm_pseg_t *)b->seg;
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
    a->be.free(a->be.ctx, s->base, s->size);
    a->st.num_device_free++;
    a->total_allocated -= s->size;
    GM_DEC(a, segment, s->pool, 1);
    GM_DEC(a, reserved_bytes, s->pool, (int64_t)s->size);
    n += s->size;
    gm_free_erase(b);
    gm_pol_seg_delete(a, s);
    gm_block_delete(a, b);
  }
  return n;
}

/* ------------------------------------------------------------------ */
