/* gm_pools.c — private memory pools (CUDA graphs, torch.cuda.MemPool);
 * docs/pytorch-allocator.md §19.
 *
 * PyTorch's PrivatePool (CUDACachingAllocator.cpp): a pool has its own
 * small and large free sets, and the segments created for allocations routed
 * to it point at them. get_pool sends an allocation there while a capture or
 * MemPool window routes its stream or thread to the pool; get_free_block then
 * searches only that pool, so private and default blocks never serve each
 * other. create_or_incref_pool makes a pool with use_count 1; releasePool
 * (graph reset, ~MemPool) takes one away, and at 0 the pool joins
 * graph_pools_freeable. Only then do release_cached_blocks (empty_cache, the
 * OOM retry) or emptyCache(id) (~MemPool) return its whole free segments:
 * while a pool lives, empty_cache leaves them. A released pool whose last
 * segment goes is erased; one with live blocks keeps them, and their
 * segments go at a later release once whole free.
 *
 * Here a pool is named by a small integer (gm_op_t.pool) that the caller
 * maps to PyTorch's MempoolId_t; 0 is the default pool.
 *
 * The pools are the engine's: it applies GM_OP_POOL_RELEASE and
 * GM_OP_POOL_EMPTY here, for a policy that has private pools (one with the
 * release_pool_blocks hook of gm_policy.h). That policy routes allocations
 * (gm_pool_for, gm_pool_claim) and calls gm_pools_release_freeable where
 * PyTorch's release_cached_blocks does; how the whole free segments of a
 * freed pool go back to the device is its hook's business. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gm_policy.h"

static gm_ppool_t *pool_get(const gm_alloc_t *a, uint32_t id) {
  return id && id < a->nppools ? a->ppools[id] : NULL;
}

/* create_or_incref_pool, the create half: the first allocation routed to a
 * pool stands for beginAllocateToPool. */
static gm_ppool_t *pool_create(gm_alloc_t *a, uint32_t id) {
  if (id >= a->nppools) {
    size_t n = a->nppools ? a->nppools : 8;
    while (n <= id) n *= 2; /* id < 2^32: n stays below 2^33 */
    gm_ppool_t **v = realloc(a->ppools, (size_t)n * sizeof *v);
    if (!v) return NULL;
    memset(v + a->nppools, 0, (size_t)(n - a->nppools) * sizeof *v);
    a->ppools = v;
    a->nppools = n;
  }
  gm_ppool_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->id = id;
  p->use_count = 1;
  p->small.is_small = 1;
  p->small.owner = p->large.owner = p;
  a->ppools[id] = p;
  return p;
}

gm_pool_t *gm_pool_for_private(gm_alloc_t *a, uint32_t id, int small) {
  if (id != 0 && !pool_get(a, id) && !pool_create(a, id)) return NULL;
  return gm_pool_find(a, id, small); /* a released pool cannot be revived */
}

gm_pool_t *gm_pool_find(gm_alloc_t *a, uint32_t id, int small) {
  if (id == 0) return &a->small + !small; /* gm_pool_for's arithmetic */
  gm_ppool_t *p = pool_get(a, id);
  if (!p || p->use_count == 0) return NULL;
  return &p->small + !small;
}

void gm_pool_seg_added(gm_seg_t *s) {
  if (s->pool->owner) s->pool->owner->nsegs++;
}

void gm_pool_seg_removed(gm_seg_t *s) {
  if (s->pool->owner) s->pool->owner->nsegs--;
}

/* The index in a->freeable where id is or would go. */
static size_t freeable_at(const gm_alloc_t *a, uint32_t id) {
  size_t lo = 0, hi = a->nfreeable;
  while (lo < hi) {
    size_t m = lo + (hi - lo) / 2;
    if (a->freeable[m] < id)
      lo = m + 1;
    else
      hi = m;
  }
  return lo;
}

static void pool_erase(gm_alloc_t *a, gm_ppool_t *p) {
  size_t k = freeable_at(a, p->id);
  if (k < a->nfreeable && a->freeable[k] == p->id) {
    memmove(a->freeable + k, a->freeable + k + 1, (a->nfreeable - k - 1) * sizeof *a->freeable);
    a->nfreeable--;
  }
  a->ppools[p->id] = NULL;
  free(p);
}

/* One freeable pool's part of release_cached_blocks: the policy gives back
 * its halves' whole free segments. A pool is freeable only after
 * gm_pool_release, which the engine runs only for a policy that has the
 * hook. */
static void release_pool(gm_alloc_t *a, gm_ppool_t *p) {
  a->pol->release_pool_blocks(a, &p->small);
  a->pol->release_pool_blocks(a, &p->large);
  if (p->nsegs == 0) pool_erase(a, p);
}

/* graph_pools_freeable is a hash map in PyTorch; with several freeable
 * pools its order is unspecified, and here it is by id. A pool erased on
 * the way leaves the list, and the next comes to its place. */
void gm_pools_release_freeable(gm_alloc_t *a) {
  for (size_t k = 0; k < a->nfreeable;) {
    uint32_t id = a->freeable[k];
    release_pool(a, a->ppools[id]);
    if (k < a->nfreeable && a->freeable[k] == id) k++;
  }
}

