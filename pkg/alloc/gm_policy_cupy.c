/* gm_policy_cupy.c — CuPy's MemoryPool (cupy/cuda/memory.pyx).
 *
 * Requests are rounded up to 512 B. Each stream has its own arena: a freed
 * chunk is reused only by that stream. The search is best fit (the smallest
 * chunk that holds the request, as the sorted bins or the std::set of
 * current CuPy give); the chunk is always split and the remainder kept. On
 * free a chunk merges with free neighbours of the same allocation. A miss
 * calls cudaMalloc for exactly the rounded size; if that fails,
 * free_all_blocks() returns every unsplit free chunk and the call is retried
 * once (CuPy retries again after gc.collect(), which a replay cannot
 * model). empty_cache is free_all_blocks(). */
#include "gm_bestfit.h"

static int cupy_malloc(gm_alloc_t *a, const gm_request_t *rq, gm_block_t **out,
                       gm_oom_t *oom) {
  uint64_t n = gm_up(rq->size, GM_MIN_BLOCK);
  gm_block_t *b = gm_pol_best_fit(a, rq->stream, n);
  if (!b) {
    int rc = gm_pol_seg_alloc(a, n, rq->stream, rq->hint, &b);
    if (rc == GM_ENOMEM) {
      a->st.num_alloc_retries++;
      gm_pol_release_idle(a);
      rc = gm_pol_seg_alloc(a, n, rq->stream, rq->hint, &b);
    }
    if (rc == GM_ENOMEM) return gm_oom(a, rq->size, n, n, rq->stream, oom);
    if (rc != GM_OK) return rc;
  }
  if (!(*out = gm_pol_take(a, b, n, 1, rq->size))) return GM_EBACKEND;
  return GM_OK;
}

static void cupy_free(gm_alloc_t *a, gm_block_t *b) { gm_pol_give(a, b, b->seg->stream); }

static void cupy_empty_cache(gm_alloc_t *a) { gm_pol_release_idle(a); }

const gm_policy_t gm_policy_cupy = {
    .info = {.name = "cupy",
             .summary = "CuPy's MemoryPool: per-stream best fit, one cudaMalloc of the rounded size on a miss"},
    .malloc = cupy_malloc,
    .free = cupy_free,
    .empty_cache = cupy_empty_cache,
};
