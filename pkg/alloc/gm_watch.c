/* gm_watch.c — the other placement, watched (gm_placement_watch).
 *
 * A decorator takes the allocator's backend's place, forwards every call
 * to it, and makes the same call on a second device: the simulated
 * device's other placement. It keeps, for each live range (a cudaMalloc or
 * an address-space reservation), its address on both devices. The pytorch
 * policy's decisions depend on addresses in one place it follows: best fit
 * takes the lowest address among equal free blocks (gm_placement_pick asks
 * whether the other placement's lowest is the same block, or, like it, a
 * whole free segment: then the two swap places in the watch, and the
 * allocator goes on alike on both). Releasing every
 * free segment (empty_cache, garbage collection) is a set, in whatever
 * order. So while the second device answers every call as the first (same
 * status, same memory info) and every pick is the same, an allocator on
 * the second device would have made the same decisions, asked the same
 * calls and counted the same statistics: the watch agrees. Once one is
 * not, or the policy takes a path that depends on addresses otherwise
 * (gm_placement_unfollowed: expandable segments, a claim by address, the
 * release of oversize blocks), or the policy is not pytorch, the watch
 * stops and says so; the second device is then left alone. */
#include <stdlib.h>
#include <string.h>

#include "gm_treap.h"

/* A live range: its address on the allocator's device and on the other. */
typedef struct wrange {
  uint64_t addr, other, size;
} wrange_t;

struct gm_watch {
  gm_backend_t inner; /* the allocator's own device */
  gm_backend_t other; /* the other placement */
  gm_alloc_t *a;
  wrange_t *r;        /* live ranges by addr (I8) */
  size_t n, cap;
  size_t crossed;     /* neighbouring ranges not in the same order on the other device (I8) */
  /* the bases of the upper ranges of the lowest and the highest crossed
   * pair, and the lowest other base of the ranges from lo up (bounds),
   * unless stale: ranges change, or swap their others */
  uint64_t lo, hi, lo_other;
  int stale;
  int off;            /* disagreed: no longer watching */
};
typedef struct gm_watch watch_t;

/* stop: the watch no longer agrees, for good. */
static void stop(watch_t *w) {
  w->off = 1;
  w->a->watch = NULL;
}

/* at is the index of the first range whose addr is not below addr. */
static size_t at(const watch_t *w, uint64_t addr) {
  return gm_first_at_least(w->r, w->n, sizeof *w->r, offsetof(wrange_t, addr), addr);
}

/* cross is 1 when ranges k-1 and k are neighbours here but not, apart
 * and in this order, on the other device: range k-1's other end is above
 * range k's other base. While no two are crossed, the other device keeps
 * every range in this device's order, so blocks compare alike on both. */
static size_t cross(const watch_t *w, size_t k) {
  return k > 0 && k < w->n && w->r[k - 1].other + w->r[k - 1].size > w->r[k].other;
}

/* add records a new range, addr on the allocator's device and other on
 * the other one (the watch stops when memory runs out). */
static void add(watch_t *w, uint64_t addr, uint64_t other, uint64_t size) {
  size_t k = at(w, addr);
  if (w->n == w->cap) {
    size_t c = w->cap ? 2 * w->cap : 64;
    wrange_t *r = realloc(w->r, c * sizeof *r);
    if (!r) {
      stop(w);
      return;
    }
    w->r = r;
    w->cap = c;
  }
  w->crossed -= cross(w, k);
  w->stale = 1;
  memmove(w->r + k + 1, w->r + k, (w->n - k) * sizeof *w->r);
  w->r[k] = (wrange_t){.addr = addr, .other = other, .size = size};
  w->n++;
  w->crossed += cross(w, k) + cross(w, k + 1);
}

/* find is the range holding [addr, addr+size), or NULL (the watch then
 * stops: the allocator asked about memory it never obtained). */
static wrange_t *find(watch_t *w, uint64_t addr, uint64_t size) {
  size_t k = at(w, addr + 1);
  if (k == 0 || addr + size > w->r[k - 1].addr + w->r[k - 1].size) {
    stop(w);
    return NULL;
  }
  return &w->r[k - 1];
}

