/* gm_policy_rmm.c — RAPIDS RMM's pool_memory_resource
 * (rmm/mr/pool_memory_resource.hpp, detail/stream_ordered_memory_resource.hpp,
 * detail/coalescing_free_list.hpp).
 *
 * Free blocks are kept per stream and coalesced with address neighbours of
 * the same list, never across two upstream allocations. An allocation
 * (rounded to 512 B here; RMM aligns to 256 B) takes, in order:
 *   1. the best fit in its own stream's list;
 *   2. the best fit in another stream's list (RMM then makes the stream wait
 *      on that stream's event), the remainder staying in that list;
 *   3. after merging, stream by stream, another stream's whole list into its
 *      own, the best fit there;
 *   4. a new upstream block: size_to_grow is max(request, pool size) with no
 *      maximum (the pool doubles), or, under a memory fraction (RMM's
 *      maximum_pool_size), max(request, remaining / 2) if the request fits
 *      what remains; a failed upstream call is retried at half the size down
 *      to the request. The block is split exactly and the rest kept.
 * A freed block joins the list of the stream that frees it, which is the
 * stream it was allocated on. The initial pool size is 0, and RMM's pool
 * never returns memory upstream before it is destroyed: empty_cache does
 * nothing. Streams are visited in the order of their handles (RMM's map is
 * ordered by event). */
#include "gm_bestfit.h"

/* the first free block of the stream after `stream`, or NULL */
static gm_block_t *next_stream(gm_alloc_t *a, uint64_t stream) {
  if (stream == UINT64_MAX) return NULL;
  gm_block_t key = {0};
  key.stream = stream + 1;
  return gm_treap_lower_bound(a->large.free, &key, gm_less_size);
}

/* step 2: a block from another stream's list, taken as it is */
static gm_block_t *from_other(gm_alloc_t *a, uint64_t stream, uint64_t n) {
  gm_block_t key = {0};
  gm_block_t *f = gm_treap_lower_bound(a->large.free, &key, gm_less_size);
  while (f) {
    uint64_t s = f->stream;
    if (s != stream) {
      gm_block_t *b = gm_pol_best_fit(a, s, n);
      if (b) return b;
    }
    f = next_stream(a, s);
  }
  return NULL;
}

/* step 3: merge other streams' lists into this one until a block fits */
static gm_block_t *merge_others(gm_alloc_t *a, uint64_t stream, uint64_t n) {
  gm_block_t key = {0};
  gm_block_t *f = gm_treap_lower_bound(a->large.free, &key, gm_less_size);
  while (f) {
    uint64_t s = f->stream;
    if (s == stream) {
      f = next_stream(a, s);
      continue;
    }
    /* move every block of s, smallest first; each move takes it out of s */
    while (f && f->stream == s) {
      gm_pol_rekey(a, f, stream);
      key.stream = s;
      key.size = 0;
      key.ptr = 0;
      f = gm_treap_lower_bound(a->large.free, &key, gm_less_size);
    }
    gm_block_t *b = gm_pol_best_fit(a, stream, n);
    if (b) return b;
    f = next_stream(a, s);
  }
  return NULL;
}

static int expand(gm_alloc_t *a, uint64_t n, uint64_t stream, uint64_t hint, gm_block_t **out) {
  uint64_t pool = a->total_allocated, grow;
  uint64_t max = a->cfg.allowed_memory_maximum;
  if (max) {
    uint64_t remaining = max > pool ? gm_up(max - pool, 256) : 0;
    grow = n <= remaining ? (n > remaining / 2 ? n : gm_up(remaining / 2, GM_MIN_BLOCK)) : 0;
    if (!grow) return GM_ENOMEM;
  } else {
    grow = n > pool ? n : pool;
  }
  for (uint64_t try = grow; try >= n;) {
    int rc = gm_pol_seg_alloc(a, try, stream, hint, out);
    if (rc != GM_ENOMEM) return rc;
    if (try == n) break;
    try = try / 2 > n ? gm_up(try / 2, GM_MIN_BLOCK) : n;
  }
  return GM_ENOMEM;
}

static int rmm_malloc(gm_alloc_t *a, const gm_request_t *rq, gm_block_t **out, gm_oom_t *oom) {
  uint64_t n = gm_up(rq->size, GM_MIN_BLOCK), stream = rq->stream;
  gm_block_t *b = gm_pol_best_fit(a, stream, n);
  if (!b) b = from_other(a, stream, n);
  if (!b) b = merge_others(a, stream, n);
  if (!b) {
    int rc = expand(a, n, stream, rq->hint, &b);
    if (rc == GM_ENOMEM) return gm_oom(a, rq->size, n, n, stream, oom);
    if (rc != GM_OK) return rc;
  }
  if (!(*out = gm_pol_take(a, b, n, 1, rq->size))) return GM_EBACKEND;
  (*out)->stream = stream;
  return GM_OK;
}

static void rmm_free(gm_alloc_t *a, gm_block_t *b) { gm_pol_give(a, b, b->stream); }

static void rmm_empty_cache(gm_alloc_t *a) { (void)a; }

const gm_policy_t gm_policy_rmm = {
    .info = {.name = "rmm-pool",
             .summary = "RAPIDS RMM's pool_memory_resource: per-stream coalescing best fit, the pool doubling",
             .traits = GM_TRAIT_KEEPS_CACHE},
    .malloc = rmm_malloc,
    .free = rmm_free,
    .empty_cache = rmm_empty_cache,
};
