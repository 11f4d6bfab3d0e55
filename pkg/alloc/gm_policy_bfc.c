/* gm_policy_bfc.c — TensorFlow's / XLA's BFC allocator with allow_growth
 * (tsl/framework/bfc_allocator.cc).
 *
 * One allocator per device: free chunks are shared by all streams (TF runs
 * one compute stream; cross-stream safety is left to the pending frees of
 * the replay). Requests are rounded to 512 B here (TF rounds to 256 B; the
 * difference is under 256 B per block). The 21 bins, each a set ordered by
 * (size, address) and searched from the request's bin upwards, return the
 * smallest free chunk that fits, the lowest address among equals: best fit,
 * which the (stream, size, address) set gives directly. The chunk is split
 * only when it is at least twice the request or the leftover is at least
 * 128 MiB (kMaxInternalFragmentation); otherwise the whole chunk is handed
 * out. Freed chunks merge with free neighbours in their region.
 *
 * Growth (Extend): the first region is 2 MiB; a request larger than the
 * next region size doubles it until it fits; each region after one that
 * did not need doubling is twice as large; a failed region is retried at
 * 90% down to the request. With garbage collection (on by default), a
 * failed Extend first returns every region with nothing in use. Regions are
 * never returned otherwise; empty_cache does nothing (TF has none). */
#include <stdlib.h>

#include "gm_bestfit.h"

typedef struct bfc {
  uint64_t region;  /* curr_region_allocation_bytes_ */
  uint64_t limit;   /* memory_limit_ */
} bfc_t;

static int bfc_init(gm_alloc_t *a) {
  bfc_t *s = calloc(1, sizeof *s);
  if (!s) return GM_ENOMEM;
  s->region = GM_PAGE;
  s->limit = a->cfg.allowed_memory_maximum;
  if (!s->limit) {
    uint64_t f = 0, t = 0;
    s->limit = a->be.mem_info(a->be.ctx, &f, &t) == GM_OK && f ? f : 1ull << 50;
  }
  a->pol_state = s;
  return GM_OK;
}

static uint64_t round_down(uint64_t x) { return x / GM_MIN_BLOCK * GM_MIN_BLOCK; }

/* Extend: a new region that holds n bytes */
static int extend(gm_alloc_t *a, bfc_t *s, uint64_t n, uint64_t hint, gm_block_t **out) {
  uint64_t avail = s->limit > a->total_allocated ? round_down(s->limit - a->total_allocated) : 0;
  if (n > avail) return GM_ENOMEM;
  int increased = 0;
  while (n > s->region) {
    s->region *= 2;
    increased = 1;
  }
  uint64_t bytes = s->region < avail ? s->region : avail;
  int rc = gm_pol_seg_alloc(a, bytes, 0, hint, out);
  while (rc == GM_ENOMEM) {
    bytes = gm_up((uint64_t)((double)bytes * 0.9), GM_MIN_BLOCK);
    if (bytes < n) break;
    rc = gm_pol_seg_alloc(a, bytes, 0, hint, out);
  }
  if (rc != GM_OK) return rc;
  if (!increased) s->region *= 2;
  return GM_OK;
}

static int bfc_malloc(gm_alloc_t *a, const gm_request_t *rq, gm_block_t **out, gm_oom_t *oom) {
  bfc_t *s = a->pol_state;
  uint64_t n = gm_up(rq->size, GM_MIN_BLOCK);
  gm_block_t *b = gm_pol_best_fit(a, 0, n);
  if (!b) {
    int rc = extend(a, s, n, rq->hint, &b);
    if (rc == GM_ENOMEM && gm_pol_release_idle(a) > 0) {
      a->st.num_alloc_retries++;
      rc = extend(a, s, n, rq->hint, &b);
    }
    if (rc == GM_ENOMEM) return gm_oom(a, rq->size, n, s->region, rq->stream, oom);
    if (rc != GM_OK) return rc;
  }
  int split = b->size >= 2 * n || b->size - n >= (128ull << 20);
  if (!(*out = gm_pol_take(a, b, n, split, rq->size))) return GM_EBACKEND;
  (*out)->stream = rq->stream; /* for record_stream; freed chunks go back under key 0 */
  return GM_OK;
}

static void bfc_free(gm_alloc_t *a, gm_block_t *b) { gm_pol_give(a, b, 0); }

static void bfc_empty_cache(gm_alloc_t *a) { (void)a; }

static void bfc_destroy(gm_alloc_t *a) {
  free(a->pol_state);
  a->pol_state = NULL;
}

const gm_policy_t gm_policy_bfc = {
    .info = {.name = "bfc",
             .summary = "TensorFlow's best-fit-with-coalescing allocator with allow_growth",
             .traits = GM_TRAIT_KEEPS_CACHE},
    .init = bfc_init,
    .malloc = bfc_malloc,
    .free = bfc_free,
    .empty_cache = bfc_empty_cache,
    .destroy = bfc_destroy,
};