/* releasePool: the graph or MemPool that held the pool is gone. */
int gm_pool_release(gm_alloc_t *a, uint32_t id) {
  gm_ppool_t *p = pool_get(a, id);
  if (!p || p->use_count == 0) return GM_EINVAL;
  if (p->use_count == 1) { /* freeable now */
    if (gm_grow((void **)&a->freeable, &a->capfreeable, a->nfreeable + 1, sizeof *a->freeable) != GM_OK)
      return GM_EBACKEND;
    size_t k = freeable_at(a, id);
    memmove(a->freeable + k + 1, a->freeable + k, (a->nfreeable - k) * sizeof *a->freeable);
    a->freeable[k] = id;
    a->nfreeable++;
  }
  p->use_count--;
  return GM_OK;
}

/* emptyCache(id), as ~MemPool calls it after releasePool: a pool that is
 * not freeable is left alone (no sync either); a freeable one syncs (its own
 * events, counted as a full sync) and returns its whole free segments. */
int gm_pool_empty(gm_alloc_t *a, uint32_t id) {
  if (id == 0) return GM_EINVAL;
  gm_ppool_t *p = pool_get(a, id);
  if (!p || p->use_count > 0) return GM_OK;
  gm_synchronize_and_free_events(a);
  release_pool(a, p);
  return GM_OK;
}

gm_block_t *gm_pool_claim(gm_alloc_t *a, gm_ppool_t *owner, uint64_t addr, uint64_t size,
                          uint64_t stream) {
  for (gm_seg_t *s = a->segs; s; s = s->next_seg) {
    if (s->pool->owner != owner || s->expandable || addr < s->base || addr >= s->base + s->size)
      continue;
    for (gm_block_t *b = s->head; b; b = b->next) {
      if (b->ptr != addr) continue;
      if (b->in_set != GM_SET_FREE || b->stream != stream || b->size < size) return NULL;
      gm_treap_erase(&b->pool->free, b);
      b->in_set = 0;
      return b;
    }
    return NULL;
  }
  return NULL;
}

size_t gm_pools_list(const gm_alloc_t *a, const gm_pool_t **out, size_t n) {
  size_t k = 0;
  for (size_t i = 1; i < a->nppools; i++) {
    gm_ppool_t *p = a->ppools[i];
    if (!p) continue;
    if (k < n) out[k] = &p->small;
    k++;
    if (k < n) out[k] = &p->large;
    k++;
  }
  return k;
}

/* I6: segment counts, owners and use counts of the private pools. */
int gm_pools_check(const gm_alloc_t *a, char *msg, size_t len) {
  size_t nfree = 0; /* freeable pools seen, in id order: the list's */
  for (size_t i = 1; i < a->nppools; i++) {
    const gm_ppool_t *p = a->ppools[i];
    if (!p) continue;
    if (p->use_count == 0 && (nfree >= a->nfreeable || a->freeable[nfree++] != i)) {
      if (msg && len) snprintf(msg, len, "I6: private pool %zu: freeable, not in the freeable list in id order", i);
      return GM_ECORRUPT;
    }
    uint64_t n = 0;
    for (const gm_seg_t *s = a->segs; s; s = s->next_seg) n += s->pool->owner == p;
    const char *why = NULL;
    if (p->id != i || p->small.owner != p || p->large.owner != p || !p->small.is_small || p->large.is_small)
      why = "links broken";
    else if (n != p->nsegs)
      why = "segment count differs from its segments";
    else if (p->use_count < 0)
      why = "negative use count";
    if (why) {
      if (msg && len) snprintf(msg, len, "I6: private pool %zu: %s", i, why);
      return GM_ECORRUPT;
    }
  }
  if (nfree != a->nfreeable) {
    if (msg && len) snprintf(msg, len, "I6: the freeable list holds %zu pools, %zu are freeable", a->nfreeable, nfree);
    return GM_ECORRUPT;
  }
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg) {
    const gm_ppool_t *o = s->pool->owner;
    if (o && (o->id >= a->nppools || a->ppools[o->id] != o)) {
      if (msg && len) snprintf(msg, len, "I6: segment 0x%llx belongs to an erased private pool",
                               (unsigned long long)s->base);
      return GM_ECORRUPT;
    }
  }
  return GM_OK;
}

uint64_t gm_pools_free_bytes(const gm_alloc_t *a) {
  uint64_t n = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg)
    if (s->pool->owner)
      for (const gm_block_t *b = s->head; b; b = b->next)
        if (b->in_set == GM_SET_FREE) n += b->size;
  return n;
}

void gm_pools_destroy(gm_alloc_t *a) {
  for (size_t i = 0; i < a->nppools; i++) free(a->ppools[i]);
  free(a->ppools);
  a->ppools = NULL;
  a->nppools = 0;
  free(a->freeable);
  a->freeable = NULL;
  a->nfreeable = a->capfreeable = 0;
}

void gm_pool_get(const gm_alloc_t *a, uint32_t id, gm_pool_info_t *out) {
  memset(out, 0, sizeof *out);
  const gm_ppool_t *p = pool_get(a, id);
  if (!p) return;
  out->exists = 1;
  out->use_count = p->use_count;
  out->segments = p->nsegs;
}
