/* gm_policy_pytorch.c — PyTorch 2.11's CUDA caching allocator, decision for
 * decision: the `pytorch` policy.
 *
 * Function names follow PyTorch's (get_free_block, alloc_block,
 * release_cached_blocks, ...) so that the two can be read side by side;
 * section numbers (§n) refer to docs/pytorch-allocator.md. */
#include <stdlib.h>
#include <string.h>

#include "gm_policy.h"

/* ------------------------------------------------------------------ */
/* sizes (§3; round_size is gm_round, in gm_policy.h)                  */

static uint64_t allocation_size(const gm_alloc_t *a, uint64_t size) {
  if (size <= GM_SMALL_SIZE) return GM_SMALL_BUFFER;
  if (size < GM_MIN_LARGE_ALLOC) return a->cfg.large_segment_size;
  return GM_ROUND_LARGE * ((size + GM_ROUND_LARGE - 1) / GM_ROUND_LARGE);
}


/* ------------------------------------------------------------------ */
/* blocks                                                              */

static inline int is_split(const gm_block_t *b) { return (b->prev != NULL) | (b->next != NULL); }

/* Whether try_merge_blocks would absorb src into dst. */
static inline int mergeable(const gm_block_t *dst, const gm_block_t *src) {
  return gm_idle_free(src) && src->mapped == dst->mapped;
}

/* try_merge_blocks: absorb src into dst if src is free, idle and in the
 * same mapped state. Returns the bytes absorbed. */
static inline __attribute__((always_inline)) uint64_t try_merge_blocks(gm_alloc_t *a, gm_block_t *dst, gm_block_t *src) {
  if (!mergeable(dst, src)) return 0;
  uint64_t n = src->size;
  gm_block_absorb(a, dst, src);
  return n;
}

/* ------------------------------------------------------------------ */
/* segments from the backend                                           */

typedef struct params {
  uint64_t size, stream, alloc_size, hint;
  gm_pool_t *pool;
  gm_block_t *block;
  /* get_free_block leaves a block it found as the lower bound in the free
   * set, at *link, for alloc_found_block to update in place or erase;
   * pred is the member before it. link is NULL otherwise. */
  gm_block_t **link, *pred;
  int err; /* GM_OK, GM_ENOMEM or GM_EBACKEND from the last attempt */
  int exact; /* a checkpoint-restore claim: split to exactly size */
} params_t;

/* map_block (§9.2): map the pages covering [b->ptr, b->ptr + n). */
static int map_block(gm_alloc_t *a, gm_block_t *b, uint64_t n) {
  gm_seg_t *s = b->seg;
  uint64_t off = b->ptr - s->base;
  uint64_t first = off / s->page;
  uint64_t last = (off + n + s->page - 1) / s->page;
  uint64_t mapped = (last - first) * s->page;
  int rc = a->be.map(a->be.ctx, s->base + first * s->page, mapped, s->page);
  if (rc != GM_OK) return rc;
  gm_pool_t *pool = b->pool;
  gm_unmapped_erase(b);
  b->mapped = 1;
  if (mapped < b->size) {
    gm_block_t *rest = gm_block_beside(a, b, b->ptr + mapped, b->size - mapped, 1);
    if (!rest) return GM_EBACKEND;
    rest->mapped = 0;
    gm_unmapped_insert(rest);
    b->size = mapped;
  }
  try_merge_blocks(a, b, b->prev);
  try_merge_blocks(a, b, b->next);
  gm_free_insert(b);
  gm_unsettle(pool);
  gm_pages_mapped(a, pool, mapped);
  return GM_OK;
}

