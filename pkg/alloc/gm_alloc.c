/* gm_alloc.c — PyTorch 2.11's CUDA caching allocator, decision for decision.
 *
 * Function names follow PyTorch's (get_free_block, alloc_block,
 * release_cached_blocks, ...) so that the two can be read side by side;
 * section numbers (§n) refer to shared/docs/pytorch-allocator.md. */
#include <stdlib.h>
#include <string.h>

#include "gm_treap.h"

/* ------------------------------------------------------------------ */
/* statistics                                                          */

static inline void st_inc(gm_stat_t *s, int64_t n) {
  s->current += n;
  if (s->current > s->peak) s->peak = s->current;
  s->allocated += n;
}

static inline void st_dec(gm_stat_t *s, int64_t n) {
  s->current -= n;
  s->freed += n;
}

static inline int pool_stat(const gm_pool_t *p) { return p->is_small ? GM_STAT_SMALL : GM_STAT_LARGE; }

/* Update a stat array for "all" and the pool's type. */
#define INC(a, arr, pool, n) (st_inc(&(a)->st.arr[GM_STAT_ALL], (n)), st_inc(&(a)->st.arr[pool_stat(pool)], (n)))
#define DEC(a, arr, pool, n) (st_dec(&(a)->st.arr[GM_STAT_ALL], (n)), st_dec(&(a)->st.arr[pool_stat(pool)], (n)))

/* ------------------------------------------------------------------ */
/* configuration and sizes (§2, §3)                                    */

void gm_config_default(gm_config_t *c) {
  memset(c, 0, sizeof *c);
  c->policy = GM_POLICY_PYTORCH;
  c->max_split_size = UINT64_MAX;
  c->large_segment_size = 20ull << 20;
  c->max_non_split_rounding_size = 20ull << 20;
}

static unsigned log2_floor(uint64_t x) { return 63u - (unsigned)__builtin_clzll(x); }

static uint64_t roundup_power2_next_division(uint64_t size, uint64_t div) {
  if ((size & (size - 1)) == 0) return size;
  uint64_t floor = 1ull << log2_floor(size);
  uint64_t step = floor >> log2_floor(div);
  if (step == 0) return floor << 1;
  uint64_t r = size & ~(step - 1);
  return r == size ? size : r + step;
}

