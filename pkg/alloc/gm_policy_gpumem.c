/* gm_policy_gpumem.c — gpumem's own policy: page-granular virtual memory
 * that keeps peak reserved memory close to the peak of live bytes.
 *
 * Each stream owns one large virtual range (an expandable segment) in which
 * only the 2 MiB pages under live data need to be mapped. Because any
 * physical page can be mapped at any address, free memory is never stranded
 * between live blocks: whole free pages can be unmapped and mapped again
 * where they are needed (GMLake's "stitching", by the driver's virtual-memory
 * calls). What is left is waste inside pages, under 2 MiB at each end of a
 * free range. Blocks are rounded to 512 B and split exactly, so there is no
 * waste inside blocks either.
 *
 *   alloc  best fit among free mapped blocks of the stream (no device call);
 *          otherwise the free range around an unmapped block that needs the
 *          fewest new pages (then the smallest, then the lowest), placed at
 *          the end of the range that is already mapped; a new virtual range
 *          only when none fits.
 *   trim   mapping new pages is free as long as reserved memory stays under
 *          its peak so far; past it, whole free pages elsewhere (largest free
 *          blocks first, any stream) are unmapped first, so a new peak is
 *          only set when live data needs it. Free pages otherwise stay
 *          mapped, so a steady training loop makes no device calls.
 *   free   merge with free mapped neighbours; nothing is unmapped.
 *   empty_cache, out of memory: unmap every whole free page.
 *
 * Freed memory is reused only by its own stream (stream order makes that
 * safe); unmapped pages belong to no stream. On a real GPU, unmapping a page
 * whose last use was on another stream needs that stream to be synchronised
 * first, as PyTorch's expandable segments do. */
#include <stdlib.h>

#include "gm_bestfit.h"

typedef struct gpm {
  uint64_t va; /* size of a stream's virtual range */
} gpm_t;

static uint64_t down(uint64_t x) { return x & ~(GM_PAGE - 1); }

static int gpm_init(gm_alloc_t *a) {
  gpm_t *s = calloc(1, sizeof *s);
  if (!s) return GM_ENOMEM;
  uint64_t total = a->cfg.device_total, f = 0;
  if (!total && a->be.mem_info(a->be.ctx, &f, &total) != GM_OK) total = 0;
  if (!total || total > (1ull << 42)) total = 1ull << 42; /* address space stays affordable */
  s->va = gm_up(total + total / 8, GM_PAGE);
  a->pol_state = s;
  return GM_OK;
}

/* a new block of b's segment covering [ptr, ptr+size) */
static gm_block_t *piece(gm_alloc_t *a, const gm_block_t *b, uint64_t ptr, uint64_t size, int mapped) {
  gm_block_t *x = gm_block_of(a, b, ptr, size);
  if (x) x->mapped = (uint8_t)mapped;
  return x;
}

static void link_before(gm_block_t *x, gm_block_t *b) {
  x->prev = b->prev;
  x->next = b;
  if (b->prev) b->prev->next = x;
  else b->seg->head = x;
  b->prev = x;
}

static void link_after(gm_block_t *x, gm_block_t *b) {
  x->prev = b;
  x->next = b->next;
  if (b->next) b->next->prev = x;
  b->next = x;
}

static int is_free(const gm_block_t *b) { return b && b->in_set == GM_SET_FREE; }
static int is_unmapped(const gm_block_t *b) { return b && b->in_set == GM_SET_UNMAPPED; }

/* Put unmapped block x (in no set) into the unmapped set, merged with its
 * unmapped neighbours first: a trim may have unmapped pages next to it. */
static void settle_unmapped(gm_alloc_t *a, gm_block_t *x) {
  if (is_unmapped(x->prev)) gm_block_absorb(a, x, x->prev);
  if (is_unmapped(x->next)) gm_block_absorb(a, x, x->next);
  gm_unmapped_insert(x);
}

/* Unmap the whole pages inside free block b; the bytes unmapped. */
static uint64_t unmap_pages(gm_alloc_t *a, gm_block_t *b) {
  uint64_t end = b->ptr + b->size, lo = gm_up(b->ptr, GM_PAGE), hi = down(end);
  if (lo >= hi) return 0;
  gm_block_t *before = lo > b->ptr ? piece(a, b, b->ptr, lo - b->ptr, 1) : NULL;
  gm_block_t *after = hi < end ? piece(a, b, hi, end - hi, 1) : NULL;
  if ((lo > b->ptr && !before) || (hi < end && !after) ||
      a->be.unmap(a->be.ctx, lo, hi - lo, GM_PAGE) != GM_OK) {
    if (before) gm_block_delete(a, before);
    if (after) gm_block_delete(a, after);
    return 0;
  }
  gm_free_erase(b);
  if (before) {
    link_before(before, b);
    gm_free_insert(before);
  }
  if (after) {
    link_after(after, b);
    gm_free_insert(after);
  }
  b->ptr = lo;
  b->size = hi - lo;
  b->mapped = 0;
  if (is_unmapped(b->prev)) gm_block_absorb(a, b, b->prev);
  if (is_unmapped(b->next)) gm_block_absorb(a, b, b->next);
  gm_unmapped_insert(b);
  gm_pages_unmapped(a, b->pool, hi - lo);
  return hi - lo;
}