static void drop(watch_t *w, wrange_t *r) {
  size_t k = (size_t)(r - w->r);
  w->crossed -= cross(w, k) + cross(w, k + 1);
  w->stale = 1;
  memmove(w->r + k, w->r + k + 1, (w->n - k - 1) * sizeof *w->r);
  w->n--;
  w->crossed += cross(w, k);
}

/* crossed_near counts the crossed pairs among ranges i-1, i, i+1 and
 * j-1, j, j+1, each pair once. */
static size_t crossed_near(const watch_t *w, size_t i, size_t j) {
  size_t c = cross(w, i) + cross(w, i + 1);
  if (j != i) c += cross(w, j) * (j != i + 1) + cross(w, j + 1) * (j + 1 != i);
  return c;
}

/* same stops the watch unless both devices answered rc. */
static void same(watch_t *w, int rc, int other) {
  if (rc != other) stop(w);
}

static int wt_malloc(void *ctx, uint64_t size, uint64_t hint, uint64_t *addr) {
  watch_t *w = ctx;
  int rc = w->inner.malloc(w->inner.ctx, size, hint, addr);
  if (!w->off) {
    uint64_t o = 0;
    same(w, rc, w->other.malloc(w->other.ctx, size, hint, &o));
    if (!w->off && rc == GM_OK) add(w, *addr, o, size);
  }
  return rc;
}

static int wt_free(void *ctx, uint64_t addr, uint64_t size) {
  watch_t *w = ctx;
  int rc = w->inner.free(w->inner.ctx, addr, size);
  wrange_t *r;
  if (!w->off && (r = find(w, addr, size))) {
    same(w, rc, w->other.free(w->other.ctx, r->other, size));
    drop(w, r);
  }
  return rc;
}

static int wt_va_reserve(void *ctx, uint64_t size, uint64_t page, uint64_t *addr) {
  watch_t *w = ctx;
  int rc = w->inner.va_reserve(w->inner.ctx, size, page, addr);
  if (!w->off) {
    uint64_t o = 0;
    same(w, rc, w->other.va_reserve(w->other.ctx, size, page, &o));
    if (!w->off && rc == GM_OK) add(w, *addr, o, size);
  }
  return rc;
}

static int wt_va_release(void *ctx, uint64_t addr, uint64_t size) {
  watch_t *w = ctx;
  int rc = w->inner.va_release(w->inner.ctx, addr, size);
  wrange_t *r;
  if (!w->off && (r = find(w, addr, size))) {
    same(w, rc, w->other.va_release(w->other.ctx, r->other, size));
    drop(w, r);
  }
  return rc;
}

static int wt_map(void *ctx, uint64_t addr, uint64_t size, uint64_t page) {
  watch_t *w = ctx;
  int rc = w->inner.map(w->inner.ctx, addr, size, page);
  const wrange_t *r;
  if (!w->off && (r = find(w, addr, size)))
    same(w, rc, w->other.map(w->other.ctx, r->other + (addr - r->addr), size, page));
  return rc;
}

static int wt_unmap(void *ctx, uint64_t addr, uint64_t size, uint64_t page) {
  watch_t *w = ctx;
  int rc = w->inner.unmap(w->inner.ctx, addr, size, page);
  const wrange_t *r;
  if (!w->off && (r = find(w, addr, size)))
    same(w, rc, w->other.unmap(w->other.ctx, r->other + (addr - r->addr), size, page));
  return rc;
}

static int wt_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
  watch_t *w = ctx;
  int rc = w->inner.mem_info(w->inner.ctx, free_bytes, total_bytes);
  if (!w->off) {
    uint64_t f = 0, t = 0;
    same(w, rc, w->other.mem_info(w->other.ctx, &f, &t));
    if (!w->off && rc == GM_OK && (f != *free_bytes || t != *total_bytes)) stop(w);
  }
  return rc;
}

static void wt_destroy(void *ctx) {
  watch_t *w = ctx;
  if (w->inner.destroy) w->inner.destroy(w->inner.ctx);
  if (w->other.destroy) w->other.destroy(w->other.ctx);
  free(w->r);
  free(w);
}

static const char *wt_error(void *ctx) {
  watch_t *w = ctx;
  return w->inner.error ? w->inner.error(w->inner.ctx) : NULL;
}