uint64_t gm_round_size(const gm_config_t *c, uint64_t size) {
  if (size < GM_MIN_BLOCK) return GM_MIN_BLOCK;
  unsigned lg = log2_floor(size);
  unsigned idx = lg > 20 ? lg - 20 : 0;
  if (idx > 15) idx = 15;
  uint64_t div = c->roundup_power2_divisions[idx];
  if (div > 1 && size > GM_MIN_BLOCK * div) return roundup_power2_next_division(size, div);
  return GM_MIN_BLOCK * ((size + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK);
}

static uint64_t allocation_size(const gm_alloc_t *a, uint64_t size) {
  if (size <= GM_SMALL_SIZE) return GM_SMALL_BUFFER;
  if (size < GM_MIN_LARGE_ALLOC) return a->cfg.large_segment_size;
  return GM_ROUND_LARGE * ((size + GM_ROUND_LARGE - 1) / GM_ROUND_LARGE);
}

/* ------------------------------------------------------------------ */
/* blocks and sets                                                     */

gm_block_t *gm_block_new(gm_alloc_t *a) {
  gm_block_t *b = a->spare;
  if (b)
    a->spare = b->next;
  else if (!(b = malloc(sizeof *b)))
    return NULL;
  *b = (gm_block_t){0};
  /* xorshift32: deterministic treap priorities */
  uint32_t x = a->rng;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  a->rng = x;
  b->prio = x;
  b->id = GM_NO_ID;
  b->mapped = 1;
  return b;
}

void gm_block_delete(gm_alloc_t *a, gm_block_t *b) {
  b->next = a->spare;
  a->spare = b;
}

static inline int is_split(const gm_block_t *b) { return b->prev || b->next; }

static void free_insert(gm_alloc_t *a, gm_block_t *b) {
  (void)a;
  b->gc_base = b->pool->clock;
  b->in_set = GM_SET_FREE;
  gm_treap_insert(&b->pool->free, b, gm_cmp_size);
}

static void free_erase(gm_block_t *b) {
  gm_treap_erase(&b->pool->free, b);
  b->in_set = 0;
}

static void unmapped_insert(gm_block_t *b) {
  b->in_set = GM_SET_UNMAPPED;
  gm_treap_insert(&b->pool->unmapped, b, gm_cmp_addr);
}

static void unmapped_erase(gm_block_t *b) {
  gm_treap_erase(&b->pool->unmapped, b);
  b->in_set = 0;
}

static gm_seg_t *seg_new(gm_alloc_t *a, uint64_t base, uint64_t size, uint64_t stream,
                         gm_pool_t *pool, int expandable, uint64_t page) {
  gm_seg_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->base = base;
  s->size = size;
  s->stream = stream;
  s->pool = pool;
  s->expandable = expandable;
  s->page = page;
  s->next_seg = a->segs;
  if (a->segs) a->segs->prev_seg = s;
  a->segs = s;
  gm_pool_seg_added(s); /* pools: cudaMalloc_count */
  return s;
}

static void seg_delete(gm_alloc_t *a, gm_seg_t *s) {
  gm_pool_seg_removed(a, s); /* pools: cudaMalloc_count */
  if (s->prev_seg) s->prev_seg->next_seg = s->next_seg;
  else a->segs = s->next_seg;
  if (s->next_seg) s->next_seg->prev_seg = s->prev_seg;
  free(s);
}

static int idle_free(const gm_block_t *b) {
  return b && !b->allocated && !b->pending && !b->uses;
}

/* gm_block_absorb: src, a neighbour of dst in its segment, becomes part of
 * dst. src leaves whichever set holds it; dst's place in a set is the
 * caller's business (its key changes). Every policy merges through this. */
void gm_block_absorb(gm_alloc_t *a, gm_block_t *dst, gm_block_t *src) {
  if (src->in_set == GM_SET_FREE) free_erase(src);
  else if (src->in_set == GM_SET_UNMAPPED) unmapped_erase(src);
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
    if (dst->seg->head == src) dst->seg->head = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  dst->size += src->size;
  gm_block_delete(a, src);
}

/* try_merge_blocks: absorb src into dst if src is free, idle and in the
 * same mapped state. Returns the bytes absorbed. */
static uint64_t try_merge_blocks(gm_alloc_t *a, gm_block_t *dst, gm_block_t *src) {
  if (!idle_free(src) || src->mapped != dst->mapped) return 0;
  uint64_t n = src->size;
  gm_block_absorb(a, dst, src);
  return n;
}

/* ------------------------------------------------------------------ */
/* segments from the backend                                           */

/* release_block (§6.4): return a whole non-expandable segment. */
static void release_block(gm_alloc_t *a, gm_block_t *b) {
  a->st.num_device_free++;
  a->be.free(a->be.ctx, b->ptr, b->size);
  a->total_allocated -= b->size;
  DEC(a, segment, b->pool, 1);
  DEC(a, reserved_bytes, b->pool, (int64_t)b->size);
  if (b->size >= a->cfg.max_split_size) st_dec(&a->st.oversize_segments, 1);
  if (b->in_set == GM_SET_FREE) free_erase(b);
  seg_delete(a, b->seg);
  gm_block_delete(a, b);
}

typedef struct params {
  uint64_t size, stream, alloc_size, hint;
  gm_pool_t *pool;
  gm_block_t *block;
  /* get_free_block leaves a block it found as the lower bound in the free
   * set, at *link, for alloc_found_block to update in place or erase;
   * pred is the member before it. link is NULL otherwise. */
  gm_block_t **link, *pred;
  int err; /* GM_OK, GM_ENOMEM or GM_EBACKEND from the last attempt */
  int exact; /* pools: a claim, split to exactly size whatever is left */
} params_t;

static uint64_t device_total(gm_alloc_t *a) {
  if (a->cfg.device_total) return a->cfg.device_total;
  if (!a->device_total) {
    uint64_t f = 0, t = 0;
    if (a->be.mem_info(a->be.ctx, &f, &t) == GM_OK && t) a->device_total = t;
    else a->device_total = 1ull << 40;
  }
  return a->device_total;
}

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
  unmapped_erase(b);
  b->mapped = 1;
  if (mapped < b->size) {
    gm_block_t *rest = gm_block_new(a);
    if (!rest) return GM_EBACKEND;
    rest->ptr = b->ptr + mapped;
    rest->size = b->size - mapped;
    rest->stream = b->stream;
    rest->pool = pool;
    rest->seg = s;
    rest->mapped = 0;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    unmapped_insert(rest);
    b->size = mapped;
  }
  try_merge_blocks(a, b, b->prev);
  try_merge_blocks(a, b, b->next);
  free_insert(a, b);
  a->total_allocated += mapped;
  INC(a, reserved_bytes, pool, (int64_t)mapped);
  a->st.num_device_alloc++;
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
  free_erase(b);
  if (lo > b->ptr) {
    gm_block_t *before = gm_block_new(a);
    before->ptr = b->ptr;
    before->size = lo - b->ptr;
    before->stream = b->stream;
    before->pool = pool;
    before->seg = s;
    before->prev = b->prev;
    before->next = b;
    if (b->prev) b->prev->next = before;
    b->prev = before;
    if (s->head == b) s->head = before;
    free_insert(a, before);
  }
  if (b->ptr + b->size > hi) {
    gm_block_t *after = gm_block_new(a);
    after->ptr = hi;
    after->size = b->ptr + b->size - hi;
    after->stream = b->stream;
    after->pool = pool;
    after->seg = s;
    after->prev = b;
    after->next = b->next;
    if (b->next) b->next->prev = after;
    b->next = after;
    free_insert(a, after);
  }
  b->ptr = lo;
  b->size = n;
  b->mapped = 0;
  try_merge_blocks(a, b, b->prev);
  try_merge_blocks(a, b, b->next);
  unmapped_insert(b);
  a->total_allocated -= n;
  DEC(a, reserved_bytes, pool, (int64_t)n);
  a->st.num_device_free++;
}

static void release_expandable_segment(gm_alloc_t *a, gm_block_t *b) {
  gm_seg_t *s = b->seg;
  a->be.va_release(a->be.ctx, s->base, s->size);
  unmapped_erase(b);
  seg_delete(a, s);
  gm_block_delete(a, b);
}

static int allocatable(const gm_block_t *b) { return idle_free(b); }

/* find_expandable_block (§9.2). Returns NULL only if a new segment could
 * not be created. */