/* Unmap free pages, largest free blocks first, until `want` bytes are. */
static uint64_t trim(gm_alloc_t *a, uint64_t want) {
  uint64_t got = 0;
  gm_block_t key = {0};
  key.stream = key.size = key.ptr = UINT64_MAX;
  gm_block_t *it = gm_treap_before(a->large.free, &key, gm_less_size);
  while (it && got < want) {
    if (it->size < GM_PAGE) { /* no whole page left in this stream: the previous one */
      key.stream = it->stream;
      key.size = key.ptr = 0;
      it = gm_treap_before(a->large.free, &key, gm_less_size);
      continue;
    }
    gm_block_t *prev = gm_treap_prev(it);
    got += unmap_pages(a, it);
    it = prev;
  }
  return got;
}

/* Hand out [start, start+n) of free mapped block f (not in the free set);
 * what is left on either side stays free. */
static gm_block_t *carve(gm_alloc_t *a, gm_block_t *f, uint64_t start, uint64_t n, uint64_t orig) {
  uint64_t end = f->ptr + f->size;
  gm_block_t *before = start > f->ptr ? piece(a, f, f->ptr, start - f->ptr, 1) : NULL;
  gm_block_t *after = start + n < end ? piece(a, f, start + n, end - start - n, 1) : NULL;
  if ((start > f->ptr && !before) || (start + n < end && !after)) {
    if (before) gm_block_delete(a, before);
    if (after) gm_block_delete(a, after);
    gm_free_insert(f);
    return NULL;
  }
  if (before) {
    link_before(before, f);
    gm_free_insert(before);
  }
  if (after) {
    link_after(after, f);
    gm_free_insert(after);
  }
  f->ptr = start;
  f->size = n;
  gm_count_alloc(a, f, orig);
  return f;
}

/* Where an allocation goes around unmapped block u: the pages [lo, hi) of
 * u to map and the allocation's start. */
typedef struct place {
  gm_block_t *u, *p, *n; /* p, n: free mapped neighbours of u, or NULL */
  uint64_t start, lo, hi, total;
} place_t;

static int fits(gm_block_t *u, uint64_t n, place_t *pl) {
  gm_block_t *p = is_free(u->prev) ? u->prev : NULL;
  gm_block_t *nx = is_free(u->next) ? u->next : NULL;
  uint64_t total = u->size + (p ? p->size : 0) + (nx ? nx->size : 0);
  if (total < n) return 0;
  uint64_t uend = u->ptr + u->size;
  /* at the start of the range, using p's bytes */
  uint64_t s0 = p ? p->ptr : u->ptr;
  uint64_t hi0 = s0 + n <= u->ptr ? u->ptr : gm_up(s0 + n, GM_PAGE);
  if (hi0 > uend) hi0 = uend;
  /* at its end, using nx's bytes */
  uint64_t e1 = nx ? nx->ptr + nx->size : uend, s1 = e1 - n;
  uint64_t lo1 = s1 >= uend ? uend : (down(s1) > u->ptr ? down(s1) : u->ptr);
  pl->u = u;
  pl->total = total;
  if (hi0 - u->ptr <= uend - lo1) {
    pl->start = s0;
    pl->lo = u->ptr;
    pl->hi = hi0;
  } else {
    pl->start = s1;
    pl->lo = lo1;
    pl->hi = uend;
  }
  pl->p = p && pl->lo == u->ptr ? p : NULL;
  pl->n = nx && pl->hi == uend ? nx : NULL;
  return 1;
}

static int better(const place_t *x, const place_t *best) {
  uint64_t px = x->hi - x->lo, pb = best->hi - best->lo;
  if (px != pb) return px < pb;
  if (x->total != best->total) return x->total < best->total;
  return x->u->ptr < best->u->ptr;
}

static gm_block_t *new_range(gm_alloc_t *a, uint64_t stream, uint64_t n, int *rc) {
  gpm_t *s = a->pol_state;
  uint64_t va = s->va > gm_up(n, GM_PAGE) ? s->va : gm_up(n, GM_PAGE), base = 0;
  if ((*rc = a->be.va_reserve(a->be.ctx, va, GM_PAGE, &base)) != GM_OK) return NULL;
  gm_block_t *u = gm_seg_new_whole(a, base, va, stream, &a->large, 1, GM_PAGE);
  if (!u) {
    a->be.va_release(a->be.ctx, base, va);
    *rc = GM_EBACKEND;
    return NULL;
  }
  gm_unmapped_insert(u);
  return u;
}

