/* gm_policy_nocache.c — no caching, like PYTORCH_NO_CUDA_MEMORY_CACHING=1:
 * every request is its own device allocation of the request rounded to
 * 512 B, in PyTorch's pool for its size, and every free returns it at once.
 * max_split_size still counts oversize allocations and segments, as in
 * PyTorch; expandable segments are off. */
#include "gm_policy.h"

static int nocache_init(gm_alloc_t *a) {
  a->cfg.expandable_segments = 0;
  return GM_OK;
}

static int nocache_malloc(gm_alloc_t *a, const gm_request_t *rq, gm_block_t **out,
                          gm_oom_t *oom) {
  uint64_t size = gm_up(rq->size, GM_MIN_BLOCK);
  gm_pool_t *pool = gm_round_size(&a->cfg, rq->size) <= GM_SMALL_SIZE ? &a->small : &a->large;
  gm_block_t *b = NULL;
  int rc = gm_seg_alloc(a, pool, size, rq->stream, rq->hint, &b);
  if (rc == GM_ENOMEM) return gm_oom(a, rq->size, size, size, rq->stream, oom);
  if (rc != GM_OK) return rc;
  gm_count_alloc(a, b, rq->size);
  *out = b;
  return GM_OK;
}

static void nocache_free(gm_alloc_t *a, gm_block_t *b) {
  gm_count_free(a, b);
  gm_release_block(a, b);
}

static void nocache_empty_cache(gm_alloc_t *a) {
  a->st.num_sync_all_streams++; /* nothing cached: only the device sync */
}

const gm_policy_t gm_policy_nocache = {
    .info = {.name = "nocache",
             .summary = "no caching: every request a cudaMalloc, every free a cudaFree",
             .note = "it is PYTORCH_NO_CUDA_MEMORY_CACHING=1, not a PYTORCH_CUDA_ALLOC_CONF setting: "
                     "every allocation becomes a cudaMalloc and every free a cudaFree "
                     "({device_allocs} device allocations here), which is slow",
             .traits = GM_TRAIT_PYTORCH_KNOBS},
    .init = nocache_init,
    .malloc = nocache_malloc,
    .free = nocache_free,
    .empty_cache = nocache_empty_cache,
};