/* unmap_block (§9.4): unmap the whole pages inside a free block. */
static void unmap_block(gm_alloc_t *a, gm_block_t *b) {
  gm_seg_t *s = b->seg;
  uint64_t lo = (b->ptr - s->base + s->page - 1) / s->page * s->page + s->base;
  uint64_t hi = (b->ptr + b->size - s->base) / s->page * s->page + s->base;
  if (lo >= hi) return;
  uint64_t n = hi - lo;
  if (a->be.unmap(a->be.ctx, lo, n, s->page) != GM_OK) return;
  gm_pool_t *pool = b->pool;
  gm_free_erase(b);
  if (lo > b->ptr) {
    gm_block_t *before = gm_block_beside(a, b, b->ptr, lo - b->ptr, 0);
    if (before) gm_free_insert(before);
  }
  if (b->ptr + b->size > hi) {
    gm_block_t *after = gm_block_beside(a, b, hi, b->ptr + b->size - hi, 1);
    if (after) gm_free_insert(after);
  }
  b->ptr = lo;
  b->size = n;
  b->mapped = 0;
  try_merge_blocks(a, b, b->prev);
  try_merge_blocks(a, b, b->next);
  gm_unmapped_insert(b);
  gm_pages_unmapped(a, pool, n);
}

static void release_expandable_segment(gm_alloc_t *a, gm_block_t *b) {
  gm_seg_t *s = b->seg;
  a->be.va_release(a->be.ctx, s->base, s->size);
  gm_unmapped_erase(b);
  gm_seg_delete(a, s);
  gm_block_delete(a, b);
}

static int allocatable(const gm_block_t *b) { return gm_idle_free(b); }

/* find_expandable_block (§9.2). Returns NULL only if a new segment could
 * not be created. */
static gm_block_t *find_expandable_block(gm_alloc_t *a, params_t *p) {
  gm_pool_t *pool = p->pool;
  gm_block_t key = {0};
  key.stream = p->stream;
  for (gm_block_t *c = gm_treap_lower_bound(pool->unmapped, &key, gm_less_addr);
       c && c->stream == p->stream; c = gm_treap_next(c)) {
    gm_block_t *start = allocatable(c->prev) ? c->prev : c;
    uint64_t bytes = 0;
    for (gm_block_t *b = start; b && bytes < p->size && allocatable(b); b = b->next)
      bytes += b->size;
    if (bytes >= p->size) return start;
  }
  uint64_t page = pool->is_small ? GM_SMALL_BUFFER : a->cfg.large_segment_size;
  uint64_t total = gm_device_total(a);
  uint64_t handles = (total + total / 8 + page - 1) / page;
  uint64_t va = handles * page, base = 0;
  int rc = a->be.va_reserve(a->be.ctx, va, page, &base);
  if (rc != GM_OK) {
    p->err = rc;
    return NULL;
  }
  gm_block_t *b = gm_seg_new_whole(a, base, va, p->stream, pool, 1, page);
  if (!b) {
    a->be.va_release(a->be.ctx, base, va);
    p->err = GM_EBACKEND;
    return NULL;
  }
  gm_unmapped_insert(b);
  return b;
}

static gm_block_t *try_allocate_expandable_block(gm_alloc_t *a, params_t *p) {
  gm_block_t *c = find_expandable_block(a, p);
  if (!c) return NULL;
  /* A request larger than a whole segment's address range (more than the
   * card holds) finds only a new segment too small for it (a candidate
   * run find_expandable_block found is long enough): out of memory, as
   * mapping it on a real card would be, with nothing mapped. */
  if (!c->next && c->size < p->size) {
    p->err = GM_ENOMEM;
    return NULL;
  }
  if (!c->mapped) {
    uint64_t n = c->size < p->size ? c->size : p->size;
    int rc = map_block(a, c, n);
    if (rc != GM_OK) {
      p->err = rc;
      return NULL;
    }
  }
  while (c->size < p->size) {
    gm_block_t *next = c->next;
    uint64_t need = p->size - c->size;
    int rc = map_block(a, next, need < next->size ? need : next->size);
    if (rc != GM_OK) {
      p->err = rc;
      return NULL;
    }
    c = next; /* map_block merged the old candidate into next */
  }
  gm_free_erase(c);
  return c;
}