static int gpm_malloc(gm_alloc_t *a, const gm_request_t *rq, gm_block_t **out, gm_oom_t *oom) {
  uint64_t orig = rq->size, stream = rq->stream; /* no hint: ranges go where the driver puts them */
  uint64_t n = gm_up(orig, GM_MIN_BLOCK);
  gm_block_t *b = gm_pol_best_fit(a, stream, n);
  if (b) {
    gm_free_erase(b);
    return (*out = carve(a, b, b->ptr, n, orig)) ? GM_OK : GM_EBACKEND;
  }
  /* the free range around an unmapped block that needs the fewest pages */
  place_t best = {0}, pl;
  gm_block_t key = {0};
  key.stream = stream;
  for (gm_block_t *u = gm_treap_lower_bound(a->large.unmapped, &key, gm_less_addr);
       u && u->stream == stream; u = gm_treap_next(u))
    if (fits(u, n, &pl) && (!best.u || better(&pl, &best))) best = pl;
  if (!best.u) {
    int rc;
    gm_block_t *u = new_range(a, stream, n, &rc);
    if (!u) return rc == GM_ENOMEM ? gm_oom(a, orig, n, gm_up(n, GM_PAGE), stream, oom) : rc;
    fits(u, n, &best);
  }
  gm_block_t *u = best.u, *p = best.p, *nx = best.n;
  uint64_t need = best.hi - best.lo;
  /* Keep u and its neighbours out of the trim: unmapping pages next to u
   * would otherwise merge u away while it is being placed. */
  if (p) gm_free_erase(p);
  if (nx) gm_free_erase(nx);
  gm_unmapped_erase(u);
  uint64_t peak = (uint64_t)a->st.reserved_bytes[GM_STAT_ALL].peak;
  if (a->total_allocated + need > peak) trim(a, a->total_allocated + need - peak);
  if (gm_over_cap(a, need)) trim(a, UINT64_MAX);
  int rc = gm_over_cap(a, need) ? GM_ENOMEM : a->be.map(a->be.ctx, best.lo, need, GM_PAGE);
  if (rc == GM_ENOMEM) {
    trim(a, UINT64_MAX);
    rc = a->be.map(a->be.ctx, best.lo, need, GM_PAGE);
  }
  gm_block_t *lo = rc == GM_OK && best.lo > u->ptr ? piece(a, u, u->ptr, best.lo - u->ptr, 0) : NULL;
  uint64_t uend = u->ptr + u->size;
  gm_block_t *hi = rc == GM_OK && best.hi < uend ? piece(a, u, best.hi, uend - best.hi, 0) : NULL;
  if (rc == GM_OK && ((best.lo > u->ptr && !lo) || (best.hi < uend && !hi))) {
    a->be.unmap(a->be.ctx, best.lo, need, GM_PAGE);
    if (lo) gm_block_delete(a, lo);
    if (hi) gm_block_delete(a, hi);
    rc = GM_EBACKEND;
  }
  if (rc != GM_OK) {
    if (p) gm_free_insert(p);
    if (nx) gm_free_insert(nx);
    settle_unmapped(a, u);
    return rc == GM_ENOMEM ? gm_oom(a, orig, n, need, stream, oom) : rc;
  }
  if (lo) {
    link_before(lo, u);
    settle_unmapped(a, lo);
  }
  if (hi) {
    link_after(hi, u);
    settle_unmapped(a, hi);
  }
  u->ptr = best.lo;
  u->size = need;
  u->mapped = 1;
  gm_pages_mapped(a, u->pool, need);
  if (p) gm_block_absorb(a, u, p);
  if (nx) gm_block_absorb(a, u, nx);
  return (*out = carve(a, u, best.start, n, orig)) ? GM_OK : GM_EBACKEND;
}

static void gpm_free(gm_alloc_t *a, gm_block_t *b) {
  gm_count_free(a, b);
  if (is_free(b->prev)) gm_block_absorb(a, b, b->prev);
  if (is_free(b->next)) gm_block_absorb(a, b, b->next);
  gm_free_insert(b);
}

static void gpm_empty_cache(gm_alloc_t *a) {
  a->st.num_sync_all_streams++; /* pages are unmapped after a device sync */
  trim(a, UINT64_MAX);
}

/* Unmap every mapped run, so that gm_free only releases the ranges. */
static void gpm_destroy(gm_alloc_t *a) {
  for (gm_seg_t *s = a->segs; s; s = s->next_seg) {
    if (!s->expandable) continue;
    gm_block_t *b = s->head;
    while (b) {
      if (!b->mapped) {
        b = b->next;
        continue;
      }
      uint64_t lo = b->ptr, hi = lo;
      for (; b && b->mapped; b = b->next) {
        hi = b->ptr + b->size;
        b->mapped = 0;
      }
      a->be.unmap(a->be.ctx, lo, hi - lo, GM_PAGE);
    }
  }
  free(a->pol_state);
  a->pol_state = NULL;
}

const gm_policy_t gm_policy_gpumem = {
    .info = {.name = "gpumem",
             .summary = "gpumem's own: page-granular virtual memory, peak reserved near the peak of live bytes",
             .note = "it is gpumem's own policy; PyTorch has no such allocator"},
    .init = gpm_init,
    .malloc = gpm_malloc,
    .free = gpm_free,
    .empty_cache = gpm_empty_cache,
    .destroy = gpm_destroy,
};
