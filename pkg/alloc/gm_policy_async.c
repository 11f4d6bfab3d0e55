/* gm_policy_async.c — an approximation of the CUDA driver's stream-ordered
 * pool (cudaMallocAsync) as PyTorch configures it
 * (backend:cudaMallocAsync: release threshold UINT64_MAX, empty_cache =
 * cudaMemPoolTrimTo(pool, 0)).
 *
 * The driver's placement is closed source; what is modelled is what its
 * documentation and observed behaviour show:
 *   - physical memory comes in chunks of whole 2 MiB granules, a request
 *     getting a chunk of at least its own size, rounded up;
 *   - requests (rounded to 512 B) are sub-allocated best fit inside the
 *     chunks, per stream (reuse follows stream order), with coalescing;
 *   - the pool can remap idle physical memory, so before it grows it gives
 *     up every chunk with nothing allocated in it (any stream) and grows
 *     by the request alone.
 * Real pools differ in chunk sizes and in when idle memory is remapped;
 * reports call this policy an approximation. */
#include "gm_bestfit.h"

static int async_malloc(gm_alloc_t *a, const gm_request_t *rq, gm_block_t **out,
                        gm_oom_t *oom) {
  uint64_t n = gm_up(rq->size, GM_MIN_BLOCK);
  gm_block_t *b = gm_pol_best_fit(a, rq->stream, n);
  if (!b) {
    uint64_t chunk = gm_up(n, GM_PAGE);
    gm_pol_release_idle(a);
    int rc = gm_pol_seg_alloc(a, chunk, rq->stream, rq->hint, &b);
    if (rc == GM_ENOMEM) return gm_oom(a, rq->size, n, chunk, rq->stream, oom);
    if (rc != GM_OK) return rc;
  }
  if (!(*out = gm_pol_take(a, b, n, 1, rq->size))) return GM_EBACKEND;
  return GM_OK;
}

static void async_free(gm_alloc_t *a, gm_block_t *b) { gm_pol_give(a, b, b->seg->stream); }

static void async_empty_cache(gm_alloc_t *a) {
  a->st.num_sync_all_streams++; /* cudaMemPoolTrimTo after a device sync */
  gm_pol_release_idle(a);
}

const gm_policy_t gm_policy_async = {
    .info = {.name = "cuda-async",
             .summary = "a model of the driver's stream-ordered pool (cudaMallocAsync), not a replica",
             .note = "backend:cudaMallocAsync selects the driver's pool, whose internals are closed: "
                     "gpumem models it, it does not replicate it, so measure on the GPU before switching"},
    .malloc = async_malloc,
    .free = async_free,
    .empty_cache = async_empty_cache,
};