/* a's watch, stopped or not: its backend, or the one under its device
 * log; NULL when that is no watch. */
static watch_t *watch_of(const gm_alloc_t *a) {
  const gm_backend_t *be = gm_devlog_under(a);
  return be->malloc == wt_malloc ? be->ctx : NULL;
}

int gm_placement_watch(gm_alloc_t *a, const gm_backend_t *other) {
  /* every entry both devices must have, and nothing yet obtained */
  if (a->segs || watch_of(a) || !a->be.va_reserve ||
      !a->be.va_release || !a->be.map || !a->be.unmap || !a->be.mem_info || !other->malloc ||
      !other->free || !other->va_reserve || !other->va_release || !other->map ||
      !other->unmap || !other->mem_info)
    return GM_EINVAL;
  watch_t *w = calloc(1, sizeof *w);
  if (!w) return GM_ENOMEM;
  w->inner = a->be;
  w->other = *other;
  w->a = a;
  a->watch = w;
  uint64_t f = 0, t = 0; /* the two cards alike from the start: gm_new's caller sized a by its own */
  wt_mem_info(w, &f, &t);
  a->be = (gm_backend_t){.ctx = w, .malloc = wt_malloc, .free = wt_free,
                         .va_reserve = wt_va_reserve, .va_release = wt_va_release,
                         .map = wt_map, .unmap = wt_unmap, .mem_info = wt_mem_info,
                         .destroy = wt_destroy, .error = wt_error};
  if (a->cfg.policy != GM_POLICY_PYTORCH) stop(w); /* only pytorch's decisions are followed */
  return GM_OK;
}

int gm_placement_agrees(const gm_alloc_t *a) {
  const watch_t *w = watch_of(a);
  return w ? !w->off : -1;
}

void gm_placement_unfollowed(gm_alloc_t *a) {
  a->placement_ties = 1;
  if (a->watch) stop(a->watch);
}

/* other_of is where block b lies on the other placement, 0 when its
 * segment is no range (the watch then stops): its segment's base there
 * (kept in the segment once looked up) and b's offset. */
static uint64_t other_of(watch_t *w, const gm_block_t *b) {
  gm_seg_t *s = b->seg;
  if (!s->other) {
    const wrange_t *r = find(w, s->base, 1);
    if (!r) return 0;
    s->other = r->other;
  }
  return s->other + (b->ptr - s->base);
}

/* whole: b is the one block of its segment. Two free whole segments of one
 * stream and size in one pool differ only in where they lie (and, under
 * garbage collection, their age): whichever of them an allocation takes,
 * the allocator goes on alike, the other one in its place. */
static int whole(const gm_block_t *b) { return !b->prev && !b->next; }

/* bounds sets lo, hi and lo_other (while a pair is crossed). */
static void bounds(watch_t *w) {
  size_t k = 1;
  while (!cross(w, k)) k++;
  w->lo = w->r[k].addr;
  w->lo_other = UINT64_MAX;
  for (size_t j = k; j < w->n; j++)
    if (w->r[j].other < w->lo_other) w->lo_other = w->r[j].other;
  for (k = w->n - 1; !cross(w, k); k--) {}
  w->hi = w->r[k].addr;
  w->stale = 0;
}

static void pick_walk(watch_t *w, const gm_block_t *it, uint64_t lowest);

void gm_placement_pick_slow(gm_alloc_t *a, const gm_block_t *it) {
  watch_t *w = a->watch;
  /* Every candidate lies above it here; on the other device too when no
   * crossed pair lies between their ranges: so when none is, none lies
   * above it's range (it at or above hi), or none below n's (n below lo). */
  if (!w->crossed) return;
  if (w->stale) bounds(w);
  if (it->ptr >= w->hi) return;
  uint64_t lowest = 0;
  /* Below lo, it is the lowest on the other device too when it lies
   * below every range from lo up there: the candidates below lo are later
   * on both, and those from lo up lie in those ranges. Most picks end
   * here, without the walk (a call of its own: these tests alone save
   * and restore no register). */
  if (it->ptr < w->lo) {
    if (!(lowest = other_of(w, it))) return;
    if (lowest < w->lo_other) return;
  }
  pick_walk(w, it, lowest);
}