static gm_block_t *find_expandable_block(gm_alloc_t *a, params_t *p) {
  gm_pool_t *pool = p->pool;
  gm_block_t key = {0};
  key.stream = p->stream;
  for (gm_block_t *c = gm_treap_lower_bound(pool->unmapped, &key, gm_cmp_addr);
       c && c->stream == p->stream; c = gm_treap_next(c)) {
    gm_block_t *start = allocatable(c->prev) ? c->prev : c;
    uint64_t bytes = 0;
    for (gm_block_t *b = start; b && bytes < p->size && allocatable(b); b = b->next)
      bytes += b->size;
    if (bytes >= p->size) return start;
  }
  uint64_t page = pool->is_small ? GM_SMALL_BUFFER : a->cfg.large_segment_size;
  uint64_t total = device_total(a);
  uint64_t handles = (total + total / 8 + page - 1) / page;
  uint64_t va = handles * page, base = 0;
  int rc = a->be.va_reserve(a->be.ctx, va, page, &base);
  if (rc != GM_OK) {
    p->err = rc;
    return NULL;
  }
  gm_seg_t *s = seg_new(a, base, va, p->stream, pool, 1, page);
  gm_block_t *b = gm_block_new(a);
  if (!s || !b) {
    p->err = GM_EBACKEND;
    return NULL;
  }
  b->ptr = base;
  b->size = va;
  b->stream = p->stream;
  b->pool = pool;
  b->seg = s;
  b->mapped = 0;
  s->head = b;
  unmapped_insert(b);
  return b;
}

static gm_block_t *try_allocate_expandable_block(gm_alloc_t *a, params_t *p) {
  gm_block_t *c = find_expandable_block(a, p);
  if (!c) return NULL;
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
  free_erase(c);
  return c;
}

/* alloc_block (§6.2): a new segment, or new pages of an expandable one. */
static int alloc_block(gm_alloc_t *a, params_t *p, int is_retry) {
  uint64_t size = p->alloc_size;
  if (is_retry) a->st.num_alloc_retries++;
  if (a->cfg.allowed_memory_maximum && a->total_allocated + size > a->cfg.allowed_memory_maximum) {
    p->err = GM_ENOMEM;
    return 0;
  }
  if (a->cfg.expandable_segments) {
    p->block = try_allocate_expandable_block(a, p);
    return p->block != NULL;
  }
  uint64_t ptr = 0;
  int rc = a->be.malloc(a->be.ctx, size, p->hint, &ptr);
  if (rc != GM_OK) {
    p->err = rc;
    return 0;
  }
  gm_seg_t *s = seg_new(a, ptr, size, p->stream, p->pool, 0, 0);
  gm_block_t *b = gm_block_new(a);
  if (!s || !b) {
    p->err = GM_EBACKEND;
    return 0;
  }
  a->total_allocated += size;
  b->ptr = ptr;
  b->size = size;
  b->stream = p->stream;
  b->pool = p->pool;
  b->seg = s;
  s->head = b;
  p->block = b;
  INC(a, segment, p->pool, 1);
  INC(a, reserved_bytes, p->pool, (int64_t)size);
  if (size >= a->cfg.max_split_size) st_inc(&a->st.oversize_segments, 1);
  a->st.num_device_alloc++;
  return 1;
}

/* ------------------------------------------------------------------ */
/* the search (§4)                                                     */

static uint64_t expandable_size(const gm_block_t *b) {
  return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

static int get_free_block(gm_alloc_t *a, params_t *p) {
  gm_pool_t *pool = p->pool;
  if (a->cfg.allowed_memory_maximum && a->cfg.gc_threshold > 0) pool->clock++;
  gm_block_t key = {0};
  key.stream = p->stream;
  key.size = p->size;
  gm_block_t *pred;
  gm_block_t **link = gm_treap_lower_bound_link(&pool->free, &key, gm_cmp_size, &pred);
  gm_block_t *it = link ? *link : NULL;
  if (!it || it->stream != p->stream) return 0;
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
  if (p->size < ms && it->size >= ms) return 0;
  if (p->size >= ms && it->size >= p->size + a->cfg.max_non_split_rounding_size) return 0;
  if (*link == it) { /* still the lower bound: alloc_found_block takes it out */
    p->link = link;
    p->pred = pred;
  } else {
    free_erase(it);
  }
  p->block = it;
  return 1;
}

/* ------------------------------------------------------------------ */
/* giving memory back (§6.3, §6.4, §10.2)                              */

static void free_block(gm_alloc_t *a, gm_block_t *b);

static void finish_pending(gm_alloc_t *a, gm_block_t *b);

/* synchronize_and_free_events: every pending free completes. */
static void synchronize_and_free_events(gm_alloc_t *a) {
  a->st.num_sync_all_streams++;
  gm_block_t *b = a->pend_head;
  a->pend_head = a->pend_tail = NULL;
  while (b) {
    gm_block_t *next = b->pend_next;
    finish_pending(a, b);
    b = next;
  }
}

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

static void release_blocks(gm_alloc_t *a, gm_pool_t *pool) {
  size_t n;
  gm_block_t **v = list_set(pool->free, &n);
  size_t nexp = 0;
  for (size_t i = 0; i < n; i++) {
    gm_block_t *b = v[i];
    if (b->seg->expandable) v[nexp++] = b;
    else if (!b->prev && !b->next) release_block(a, b);
  }
  for (size_t i = 0; i < nexp; i++) {
    gm_block_t *b = v[i];
    unmap_block(a, b);
    if (!b->prev && !b->next && !b->mapped) release_expandable_segment(a, b);
  }
  free(v);
}

static int release_cached_blocks(gm_alloc_t *a) {
  synchronize_and_free_events(a);
  release_blocks(a, &a->large);
  release_blocks(a, &a->small);
  gm_pools_release_freeable(a); /* pools: released private pools, after the default ones */
  return 1;
}

/* pools: what gm_pools.c needs of the above */
void gm_sync_all_streams(gm_alloc_t *a) { synchronize_and_free_events(a); }
void gm_release_pool_blocks(gm_alloc_t *a, gm_pool_t *pool) { release_blocks(a, pool); }

/* release_available_cached_blocks: free oversize blocks only. */
static int release_available_cached_blocks(gm_alloc_t *a, params_t *p) {
  uint64_t ms = a->cfg.max_split_size;
  if (ms == UINT64_MAX) return 0;
  gm_pool_t *pool = p->pool;
  gm_block_t key = {0};
  key.stream = p->stream;
  key.size = p->size < ms ? ms : p->size;
  gm_block_t *it = gm_treap_lower_bound(pool->free, &key, gm_cmp_size);
  if (!it || it->stream != p->stream || it->seg->expandable) {
    it = gm_treap_before(pool->free, it ? it : &(gm_block_t){.stream = UINT64_MAX, .size = UINT64_MAX, .ptr = UINT64_MAX}, gm_cmp_size);
    if (!it) return 0;
    uint64_t released = 0;
    while (released < key.size && it->size >= ms && it->stream == p->stream) {
      gm_block_t *cur = it;
      it = gm_treap_prev(cur);
      if (!cur->seg->expandable) {
        released += cur->size;
        release_block(a, cur);
      }
      if (!it) break;
    }
    return released >= key.size;
  }
  release_block(a, it);
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
        release_block(a, b);
      }
    }
  }
  free(v);
}