/* alloc_block (§6.2): a new segment, or new pages of an expandable one. */
static int alloc_block(gm_alloc_t *a, params_t *p, int is_retry) {
  uint64_t size = p->alloc_size;
  if (is_retry) a->st.num_alloc_retries++;
  if (gm_over_cap(a, size)) {
    p->err = GM_ENOMEM;
    return 0;
  }
  if (a->cfg.expandable_segments) {
    p->block = try_allocate_expandable_block(a, p);
    return p->block != NULL;
  }
  int rc = gm_seg_alloc(a, p->pool, size, p->stream, p->hint, &p->block);
  if (rc != GM_OK) {
    p->err = rc;
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------ */
/* the search (§4)                                                     */

static uint64_t expandable_size(const gm_block_t *b) {
  return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* The slot of hint table t (a->fit_hint, a->ins_hint) for size bytes. */
static inline gm_block_t **hint_slot(gm_block_t **t, uint64_t size) {
  return &t[(uint32_t)((size >> 9) * 0x9e3779b1u) >> 24 & (GM_FIT_HINTS - 1)];
}

/* Key's lower bound in pool's free set from h, a hint: 1, with *lb the
 * smallest member >= key (NULL: none) and *pred the member before it
 * (NULL: none), when h is in the set and key's place is at most
 * HINT_STEPS members from it along the threads; 0 otherwise. The threads
 * make that a proof whatever h was when the hint was left: h below key
 * walks on while its successor is below too, h not below walks back
 * while its predecessor is not. A hint is most often the member before
 * the last search's place; where that search found the set's smallest
 * member it is that member (there is none before it), which a split
 * leaves in the set as the remainder, smaller, so below key. */
#define HINT_STEPS 4
static inline int fit_hint_walk(gm_block_t *h, const gm_pool_t *pool, const gm_block_t *key,
                                gm_block_t **lb, gm_block_t **pred) {
  if (!(h && h->in_set == GM_SET_FREE && h->pool == pool)) return 0;
  if (gm_less_size(h, key)) {
    for (int i = 0; h->snext && gm_less_size(h->snext, key); i++) {
      if (i == HINT_STEPS) return 0;
      h = h->snext;
    }
    *pred = h;
    *lb = h->snext;
    return 1;
  }
  for (int i = 0; h->sprev && !gm_less_size(h->sprev, key); i++) {
    if (i == HINT_STEPS) return 0;
    h = h->sprev;
  }
  *pred = h->sprev;
  *lb = h;
  return 1;
}

/* The cached block best fit hands p (NULL: none), and where the search
 * found it (*link, *pred) for alloc_found_block; it changes nothing but
 * the hint. The lower bound comes from the hint when it holds: a training
 * loop asks for the same sizes again and again, and the block just below
 * a size (or the lower bound itself) is often still there when it asks
 * next, where a descent from the root would wait on a load at every
 * level. */
static inline __attribute__((always_inline)) gm_block_t *
find_free_block(gm_alloc_t *a, params_t *p, gm_block_t ***link, gm_block_t **pred) {
  gm_block_t key = {0};
  key.stream = p->stream;
  key.size = p->size;
  gm_block_t **hint = hint_slot(a->fit_hint, p->size), *it;
  if (fit_hint_walk(*hint, p->pool, &key, &it, pred)) {
    *link = it ? gm_treap_link(&p->pool->free, it) : NULL;
  } else {
    *link = gm_treap_lower_bound_link(&p->pool->free, &key, gm_less_size, pred);
    it = *link ? **link : NULL;
  }
  *hint = *pred ? *pred : it;
  if (!it || it->stream != p->stream) return NULL;
  if (it->seg->expandable) {
    /* prefer blocks that are not next to unmapped space: best fit by the
     * size a block can grow to */
    for (;;) {
      gm_block_t *next = gm_treap_next(it);
      if (!it->seg->expandable || !next || next->stream != p->stream ||
          expandable_size(next) >= expandable_size(it))
        break;
      it = next;
    }
  }
  uint64_t ms = a->cfg.max_split_size;
  if (p->size < ms && it->size >= ms) return NULL;
  if (p->size >= ms && it->size >= p->size + a->cfg.max_non_split_rounding_size) return NULL;
  return it;
}

/* gm_placement_ties: it, the lower bound of p's search, is the lowest
 * address among the free blocks of its stream and size; whether those span
 * two segments. They are one run in the order, and the blocks of a segment
 * are one run within it (segments do not overlap): the first's successor
 * tells, unless it shares the first's segment, when the last tells. */
static void note_tie(gm_alloc_t *a, const gm_block_t *it) {
  const gm_block_t *n = gm_treap_next(it);
  if (!n || n->stream != it->stream || n->size != it->size) return;
  if (n->seg == it->seg) {
    gm_block_t key = {.stream = it->stream, .size = it->size, .ptr = UINT64_MAX};
    n = gm_treap_before(it->pool->free, &key, gm_less_size);
  }
  if (n->seg != it->seg) a->placement_ties = 1;
}

static int get_free_block(gm_alloc_t *a, params_t *p) {
  gm_pool_t *pool = p->pool;
  if (a->cfg.allowed_memory_maximum && a->cfg.gc_threshold > 0) pool->clock++;
  gm_block_t **link, *pred;
  gm_block_t *it = find_free_block(a, p, &link, &pred);
  if (!it) return 0;
  if (!a->placement_ties) note_tie(a, it);
  gm_placement_pick(a, it);
  if (*link == it) { /* still the lower bound: alloc_found_block takes it out */
    p->link = link;
    p->pred = pred;
  } else {
    gm_free_erase(it);
  }
  p->block = it;
  return 1;
}

/* ------------------------------------------------------------------ */
/* giving memory back (§6.3, §6.4, §10.2)                              */

/* Blocks of a set in order, into a scratch array the caller frees. */
static gm_block_t **list_set(gm_block_t *root, size_t *n) {
  size_t cnt = gm_treap_count(root);
  gm_block_t **v = malloc((cnt ? cnt : 1) * sizeof *v);
  if (!v) {
    *n = 0;
    return NULL;
  }
  *n = gm_treap_list(root, v, cnt);
  return v;
}

/* A settled pool holds nothing to give back (release_cached_blocks walks
 * every freeable private pool at every empty_cache: most have only the
 * split blocks the last one left), so the walk of its set is skipped. */
static void release_blocks(gm_alloc_t *a, gm_pool_t *pool) {
  if (pool->settled) return;
  size_t n;
  gm_block_t **v = list_set(pool->free, &n);
  size_t nexp = 0;
  for (size_t i = 0; i < n; i++) {
    gm_block_t *b = v[i];
    if (b->seg->expandable) v[nexp++] = b;
    else if (!b->prev && !b->next) gm_release_block(a, b);
  }
  if (v && nexp == 0) pool->settled = 1; /* the whole segments went */
  for (size_t i = 0; i < nexp; i++) {
    gm_block_t *b = v[i];
    unmap_block(a, b);
    if (!b->prev && !b->next && !b->mapped) release_expandable_segment(a, b);
  }
  free(v);
}

static int release_cached_blocks(gm_alloc_t *a) {
  gm_synchronize_and_free_events(a);
  release_blocks(a, &a->large);
  release_blocks(a, &a->small);
  gm_pools_release_freeable(a); /* released private pools, after the default ones */
  return 1;
}

/* Whether b can go back to the device: a whole, non-expandable segment.
 * PyTorch never sees an oversize free block that is not a whole segment
 * (it does not split them), but a what-if replay can: a segment seeded from a
 * truncated trace, or claimed by a checkpoint restore, as recorded under a
 * larger max_split_size. Such a block cannot be freed alone; the release
 * steps pass over it as they pass over expandable ones. */
static inline int releasable(const gm_block_t *b) { return !b->seg->expandable && !is_split(b); }

/* release_available_cached_blocks: free oversize blocks only. */
static int release_available_cached_blocks(gm_alloc_t *a, params_t *p) {
  uint64_t ms = a->cfg.max_split_size;
  if (ms == UINT64_MAX) return 0;
  gm_placement_unfollowed(a); /* which of equal blocks go */
  gm_pool_t *pool = p->pool;
  gm_block_t key = {0};
  key.stream = p->stream;
  key.size = p->size < ms ? ms : p->size;
  gm_block_t *it = gm_treap_lower_bound(pool->free, &key, gm_less_size);
  if (!it || it->stream != p->stream || !releasable(it)) {
    it = gm_treap_before(pool->free, it ? it : &(gm_block_t){.stream = UINT64_MAX, .size = UINT64_MAX, .ptr = UINT64_MAX}, gm_less_size);
    if (!it) return 0;
    uint64_t released = 0;
    while (released < key.size && it->size >= ms && it->stream == p->stream) {
      gm_block_t *cur = it;
      it = gm_treap_prev(cur);
      if (releasable(cur)) {
        released += cur->size;
        gm_release_block(a, cur);
      }
      if (!it) break;
    }
    return released >= key.size;
  }
  gm_release_block(a, it);
  return 1;
}

static void garbage_collect_cached_blocks(gm_alloc_t *a) {
  uint64_t threshold = (uint64_t)(a->cfg.gc_threshold * (double)a->cfg.allowed_memory_maximum);
  if (a->total_allocated <= threshold) return;
  uint64_t target = a->total_allocated - threshold, reclaimed = 0;
  gm_pool_t *pool = &a->large;
  size_t n;
  gm_block_t **v = list_set(pool->free, &n);
  uint64_t total_age = 0;
  int64_t count = 0;
  for (size_t i = 0; i < n; i++)
    if (!is_split(v[i])) {
      total_age += (uint64_t)(pool->clock - v[i]->gc_base);
      count++;
    }
  int freed = 1;
  while (count > 0 && reclaimed < target && freed) {
    double avg = (double)total_age / (double)count;
    freed = 0;
    for (size_t i = 0; i < n; i++) {
      gm_block_t *b = v[i];
      if (!b || is_split(b) || b->seg->expandable) continue;
      uint64_t age = (uint64_t)(pool->clock - b->gc_base);
      if ((double)age >= avg) {
        freed = 1;
        reclaimed += b->size;
        total_age -= age;
        count--;
        v[i] = NULL;
        gm_release_block(a, b);
      }
    }
  }
  free(v);
}

/* ------------------------------------------------------------------ */
/* malloc and free (§5, §6, §7)                                        */

static int should_split(const gm_alloc_t *a, const gm_block_t *b, uint64_t size) {
  uint64_t rest = b->size - size;
  /* both answers, then a select, not branches: small and large requests
   * interleave in a trace */
  int any = rest >= GM_MIN_BLOCK;
  int large = (size < a->cfg.max_split_size) & (rest > GM_SMALL_SIZE);
  return (b->pool->is_small | b->seg->expandable) ? any : large;
}

/* gm_free_insert of free block b (in no set) whose place in the free set
 * is sought first along the threads from a member h near it: the walk
 * proves a hint, whatever it was when left (a block no longer in the set
 * does not count; b, not in it yet, is not h). NEAR_STEPS members at most,
 * after h (after != 0: h below b) or either way (after == 0); then from
 * the root. */
#define NEAR_STEPS 4
static inline void free_insert_near(gm_block_t *b, gm_block_t *h, int after) {
  gm_pool_t *pool = b->pool;
  int near = h && h->in_set == GM_SET_FREE && h->pool == pool, below = near && gm_less_size(h, b);
  gm_touch(b);
  b->gc_base = pool->clock;
  b->in_set = GM_SET_FREE;
  gm_block_t **root = &pool->free;
  if (below ? gm_treap_insert_after(root, b, h, gm_less_size, NEAR_STEPS)
            : near && !after && gm_treap_insert_before(root, b, h, gm_less_size, NEAR_STEPS))
    return;
  gm_treap_insert(root, b, gm_less_size);
}

/* free_insert_near from the insertion hint for b's size, which becomes
 * the member after b: a training loop splits and merges the same sizes
 * again and again, and the next block of a size (a split's remainder, a
 * merged block) lands where the last one did. */
static inline void free_insert_learn(gm_alloc_t *a, gm_block_t *b) {
  gm_block_t **hint = hint_slot(a->ins_hint, b->size);
  free_insert_near(b, *hint, 0);
  *hint = b->snext;
}

static int alloc_found_block(gm_alloc_t *a, params_t *p, uint64_t orig) {
  gm_block_t *b = p->block;
  gm_pool_t *pool = p->pool;
  int already_split = is_split(b);
  int exp = b->seg->expandable;
  int split = p->exact ? b->size > p->size : should_split(a, b, p->size);
  if (p->link) {
    /* b is still in the free set. Split, b becomes the remainder (higher
     * address, smaller size): if that key still ranks after b's
     * predecessor it keeps b's place (it ranks before b's successor, being
     * smaller than b was), and one comparison replaces an erase and an
     * insert. */
    gm_block_t key = {.stream = b->stream, .size = b->size - p->size, .ptr = b->ptr + p->size};
    if (!split || (p->pred && !gm_less_size(p->pred, &key))) {
      gm_treap_erase_at(p->link);
      b->in_set = 0;
    }
    p->link = NULL;
  }
  if (split) {
    gm_block_t *rest = b;
    if (!(b = gm_block_beside(a, rest, rest->ptr, p->size, 0))) return GM_EBACKEND;
    rest->ptr += p->size;
    rest->size -= p->size;
    if (rest->in_set == GM_SET_FREE) { /* kept its place */
      rest->gc_base = pool->clock;
      gm_touch(rest);
    } else {
      free_insert_learn(a, rest); /* no gm_unsettle: see gm_free_insert */
    }
    if (!exp) {
      if (already_split) {
        GM_DEC(a, inactive_split_bytes, pool, (int64_t)b->size);
      } else {
        GM_INC(a, inactive_split_bytes, pool, (int64_t)rest->size);
        GM_INC(a, inactive_split, pool, 1);
      }
    }
  } else if (already_split && !exp) {
    GM_DEC(a, inactive_split_bytes, pool, (int64_t)b->size);
    GM_DEC(a, inactive_split, pool, 1);
  }
  gm_count_alloc(a, b, orig);
  p->block = b;
  return GM_OK;
}


/* pytorch_malloc's path where best fit found nothing: a new segment,
 * then the release steps; GM_OK with p->block, or the error. */
static __attribute__((noinline)) int new_block(gm_alloc_t *a, params_t *p, uint64_t orig, gm_oom_t *oom) {
  /* a new segment's size, asked only here: whether the request is
   * small is a coin toss, and a branch on it in the search mispredicts */
  p->alloc_size = allocation_size(a, p->size);
  if (a->cfg.allowed_memory_maximum && a->cfg.gc_threshold > 0) garbage_collect_cached_blocks(a);
  int found = alloc_block(a, p, 0) ||
              (p->err == GM_ENOMEM && release_available_cached_blocks(a, p) && alloc_block(a, p, 0)) ||
              (p->err == GM_ENOMEM && release_cached_blocks(a) && alloc_block(a, p, 1));
  if (found) return GM_OK;
  if (p->err != GM_ENOMEM) return p->err;
  return gm_oom(a, orig, p->size, p->alloc_size, p->stream, oom);
}

/* malloc (§5): the search, then a new segment, then the release steps. */
static int pytorch_malloc(gm_alloc_t *a, const gm_request_t *rq, gm_block_t **out,
                          gm_oom_t *oom) {
  uint64_t orig = rq->size; /* PyTorch's orig_size */
  params_t p = {0};
  p.stream = rq->stream;
  p.hint = rq->hint;
  p.err = GM_ENOMEM;
  p.size = gm_round(&a->cfg, orig);
  /* the op routes the request to the default or a private pool (get_pool) */
  p.pool = gm_pool_for(a, rq->pool, p.size <= GM_SMALL_SIZE);
  if (!p.pool) return GM_EINVAL;
  if (a->cfg.expandable_segments || rq->claim) { /* not followed */
    gm_placement_unfollowed(a);
  }
  /* a checkpoint restore claims a block by address, not by best fit, at
   * its recorded size, split off exactly (setSegmentStateToCheckpoint) */
  uint64_t exact = gm_up(orig, GM_MIN_BLOCK);
  if (rq->claim && (p.block = gm_pool_claim(a, p.pool->owner, rq->hint, exact, rq->stream))) {
    p.pool = p.block->pool;
    p.size = exact;
    p.exact = 1;
  } else if (!get_free_block(a, &p)) {
    /* a copy goes to the slow path, so that p's address never leaves
     * this function and its fields can live in registers */
    params_t q = p;
    int rc = new_block(a, &q, orig, oom);
    if (rc != GM_OK) return rc;
    p.block = q.block;
  }
  /* one call: the compiler puts alloc_found_block inline, as it does the
   * search (find_free_block, forced: pytorch_releases calls it too) */
  int rc = alloc_found_block(a, &p, orig);
  *out = p.block;
  return rc;
}

/* releases: pytorch_malloc would reach its release steps: get_free_block
 * finds nothing and the first alloc_block is refused by the cap or the
 * device (a claim, by address, is not asked about). */
static int pytorch_releases(gm_alloc_t *a, const gm_request_t *rq) {
  params_t p = {0};
  p.stream = rq->stream;
  p.size = gm_round(&a->cfg, rq->size);
  p.pool = gm_pool_find(a, rq->pool, p.size <= GM_SMALL_SIZE);
  gm_block_t **link, *pred;
  if (p.pool && find_free_block(a, &p, &link, &pred)) return 0;
  uint64_t need = allocation_size(a, p.size);
  if (gm_over_cap(a, need)) return 1;
  uint64_t free_bytes, total;
  return gm_mem_info(a, &free_bytes, &total) == GM_OK && need > free_bytes;
}

/* free_block (§7.2): the memory becomes reusable. */
static void free_block(gm_alloc_t *a, gm_block_t *b) {
  uint64_t orig_size = b->size, requested = b->requested;
  gm_pool_t *pool = b->pool;
  gm_block_t *pv = b->prev, *nx = b->next;
  /* Which neighbours try_merge_blocks would absorb, asked once: merging
   * one leaves the other's answer as it was; absorbed below without
   * asking again. */
  int mp = mergeable(b, pv), mn = mergeable(b, nx);
  /* The last neighbour to be merged that sits in the free set: b, merged,
   * ranks right after it (same stream, larger size), so unless b also
   * passes its successor, b takes its place there and no insert descends.
   * It is looked up after the other neighbour's erase, which may move it. */
  gm_block_t *slot = mn && nx->in_set == GM_SET_FREE ? nx : mp && pv->in_set == GM_SET_FREE ? pv : NULL;
  gm_block_t **link = NULL, *succ = NULL;
  if (mp && pv != slot) gm_block_absorb(a, b, pv);
  if (mn && nx != slot) gm_block_absorb(a, b, nx);
  if (slot) {
    link = gm_treap_link(&pool->free, slot);
    succ = gm_treap_next(slot);
    slot->in_set = 0; /* gm_block_absorb must leave it in the tree */
    gm_block_absorb(a, b, slot);
  }
  /* the inactive split blocks merged away, and their bytes */
  int64_t d_count = -(int64_t)(mp + mn), d_bytes = (int64_t)orig_size - (int64_t)b->size;
  if (link && (!succ || gm_less_size(b, succ))) {
    gm_treap_replace_at(link, slot, b);
    b->gc_base = pool->clock;
    b->in_set = GM_SET_FREE;
  } else if (link) {
    gm_treap_erase_at(link);
    free_insert_learn(a, b);
  } else {
    /* nothing merged: most often a block best fit handed out at a size
     * whose search left a hint, the member before that size's blocks
     * (among which b's place is most often a step or two on) or the
     * first of them */
    free_insert_near(b, *hint_slot(a->fit_hint, b->size), 0);
  }
  if (is_split(b)) {
    d_count += 1;
    d_bytes += (int64_t)b->size;
  } else {
    gm_unsettle(pool); /* a whole segment free again */
  }
  if (!b->seg->expandable) {
    if (d_count > 0) GM_INC(a, inactive_split, pool, d_count);
    else if (d_count < 0) GM_DEC(a, inactive_split, pool, -d_count);
    if (d_bytes > 0) GM_INC(a, inactive_split_bytes, pool, d_bytes);
    else if (d_bytes < 0) GM_DEC(a, inactive_split_bytes, pool, -d_bytes);
  } else {
    gm_unsettle(pool);
  }
  GM_DEC(a, active, pool, 1);
  GM_DEC(a, active_bytes, pool, (int64_t)orig_size);
  GM_DEC(a, requested_bytes, pool, (int64_t)requested);
}

/* ------------------------------------------------------------------ */
/* seeding a truncated trace's starting state                          */

/* Append a block [off, off+size) to segment s after `last`. */
static gm_block_t *seed_block(gm_alloc_t *a, gm_seg_t *s, gm_block_t *last, uint64_t off,
                              uint64_t size) {
  gm_block_t *b = gm_block_new(a);
  if (!b) return NULL;
  b->ptr = s->base + off;
  b->size = size;
  b->stream = s->stream;
  b->pool = s->pool;
  b->seg = s;
  b->prev = last;
  if (last) last->next = b;
  else s->head = b;
  return b;
}

/* seed: the segment as recorded, its gaps free blocks. */
static int pytorch_seed(gm_alloc_t *a, uint64_t hint, uint64_t size, uint64_t stream, int small,
                        const gm_seed_block_t *blocks, size_t n) {
  gm_pool_t *pool = small ? &a->small : &a->large;
  uint64_t base = 0;
  int rc = a->be.malloc(a->be.ctx, size, hint, &base);
  if (rc != GM_OK) return rc;
  gm_seg_t *s = gm_seg_new(a, base, size, stream, pool, 0, 0);
  if (!s) {
    a->be.free(a->be.ctx, base, size);
    return GM_ENOMEM;
  }
  gm_seg_count(a, s); /* but no device allocation: the recording made it */
  gm_block_t *last = NULL;
  uint64_t at = 0;
  for (size_t i = 0; i <= n; i++) {
    uint64_t next = i < n ? blocks[i].offset : size;
    if (next > at) { /* the gap is one free block */
      if (!(last = seed_block(a, s, last, at, next - at))) return GM_ENOMEM;
      gm_free_insert(last);
      gm_unsettle(pool);
    }
    if (i == n) break;
    const gm_seed_block_t *sb = &blocks[i];
    uint64_t end = i + 1 < n ? blocks[i + 1].offset : size;
    uint64_t bs = sb->size ? sb->size : gm_round(&a->cfg, sb->requested);
    if (bs > end - sb->offset) bs = end - sb->offset;
    /* A free block of the large pool is always over 1 MiB (requests there
     * are, and split remainders must be), so a smaller gap after a block
     * of unknown size is slack the block was not split for. */
    if (!sb->size && !small && end - sb->offset - bs <= GM_SMALL_SIZE) bs = end - sb->offset;
    if (!(last = seed_block(a, s, last, sb->offset, bs))) return GM_ENOMEM;
    last->requested = sb->requested;
    last->id = sb->id;
    a->ids[sb->id] = last;
    GM_INC(a, active, pool, 1);
    GM_INC(a, active_bytes, pool, (int64_t)bs);
    GM_INC(a, requested_bytes, pool, (int64_t)sb->requested);
    if (sb->pending) {
      gm_pend_push(a, last);
    } else {
      last->allocated = 1;
      GM_INC(a, allocation, pool, 1);
      GM_INC(a, allocated_bytes, pool, (int64_t)bs);
      if (bs >= a->cfg.max_split_size) gm_st_inc(&a->st.oversize_allocations, 1);
      gm_live_add(a, sb->requested);
    }
    at = sb->offset + bs;
  }
  /* free blocks of a segment that holds others are non-releasable */
  if (s->head->next)
    for (gm_block_t *b = s->head; b; b = b->next)
      if (b->in_set == GM_SET_FREE) {
        GM_INC(a, inactive_split, pool, 1);
        GM_INC(a, inactive_split_bytes, pool, (int64_t)b->size);
      }
  return GM_OK;
}

static void pytorch_empty_cache(gm_alloc_t *a) { release_cached_blocks(a); }

const gm_policy_t gm_policy_pytorch = {
    .info = {.name = "pytorch",
             .summary = "PyTorch 2.11's native CUDA caching allocator",
             .traits = GM_TRAIT_SETTABLE | GM_TRAIT_PYTORCH_KNOBS},
    .malloc = pytorch_malloc,
    .free = free_block,
    .empty_cache = pytorch_empty_cache,
    .seed = pytorch_seed,
    .release_pool_blocks = release_blocks,
    .releases = pytorch_releases,
};