/* pick_walk is the rest of gm_placement_pick_slow: it walks the
 * candidates after it, lowest being it's address on the other device (0:
 * not yet looked up). */
__attribute__((noinline)) static void pick_walk(watch_t *w, const gm_block_t *it, uint64_t lowest) {
  const gm_block_t *z = it; /* the other placement's pick */
  /* n lies in it's segment when its address does (segments do not
   * overlap): asked of it's segment, read once, not of n's, which is on
   * n's second cache line, so that a block skipped costs one line */
  uint64_t base = it->seg->base, span = it->seg->size;
  for (const gm_block_t *n = gm_treap_next(it); n && n->stream == it->stream && n->size == it->size;
       n = gm_treap_next(n)) {
    if (n->ptr < w->lo || n->ptr - base < span) continue; /* below lo, or later in it's segment: later on both */
    if (!lowest && !(lowest = other_of(w, it))) return;
    uint64_t o = other_of(w, n);
    if (!o) return;
    if (o < lowest) {
      lowest = o;
      z = n;
    }
    /* the later ones lie above n on the other device too: n's range's base
     * is at or above hi (ranges do not overlap, and hi is a range's base),
     * and no crossed pair lies above it */
    if (n->ptr >= w->hi) break;
  }
  if (z == it) return;
  /* the other placement would take z: the same, where both are whole
   * segments of the same age, once their places swap */
  wrange_t *ri, *rz;
  if (!whole(it) || !whole(z) || it->gc_base != z->gc_base || !(ri = find(w, it->seg->base, 1)) ||
      !(rz = find(w, z->seg->base, 1))) {
    stop(w);
    return;
  }
  size_t i = (size_t)(ri - w->r), j = (size_t)(rz - w->r);
  w->crossed -= crossed_near(w, i, j);
  uint64_t o = ri->other;
  ri->other = rz->other;
  rz->other = o;
  w->crossed += crossed_near(w, i, j);
  w->stale = 1;
  it->seg->other = ri->other;
  z->seg->other = rz->other;
}

const gm_backend_t *gm_watch_inner(const gm_backend_t *be) {
  return be->malloc == wt_malloc ? &((const watch_t *)be->ctx)->inner : be;
}

int gm_watch_check(const gm_alloc_t *a, char *msg, size_t len) {
  const watch_t *w = watch_of(a);
  if (w && !w->off != (a->watch == w)) return gm_check_fail(msg, len, "I8: the watch agrees but the allocator does not see it, or the reverse");
  if (!w || w->off) return GM_OK;
  size_t segs = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg) {
    size_t k = at(w, s->base + 1);
    if (k == 0 || w->r[k - 1].addr != s->base || w->r[k - 1].size != s->size)
      return gm_check_fail(msg, len, "I8: segment 0x%llx is no watched range", (unsigned long long)s->base);
    if (s->other && s->other != w->r[k - 1].other)
      return gm_check_fail(msg, len, "I8: segment 0x%llx keeps another base than its range's", (unsigned long long)s->base);
    segs++;
  }
  if (segs != w->n) return gm_check_fail(msg, len, "I8: %zu watched ranges, %zu segments", w->n, segs);
  int rc = gm_sim_check(&w->other, msg, len); /* I7 on the other placement */
  if (rc != GM_OK) return rc;
  size_t crossed = 0;
  for (size_t i = 1; i < w->n; i++) {
    if (w->r[i - 1].addr + w->r[i - 1].size > w->r[i].addr)
      return gm_check_fail(msg, len, "I8: watched ranges 0x%llx and 0x%llx overlap", (unsigned long long)w->r[i - 1].addr,
                     (unsigned long long)w->r[i].addr);
    crossed += cross(w, i);
  }
  if (crossed != w->crossed)
    return gm_check_fail(msg, len, "I8: %zu crossed neighbouring ranges, the watch counts %zu", crossed, w->crossed);
  if (crossed && !w->stale) {
    watch_t b = *w;
    bounds(&b);
    if (b.lo != w->lo || b.hi != w->hi || b.lo_other != w->lo_other) return gm_check_fail(msg, len, "I8: the crossed ranges' bounds are not the watch's");
  }
  return GM_OK;
}