/* ------------------------------------------------------------------ */
/* malloc and free (§5, §6, §7)                                        */

static int should_split(const gm_alloc_t *a, const gm_block_t *b, uint64_t size) {
  uint64_t rest = b->size - size;
  if (b->pool->is_small || b->seg->expandable) return rest >= GM_MIN_BLOCK;
  return size < a->cfg.max_split_size && rest > GM_SMALL_SIZE;
}

static int alloc_found_block(gm_alloc_t *a, params_t *p, uint64_t orig) {
  gm_block_t *b = p->block;
  gm_pool_t *pool = p->pool;
  int already_split = is_split(b);
  int exp = b->seg->expandable;
  int split = p->exact ? b->size > p->size : should_split(a, b, p->size); /* pools: claims */
  if (p->link) {
    /* b is still in the free set. Split, b becomes the remainder (higher
     * address, smaller size): if that key still ranks after b's
     * predecessor it keeps b's place (it ranks before b's successor, being
     * smaller than b was), and one comparison replaces an erase and an
     * insert. */
    gm_block_t key = {.stream = b->stream, .size = b->size - p->size, .ptr = b->ptr + p->size};
    if (!split || (p->pred && gm_cmp_size(p->pred, &key) >= 0)) {
      gm_treap_erase_at(p->link);
      b->in_set = 0;
    }
    p->link = NULL;
  }
  if (split) {
    gm_block_t *rest = b;
    b = gm_block_new(a);
    if (!b) return GM_EBACKEND;
    b->ptr = rest->ptr;
    b->size = p->size;
    b->stream = rest->stream;
    b->pool = pool;
    b->seg = rest->seg;
    b->prev = rest->prev;
    if (b->prev) b->prev->next = b;
    b->next = rest;
    rest->prev = b;
    if (rest->seg->head == rest) rest->seg->head = b;
    rest->ptr += p->size;
    rest->size -= p->size;
    if (rest->in_set == GM_SET_FREE) rest->gc_base = pool->clock; /* kept its place */
    else free_insert(a, rest);
    if (!exp) {
      if (already_split) {
        DEC(a, inactive_split_bytes, pool, (int64_t)b->size);
      } else {
        INC(a, inactive_split_bytes, pool, (int64_t)rest->size);
        INC(a, inactive_split, pool, 1);
      }
    }
  } else if (already_split && !exp) {
    DEC(a, inactive_split_bytes, pool, (int64_t)b->size);
    DEC(a, inactive_split, pool, 1);
  }
  b->allocated = 1;
  b->requested = orig;
  b->uses = 0;
  INC(a, allocation, pool, 1);
  INC(a, allocated_bytes, pool, (int64_t)b->size);
  INC(a, active, pool, 1);
  INC(a, active_bytes, pool, (int64_t)b->size);
  INC(a, requested_bytes, pool, (int64_t)orig);
  if (b->size >= a->cfg.max_split_size) st_inc(&a->st.oversize_allocations, 1);
  p->block = b;
  return GM_OK;
}

static void record_oom(gm_alloc_t *a, params_t *p, uint64_t orig, gm_oom_t *oom) {
  if (!oom) return;
  memset(oom, 0, sizeof *oom);
  oom->size = orig;
  oom->rounded = p->size;
  oom->alloc_size = p->alloc_size;
  oom->stream = p->stream;
  a->be.mem_info(a->be.ctx, &oom->device_free, &oom->device_total);
  oom->allowed = a->cfg.allowed_memory_maximum;
  oom->allocated = a->st.allocated_bytes[GM_STAT_ALL].current;
  oom->reserved = a->st.reserved_bytes[GM_STAT_ALL].current;
  oom->private_free = gm_pools_free_bytes(a); /* pools */
}

/* The nocache policy: every request is its own device allocation. */
static int malloc_nocache(gm_alloc_t *a, params_t *p, uint64_t orig, gm_oom_t *oom) {
  p->alloc_size = p->size;
  if (!alloc_block(a, p, 0)) {
    if (p->err == GM_ENOMEM) {
      a->st.num_ooms++;
      record_oom(a, p, orig, oom);
    }
    return p->err;
  }
  return alloc_found_block(a, p, orig);
}

static int do_malloc(gm_alloc_t *a, uint64_t orig, uint64_t stream, uint64_t hint,
                     gm_block_t **out, gm_oom_t *oom) {
  params_t p = {0};
  p.stream = stream;
  p.hint = hint;
  p.err = GM_ENOMEM;
  if (orig >= (1ull << 60)) { /* "more than 1EB": no stats move */
    p.size = orig;
    p.alloc_size = orig;
    record_oom(a, &p, orig, oom);
    return GM_ENOMEM;
  }
  if (a->pol) return a->pol->malloc(a, orig, stream, hint, out, oom);
  p.size = gm_round_size(&a->cfg, orig);
  /* pools: the op routes the request to the default or a private pool */
  p.pool = gm_pool_for(a, a->route, p.size <= GM_SMALL_SIZE);
  if (!p.pool) return GM_EINVAL;
  p.alloc_size = allocation_size(a, p.size);
  /* pools: a checkpoint restore claims a block by address, not by best fit,
   * at its recorded size, split off exactly (setSegmentStateToCheckpoint) */
  uint64_t exact = (orig + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK * GM_MIN_BLOCK;
  if (a->claim && (p.block = gm_pool_claim(a, p.pool->owner, hint, exact, stream))) {
    p.pool = p.block->pool;
    p.size = exact;
    p.exact = 1;
    int rc = alloc_found_block(a, &p, orig);
    *out = p.block;
    return rc;
  }
  if (a->cfg.policy == GM_POLICY_NOCACHE) {
    p.size = (orig + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK * GM_MIN_BLOCK;
    int rc = malloc_nocache(a, &p, orig, oom);
    *out = p.block;
    return rc;
  }
  int found = get_free_block(a, &p);
  if (!found) {
    if (a->cfg.allowed_memory_maximum && a->cfg.gc_threshold > 0) garbage_collect_cached_blocks(a);
    found = alloc_block(a, &p, 0) ||
            (p.err == GM_ENOMEM && release_available_cached_blocks(a, &p) && alloc_block(a, &p, 0)) ||
            (p.err == GM_ENOMEM && release_cached_blocks(a) && alloc_block(a, &p, 1));
  }
  if (!found) {
    if (p.err != GM_ENOMEM) return p.err;
    a->st.num_ooms++;
    record_oom(a, &p, orig, oom);
    return GM_ENOMEM;
  }
  int rc = alloc_found_block(a, &p, orig);
  *out = p.block;
  return rc;
}

/* free_block (§7.2): the memory becomes reusable. */
static void free_block(gm_alloc_t *a, gm_block_t *b) {
  uint64_t orig_size = b->size, requested = b->requested;
  gm_pool_t *pool = b->pool;
  int64_t d_count = 0, d_bytes = 0;
  gm_block_t *cands[2] = {b->prev, b->next};
  /* The last neighbour to be merged that sits in the free set: b, merged,
   * ranks right after it (same stream, larger size), so unless b also
   * passes its successor, b takes its place there and no insert descends.
   * It is looked up after the other neighbour's erase, which may move it. */
  gm_block_t *slot = NULL, **link = NULL, *succ = NULL;
  for (int i = 0; i < 2; i++)
    if (idle_free(cands[i]) && cands[i]->mapped == b->mapped && cands[i]->in_set == GM_SET_FREE)
      slot = cands[i];
  for (int i = 0; i < 2; i++) {
    if (cands[i] == slot) continue;
    uint64_t n = try_merge_blocks(a, b, cands[i]);
    if (n > 0) {
      d_count -= 1;
      d_bytes -= (int64_t)n;
    }
  }
  if (slot) {
    link = gm_treap_link(&pool->free, slot);
    succ = gm_treap_next(slot);
    slot->in_set = 0; /* try_merge_blocks must leave it in the tree */
    uint64_t n = try_merge_blocks(a, b, slot);
    d_count -= 1;
    d_bytes -= (int64_t)n;
  }
  if (link && (!succ || gm_cmp_size(b, succ) < 0)) {
    gm_treap_replace_at(link, slot, b);
    b->gc_base = pool->clock;
    b->in_set = GM_SET_FREE;
  } else {
    if (link) gm_treap_erase_at(link);
    free_insert(a, b);
  }
  if (is_split(b)) {
    d_count += 1;
    d_bytes += (int64_t)b->size;
  }
  if (!b->seg->expandable) {
    if (d_count > 0) INC(a, inactive_split, pool, d_count);
    else if (d_count < 0) DEC(a, inactive_split, pool, -d_count);
    if (d_bytes > 0) INC(a, inactive_split_bytes, pool, d_bytes);
    else if (d_bytes < 0) DEC(a, inactive_split_bytes, pool, -d_bytes);
  }
  DEC(a, active, pool, 1);
  DEC(a, active_bytes, pool, (int64_t)orig_size);
  DEC(a, requested_bytes, pool, (int64_t)requested);
}

/* free (§7.1): the user's request. pending forces the block to wait for a
 * later GM_OP_FREE_COMPLETE, as a block with recorded streams does. */
static void do_free(gm_alloc_t *a, gm_block_t *b, int pending) {
  b->allocated = 0;
  DEC(a, allocation, b->pool, 1);
  DEC(a, allocated_bytes, b->pool, (int64_t)b->size);
  if (b->size >= a->cfg.max_split_size) st_dec(&a->st.oversize_allocations, 1);
  if (pending || b->uses) {
    b->uses = 0;
    b->pending = 1;
    b->pend_next = NULL;
    if (a->pend_tail) a->pend_tail->pend_next = b;
    else a->pend_head = b;
    a->pend_tail = b;
    return;
  }
  finish_pending(a, b);
}

static void complete_pending(gm_alloc_t *a, gm_block_t *b) {
  gm_block_t **link = &a->pend_head, *prev = NULL;
  while (*link && *link != b) {
    prev = *link;
    link = &(*link)->pend_next;
  }
  if (*link) {
    *link = b->pend_next;
    if (a->pend_tail == b) a->pend_tail = prev;
  }
  finish_pending(a, b);
}

/* A freed block's last use is over: its memory becomes reusable. */
static void finish_pending(gm_alloc_t *a, gm_block_t *b) {
  b->pend_next = NULL;
  b->pending = 0;
  if (b->id < a->nids && a->ids[b->id] == b) a->ids[b->id] = NULL;
  b->id = GM_NO_ID;
  if (a->cfg.policy == GM_POLICY_NOCACHE) {
    DEC(a, active, b->pool, 1);
    DEC(a, active_bytes, b->pool, (int64_t)b->size);
    DEC(a, requested_bytes, b->pool, (int64_t)b->requested);
    release_block(a, b);
    return;
  }
  if (a->pol) {
    a->pol->free(a, b);
    return;
  }
  free_block(a, b);
}

/* ------------------------------------------------------------------ */
/* public API                                                          */

int gm_new(const gm_config_t *c, const gm_backend_t *b, gm_alloc_t **out) {
  gm_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return GM_ENOMEM;
  a->cfg = *c;
  a->be = *b;
  a->small.is_small = 1;
  a->rng = 0x9e3779b9u;
  a->ex.peak_op = 0;
  a->st.max_split_size = c->max_split_size == UINT64_MAX ? -1 : (int64_t)c->max_split_size;
  if (c->policy == GM_POLICY_NOCACHE) a->cfg.expandable_segments = 0;
  static const gm_policy_ops_t *const pols[] = {
      [GM_POLICY_RMM] = &gm_policy_rmm,   [GM_POLICY_BFC] = &gm_policy_bfc,
      [GM_POLICY_CUPY] = &gm_policy_cupy, [GM_POLICY_ASYNC] = &gm_policy_async,
      [GM_POLICY_GPUMEM] = &gm_policy_gpumem};
  if (c->policy > GM_POLICY_NOCACHE && c->policy <= GM_POLICY_GPUMEM) {
    /* PyTorch's knobs do not apply to the other policies */
    a->pol = pols[c->policy];
    a->cfg.expandable_segments = 0;
    a->cfg.max_split_size = UINT64_MAX;
    a->st.max_split_size = -1;
    int rc = a->pol->init(a);
    if (rc != GM_OK) {
      free(a);
      return rc;
    }
  }
  *out = a;
  return GM_OK;
}

void gm_free(gm_alloc_t *a) {
  if (!a) return;
  if (a->pol) a->pol->destroy(a);
  while (a->segs) {
    gm_seg_t *s = a->segs;
    gm_block_t *b = s->head;
    if (s->expandable) {
      for (gm_block_t *x = b; x; x = x->next)
        if (x->mapped) a->be.unmap(a->be.ctx, x->ptr, x->size, s->page);
      a->be.va_release(a->be.ctx, s->base, s->size);
    } else {
      a->be.free(a->be.ctx, s->base, s->size);
    }
    while (b) {
      gm_block_t *n = b->next;
      free(b);
      b = n;
    }
    seg_delete(a, s);
  }
  while (a->spare) {
    gm_block_t *n = a->spare->next;
    free(a->spare);
    a->spare = n;
  }
  free(a->ids);
  gm_pools_destroy(a);
  if (a->be.destroy) a->be.destroy(a->be.ctx);
  free(a);
}

static int ensure_id(gm_alloc_t *a, uint32_t id) {
  if (id == GM_NO_ID) return GM_EINVAL;
  if (id < a->nids) return GM_OK;
  uint32_t n = a->nids ? a->nids : 1024;
  while (n <= id) n = n * 2 > n ? n * 2 : GM_NO_ID;
  gm_block_t **v = realloc(a->ids, (size_t)n * sizeof *v);
  if (!v) return GM_ENOMEM;
  memset(v + a->nids, 0, (size_t)(n - a->nids) * sizeof *v);
  a->ids = v;
  a->nids = n;
  return GM_OK;
}

/* A zero-byte allocation gets no block (PyTorch returns nullptr); the id
 * maps to this marker so that its free is accepted. */
static gm_block_t zero_block;

static void track_peak(gm_alloc_t *a) {
  gm_extra_t *e = &a->ex;
  const gm_stat_t *r = &a->st.reserved_bytes[GM_STAT_ALL];
  int64_t alloc = a->st.allocated_bytes[GM_STAT_ALL].current;
  if (r->current != r->peak) return;
  if (r->peak > a->peak_seen) {
    e->peak_op = e->ops - 1;
    e->allocated_at_peak = alloc;
    a->peak_seen = r->peak;
  } else if (alloc > e->allocated_at_peak) {
    e->allocated_at_peak = alloc;
  }
}

static int apply(gm_alloc_t *a, const gm_op_t *op, gm_oom_t *oom, uint64_t *addr) {
  gm_block_t *b;
  int rc;
  switch (op->kind) {
  case GM_OP_ALLOC:
    if ((rc = ensure_id(a, op->id)) != GM_OK) return rc;
    if (a->ids[op->id]) return GM_EINVAL;
    if (op->size == 0) {
      a->ids[op->id] = &zero_block;
      return GM_OK;
    }
    b = NULL;
    /* pools: routing and claims apply to the pytorch policy only */
    if (a->cfg.policy == GM_POLICY_PYTORCH) {
      a->route = op->pool;
      a->claim = (op->flags & GM_OPF_CLAIM) != 0;
    }
    gm_oom_t o = {0};
    rc = do_malloc(a, op->size, op->stream, op->hint, &b, &o);
    a->route = 0;
    a->claim = 0;
    if (rc == GM_ENOMEM && (op->flags & GM_OPF_RECORDED_OOM)) {
      /* the program caught it and went on: nothing is held */
      gm_oom_event_add(a, &o);
      a->ids[op->id] = &zero_block;
      return GM_OK;
    }
    if (rc == GM_ENOMEM && oom) *oom = o;
    if (rc != GM_OK) return rc;
    b->id = op->id;
    a->ids[op->id] = b;
    a->ex.live_bytes += (int64_t)((op->size + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK * GM_MIN_BLOCK);
    if (a->ex.live_bytes > a->ex.live_bytes_peak) a->ex.live_bytes_peak = a->ex.live_bytes;
    if (addr) *addr = b->ptr;
    return GM_OK;
  case GM_OP_FREE:
  case GM_OP_FREE_REQUEST:
    if (op->id >= a->nids || !(b = a->ids[op->id])) return GM_EINVAL;
    if (b == &zero_block) {
      a->ids[op->id] = NULL;
      return GM_OK;
    }
    if (!b->allocated) return GM_EINVAL; /* double free */
    a->ex.live_bytes -= (int64_t)((b->requested + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK * GM_MIN_BLOCK);
    do_free(a, b, op->kind == GM_OP_FREE_REQUEST);
    return GM_OK;
  case GM_OP_FREE_COMPLETE:
    /* A sync (empty_cache, the OOM path) may have completed it already. */
    if (op->id >= a->nids || !(b = a->ids[op->id])) return GM_OK;
    if (b == &zero_block || b->allocated) return GM_EINVAL;
    complete_pending(a, b);
    return GM_OK;
  case GM_OP_RECORD_STREAM:
    if (op->id >= a->nids || !(b = a->ids[op->id])) return GM_EINVAL;
    if (b == &zero_block) return GM_OK; /* recordStream of nullptr: nothing to do */
    if (b->allocated && op->stream != b->stream) b->uses = 1;
    return GM_OK;
  case GM_OP_EMPTY_CACHE:
    if (a->cfg.policy == GM_POLICY_PYTORCH) release_cached_blocks(a);
    else if (a->pol) a->pol->empty_cache(a);
    else a->st.num_sync_all_streams++;
    return GM_OK;
  case GM_OP_POOL_RELEASE:
    return a->cfg.policy == GM_POLICY_PYTORCH ? gm_pool_release(a, op->pool) : GM_OK;
  case GM_OP_POOL_EMPTY:
    return a->cfg.policy == GM_POLICY_PYTORCH ? gm_pool_empty(a, op->pool) : GM_OK;
  }
  return GM_EINVAL;
}

static void sample(gm_alloc_t *a, gm_timeline_t *tl, size_t i) {
  uint64_t k = (tl->base + i) / tl->stride;
  if (k >= tl->nbuckets) return;
  int64_t al = a->st.allocated_bytes[GM_STAT_ALL].current;
  int64_t re = a->st.reserved_bytes[GM_STAT_ALL].current;
  int64_t ac = a->st.active_bytes[GM_STAT_ALL].current;
  if (al > tl->allocated[k]) tl->allocated[k] = al;
  if (re > tl->reserved[k]) tl->reserved[k] = re;
  if (ac > tl->active[k]) tl->active[k] = ac;
}

int gm_run(gm_alloc_t *a, const gm_op_t *ops, size_t n, size_t *done, gm_oom_t *oom,
           gm_timeline_t *tl, uint64_t *addr) {
  size_t i;
  int rc = GM_OK;
  if (tl && (!tl->allocated || !tl->stride)) tl = NULL;
  for (i = 0; i < n; i++) {
    rc = apply(a, &ops[i], oom, addr);
    if (rc != GM_OK) break;
    a->ex.ops++;
    track_peak(a);
    if (tl) sample(a, tl, i);
    if (a->cfg.check && (rc = gm_check(a, NULL, 0)) != GM_OK) {
      i++;
      break;
    }
  }
  *done = i;
  return rc;
}

void gm_get_stats(const gm_alloc_t *a, gm_stats_t *s) { *s = a->st; }

const char *gm_backend_error(const gm_alloc_t *a) {
  const char *m = a->be.error ? a->be.error(a->be.ctx) : NULL;
  return m ? m : "";
}

int gm_mem_info(const gm_alloc_t *a, uint64_t *free_bytes, uint64_t *total_bytes) {
  return a->be.mem_info(a->be.ctx, free_bytes, total_bytes);
}

void gm_get_extra(const gm_alloc_t *a, gm_extra_t *e) {
  *e = a->ex;
}

static void reset_arr(gm_stat_t *s, int n) {
  for (int i = 0; i < n; i++) s[i].peak = s[i].current;
}

void gm_reset_peak(gm_alloc_t *a) {
  gm_stats_t *s = &a->st;
  reset_arr(s->allocation, 3);
  reset_arr(s->segment, 3);
  reset_arr(s->active, 3);
  reset_arr(s->inactive_split, 3);
  reset_arr(s->allocated_bytes, 3);
  reset_arr(s->reserved_bytes, 3);
  reset_arr(s->active_bytes, 3);
  reset_arr(s->inactive_split_bytes, 3);
  reset_arr(s->requested_bytes, 3);
  reset_arr(&s->oversize_allocations, 1);
  reset_arr(&s->oversize_segments, 1);
}

uint64_t gm_largest_free(const gm_alloc_t *a) {
  uint64_t best = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg)
    for (const gm_block_t *b = s->head; b; b = b->next)
      if (b->mapped && idle_free(b) && b->size > best) best = b->size;
  return best;
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

/* A policy other than pytorch did not lay memory out as the recording did:
 * it gets each live block by its own malloc, as it would have when the block
 * was allocated (nocache: one device allocation per block, so freeing one
 * block never touches another's memory). Pending blocks are then freed
 * without completing. */
static int seed_by_malloc(gm_alloc_t *a, uint64_t stream, const gm_seed_block_t *blocks, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const gm_seed_block_t *sb = &blocks[i];
    uint64_t want = sb->requested ? sb->requested : sb->size;
    if (!want) want = GM_MIN_BLOCK;
    gm_block_t *b = NULL;
    int rc = do_malloc(a, want, stream, 0, &b, NULL);
    if (rc != GM_OK) return rc;
    b->id = sb->id;
    a->ids[sb->id] = b;
    if (sb->pending) {
      b->allocated = 0;
      DEC(a, allocation, b->pool, 1);
      DEC(a, allocated_bytes, b->pool, (int64_t)b->size);
      if (b->size >= a->cfg.max_split_size) st_dec(&a->st.oversize_allocations, 1);
      b->pending = 1;
      b->pend_next = NULL;
      if (a->pend_tail) a->pend_tail->pend_next = b;
      else a->pend_head = b;
      a->pend_tail = b;
    } else {
      a->ex.live_bytes += (int64_t)((want + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK * GM_MIN_BLOCK);
      if (a->ex.live_bytes > a->ex.live_bytes_peak) a->ex.live_bytes_peak = a->ex.live_bytes;
    }
  }
  return GM_OK;
}

int gm_seed_segment(gm_alloc_t *a, uint64_t hint, uint64_t size, uint64_t stream, int small,
                    const gm_seed_block_t *blocks, size_t n) {
  if (size == 0 || size % GM_MIN_BLOCK) return GM_EINVAL;
  for (size_t i = 0; i < n; i++) {
    if (blocks[i].offset % GM_MIN_BLOCK || blocks[i].offset >= size) return GM_EINVAL;
    if (i && blocks[i].offset <= blocks[i - 1].offset) return GM_EINVAL;
    if (ensure_id(a, blocks[i].id) != GM_OK || a->ids[blocks[i].id]) return GM_EINVAL;
  }
  if (a->pol || a->cfg.policy == GM_POLICY_NOCACHE) return seed_by_malloc(a, stream, blocks, n);
  gm_pool_t *pool = small ? &a->small : &a->large;
  uint64_t base = 0;
  int rc = a->be.malloc(a->be.ctx, size, hint, &base);
  if (rc != GM_OK) return rc;
  gm_seg_t *s = seg_new(a, base, size, stream, pool, 0, 0);
  if (!s) return GM_ENOMEM;
  a->total_allocated += size;
  INC(a, segment, pool, 1);
  INC(a, reserved_bytes, pool, (int64_t)size);
  if (size >= a->cfg.max_split_size) st_inc(&a->st.oversize_segments, 1);
  gm_block_t *last = NULL;
  uint64_t at = 0;
  for (size_t i = 0; i <= n; i++) {
    uint64_t next = i < n ? blocks[i].offset : size;
    if (next > at) { /* the gap is one free block */
      if (!(last = seed_block(a, s, last, at, next - at))) return GM_ENOMEM;
      free_insert(a, last);
    }
    if (i == n) break;
    const gm_seed_block_t *sb = &blocks[i];
    uint64_t end = i + 1 < n ? blocks[i + 1].offset : size;
    uint64_t bs = sb->size ? sb->size : gm_round_size(&a->cfg, sb->requested);
    if (bs > end - sb->offset) bs = end - sb->offset;
    /* A free block of the large pool is always over 1 MiB (requests there
     * are, and split remainders must be), so a smaller gap after a block
     * of unknown size is slack the block was not split for. */
    if (!sb->size && !small && end - sb->offset - bs <= GM_SMALL_SIZE) bs = end - sb->offset;
    if (!(last = seed_block(a, s, last, sb->offset, bs))) return GM_ENOMEM;
    last->requested = sb->requested;
    last->id = sb->id;
    a->ids[sb->id] = last;
    INC(a, active, pool, 1);
    INC(a, active_bytes, pool, (int64_t)bs);
    INC(a, requested_bytes, pool, (int64_t)sb->requested);
    if (sb->pending) {
      last->pending = 1;
      if (a->pend_tail) a->pend_tail->pend_next = last;
      else a->pend_head = last;
      a->pend_tail = last;
    } else {
      last->allocated = 1;
      INC(a, allocation, pool, 1);
      INC(a, allocated_bytes, pool, (int64_t)bs);
      if (bs >= a->cfg.max_split_size) st_inc(&a->st.oversize_allocations, 1);
      a->ex.live_bytes += (int64_t)((sb->requested + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK * GM_MIN_BLOCK);
      if (a->ex.live_bytes > a->ex.live_bytes_peak) a->ex.live_bytes_peak = a->ex.live_bytes;
    }
    at = sb->offset + bs;
  }
  /* free blocks of a segment that holds others are non-releasable */
  if (s->head->next)
    for (gm_block_t *b = s->head; b; b = b->next)
      if (b->in_set == GM_SET_FREE) {
        INC(a, inactive_split, pool, 1);
        INC(a, inactive_split_bytes, pool, (int64_t)b->size);
      }
  return GM_OK;
}
