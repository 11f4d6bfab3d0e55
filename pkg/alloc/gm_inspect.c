/* gm_inspect.c — looking at the allocator from outside: the invariant
 * checker (gm_check) and snapshots (gm_snapshot). Neither changes state. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gm_devlog.h"
#include "gm_treap.h"

int gm_check_fail(char *msg, size_t len, const char *fmt, ...) {
  if (msg && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
  }
  return GM_ECORRUPT;
}

static int idle_free(const gm_block_t *b) { return !b->allocated && !b->pending && !b->uses; }

typedef struct totals {
  int64_t allocation, allocated, active, active_bytes, requested, reserved, segment;
  int64_t inactive_split, inactive_split_bytes;
  size_t free_blocks, unmapped_blocks;
} totals_t;

/* Check one set: ordered, linked to parent up, threaded in order (each
 * member's sprev is *last, the member before it in an in-order walk, whose
 * snext is it), and every member is what the set should hold. */
static int check_set(const gm_block_t *t, const gm_block_t *up, const gm_block_t *lo,
                     const gm_block_t *hi, gm_less_fn less, int kind, const gm_pool_t *pool,
                     const gm_block_t **last, size_t *count, char *msg, size_t len) {
  if (!t) return GM_OK;
  if (t->parent != up)
    return gm_check_fail(msg, len, "I3: treap parent link broken at block 0x%llx", (unsigned long long)t->ptr);
  if ((lo && !less(lo, t)) || (hi && !less(t, hi)))
    return gm_check_fail(msg, len, "I3: set out of order at block 0x%llx", (unsigned long long)t->ptr);
  if (t->in_set != kind || t->pool != pool)
    return gm_check_fail(msg, len, "I3: block 0x%llx in the wrong set", (unsigned long long)t->ptr);
  if (kind == GM_SET_FREE && (!t->mapped || !idle_free(t)))
    return gm_check_fail(msg, len, "I3: free set holds a busy or unmapped block 0x%llx", (unsigned long long)t->ptr);
  if (kind == GM_SET_FREE && pool->settled && (t->seg->expandable || (!t->prev && !t->next)))
    return gm_check_fail(msg, len, "I3: settled pool holds block 0x%llx, which a release gives back", (unsigned long long)t->ptr);
  if (kind == GM_SET_UNMAPPED && t->mapped)
    return gm_check_fail(msg, len, "I3: unmapped set holds a mapped block 0x%llx", (unsigned long long)t->ptr);
  if ((t->left && t->left->prio > t->prio) || (t->right && t->right->prio > t->prio))
    return gm_check_fail(msg, len, "I3: treap heap order broken at 0x%llx", (unsigned long long)t->ptr);
  (*count)++;
  int rc = check_set(t->left, t, lo, t, less, kind, pool, last, count, msg, len);
  if (rc != GM_OK) return rc;
  if (t->sprev != *last || (*last && (*last)->snext != t))
    return gm_check_fail(msg, len, "I3: set threads broken at block 0x%llx", (unsigned long long)t->ptr);
  *last = t;
  return check_set(t->right, t, t, hi, less, kind, pool, last, count, msg, len);
}

/* Check a set from its root: check_set, and its last member ends the thread. */
static int check_root(const gm_block_t *root, gm_less_fn less, int kind, const gm_pool_t *pool,
                      size_t *count, char *msg, size_t len) {
  const gm_block_t *last = NULL;
  int rc = check_set(root, NULL, NULL, NULL, less, kind, pool, &last, count, msg, len);
  if (rc == GM_OK && last && last->snext)
    return gm_check_fail(msg, len, "I3: set threads go on past block 0x%llx", (unsigned long long)last->ptr);
  return rc;
}

/* s is a->st's entry i (GM_STAT_ALL, _LARGE, _SMALL) of a stat array:
 * current as the blocks add up, peak not below it, and of the totals only
 * what a->st keeps (gm_policy.h, "statistics"): freed stays 0, and so does
 * the "all" entry's allocated, which gm_get_stats makes the sum of the
 * others'. */
static int check_stat(const char *name, const gm_stat_t *s, int i, int64_t want, char *msg, size_t len) {
  if (s->current != want)
    return gm_check_fail(msg, len, "I4: %s is %lld, the blocks add up to %lld", name,
                (long long)s->current, (long long)want);
  if (s->peak < s->current || s->freed != 0 || (i == GM_STAT_ALL && s->allocated != 0))
    return gm_check_fail(msg, len, "I4: %s peak or totals inconsistent", name);
  return GM_OK;
}

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

int gm_check(const gm_alloc_t *a, char *msg, size_t len) {
  totals_t tot[3];
  memset(tot, 0, sizeof tot);
  size_t nseg = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg) nseg++;
  uint64_t *ranges = malloc((nseg ? nseg : 1) * 2 * sizeof *ranges);
  if (!ranges) return gm_check_fail(msg, len, "out of memory while checking");
  size_t k = 0;
  int rc = GM_OK;
  for (const gm_seg_t *s = a->segs; s && rc == GM_OK; s = s->next_seg) {
    ranges[2 * k] = s->base;
    ranges[2 * k + 1] = s->size;
    k++;
    const gm_block_t *b = s->head;
    if (!b || b->prev || b->ptr != s->base) {
      rc = gm_check_fail(msg, len, "I1: segment 0x%llx does not start with its head block", (unsigned long long)s->base);
      break;
    }
    totals_t *t = &tot[s->pool->is_small ? GM_STAT_SMALL : GM_STAT_LARGE];
    uint64_t end = s->base;
    int split = b->next != NULL;
    for (; b; b = b->next) {
      if (b->seg != s || b->pool != s->pool) { rc = gm_check_fail(msg, len, "I1: block 0x%llx points at another segment", (unsigned long long)b->ptr); break; }
      if (b->ptr != end) { rc = gm_check_fail(msg, len, "I1: gap or overlap at 0x%llx in segment 0x%llx", (unsigned long long)b->ptr, (unsigned long long)s->base); break; }
      if (!b->mapped && !s->expandable) { rc = gm_check_fail(msg, len, "I1: unmapped block 0x%llx in a segment that is not expandable", (unsigned long long)b->ptr); break; }
      if (b->size == 0 || b->size % GM_MIN_BLOCK) { rc = gm_check_fail(msg, len, "I4: block 0x%llx has size %llu", (unsigned long long)b->ptr, (unsigned long long)b->size); break; }
      if (b->next && b->next->prev != b) { rc = gm_check_fail(msg, len, "I1: broken links at 0x%llx", (unsigned long long)b->ptr); break; }
      if (b->next && b->mapped == b->next->mapped && b->mapped && idle_free(b) && idle_free(b->next) && b->stream == b->next->stream) { rc = gm_check_fail(msg, len, "I2: free neighbours not merged at 0x%llx", (unsigned long long)b->ptr); break; }
      if (b->next && !b->mapped && !b->next->mapped) { rc = gm_check_fail(msg, len, "I2: unmapped neighbours not merged at 0x%llx", (unsigned long long)b->ptr); break; }
      if (b->allocated && b->pending) { rc = gm_check_fail(msg, len, "I5: block 0x%llx allocated and pending", (unsigned long long)b->ptr); break; }
      if (b->allocated || b->pending) {
        if (b->id == GM_NO_ID || b->id >= a->nids || a->ids[b->id] != b) { rc = gm_check_fail(msg, len, "I5: live block 0x%llx has no id", (unsigned long long)b->ptr); break; }
        if (b->allocated) { t->allocation++; t->allocated += (int64_t)b->size; }
        t->active++;
        t->active_bytes += (int64_t)b->size;
        t->requested += (int64_t)b->requested;
      } else if (b->mapped) {
        if (b->in_set != GM_SET_FREE) { rc = gm_check_fail(msg, len, "I3: free block 0x%llx not in the free set", (unsigned long long)b->ptr); break; }
        t->free_blocks++;
        if (!s->expandable && split) { t->inactive_split++; t->inactive_split_bytes += (int64_t)b->size; }
      } else {
        if (b->in_set != GM_SET_UNMAPPED) { rc = gm_check_fail(msg, len, "I3: unmapped block 0x%llx not in the unmapped set", (unsigned long long)b->ptr); break; }
        t->unmapped_blocks++;
      }
      if (b->mapped && s->expandable) t->reserved += (int64_t)b->size;
      end = b->ptr + b->size;
    }
    if (rc == GM_OK && end != s->base + s->size)
      rc = gm_check_fail(msg, len, "I1: blocks of segment 0x%llx end at 0x%llx, not at its end", (unsigned long long)s->base, (unsigned long long)end);
    if (!s->expandable) {
      t->reserved += (int64_t)s->size;
      t->segment++;
    }
  }
  if (rc == GM_OK) {
    qsort(ranges, k, 2 * sizeof *ranges, cmp_u64);
    for (size_t i = 1; i < k; i++)
      if (ranges[2 * (i - 1)] + ranges[2 * (i - 1) + 1] > ranges[2 * i]) {
        rc = gm_check_fail(msg, len, "I1: segments overlap at 0x%llx", (unsigned long long)ranges[2 * i]);
        break;
      }
  }
  free(ranges);
  if (rc != GM_OK) return rc;

  /* the default pools and every private one (I3, I6): each set holds only
   * its own pool's blocks, and together they hold every free block */
  size_t npools = 2 + gm_pools_list(a, NULL, 0);
  const gm_pool_t **pools = malloc(npools * sizeof *pools);
  if (!pools) return gm_check_fail(msg, len, "out of memory while checking");
  pools[0] = &a->large;
  pools[1] = &a->small;
  gm_pools_list(a, pools + 2, npools - 2);
  size_t nf[3] = {0}, nu[3] = {0};
  for (size_t i = 0; i < npools && rc == GM_OK; i++) {
    int c = pools[i]->is_small ? GM_STAT_SMALL : GM_STAT_LARGE;
    rc = check_root(pools[i]->free, gm_less_size, GM_SET_FREE, pools[i], &nf[c], msg, len);
    if (rc == GM_OK) rc = check_root(pools[i]->unmapped, gm_less_addr, GM_SET_UNMAPPED, pools[i], &nu[c], msg, len);
  }
  free(pools);
  if (rc != GM_OK) return rc;
  for (int c = GM_STAT_LARGE; c <= GM_STAT_SMALL; c++) {
    if (nf[c] != tot[c].free_blocks) return gm_check_fail(msg, len, "I3: free sets hold %zu blocks, the segments %zu", nf[c], tot[c].free_blocks);
    if (nu[c] != tot[c].unmapped_blocks) return gm_check_fail(msg, len, "I3: unmapped sets hold %zu blocks, the segments %zu", nu[c], tot[c].unmapped_blocks);
  }
  if ((rc = gm_pools_check(a, msg, len)) != GM_OK) return rc;
  if ((rc = gm_sim_check(gm_devlog_inner(a), msg, len)) != GM_OK) return rc;
  if ((rc = gm_watch_check(a, msg, len)) != GM_OK) return rc;
  for (int i = 1; i < 3; i++) {
    tot[0].allocation += tot[i].allocation;
    tot[0].allocated += tot[i].allocated;
    tot[0].active += tot[i].active;
    tot[0].active_bytes += tot[i].active_bytes;
    tot[0].requested += tot[i].requested;
    tot[0].reserved += tot[i].reserved;
    tot[0].segment += tot[i].segment;
    tot[0].inactive_split += tot[i].inactive_split;
    tot[0].inactive_split_bytes += tot[i].inactive_split_bytes;
  }
  static const char *names[3] = {"all", "large_pool", "small_pool"};
  const gm_stats_t *st = &a->st;
  char name[64];
  for (int i = 0; i < 3; i++) {
#define CHECK(field, want)                                             \
  snprintf(name, sizeof name, "%s.%s", #field, names[i]);              \
  if ((rc = check_stat(name, &st->field[i], i, (want), msg, len)) != GM_OK) return rc;
    CHECK(allocation, tot[i].allocation);
    CHECK(allocated_bytes, tot[i].allocated);
    CHECK(active, tot[i].active);
    CHECK(active_bytes, tot[i].active_bytes);
    CHECK(requested_bytes, tot[i].requested);
    CHECK(reserved_bytes, tot[i].reserved);
    CHECK(segment, tot[i].segment);
    CHECK(inactive_split, tot[i].inactive_split);
    CHECK(inactive_split_bytes, tot[i].inactive_split_bytes);
#undef CHECK
  }
  if ((int64_t)a->total_allocated != tot[0].reserved)
    return gm_check_fail(msg, len, "I4: device bytes %llu differ from reserved %lld", (unsigned long long)a->total_allocated, (long long)tot[0].reserved);
  return GM_OK;
}

/* ------------------------------------------------------------------ */

static int cmp_seg(const void *x, const void *y) {
  const gm_segment_info_t *a = x, *b = y;
  return a->address < b->address ? -1 : a->address > b->address;
}

void gm_snapshot(const gm_alloc_t *a, gm_segment_info_t *segs, size_t nseg,
                 gm_block_info_t *blks, size_t nblk, size_t *need_seg, size_t *need_blk) {
  size_t ns = 0, nb = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg) {
    const gm_block_t *b = s->head;
    while (b) {
      /* an expandable segment shows as one segment per mapped run */
      if (!b->mapped) {
        b = b->next;
        continue;
      }
      gm_segment_info_t si = {0};
      si.address = b->ptr;
      si.stream = s->stream;
      si.is_small = s->pool->is_small;
      si.pool = s->pool->owner ? s->pool->owner->id : 0;
      si.is_expandable = s->expandable;
      si.first_block = (uint32_t)nb;
      for (; b && b->mapped; b = b->next) {
        gm_block_info_t bi = {b->ptr, b->size, b->requested, GM_NO_ID, GM_BLOCK_INACTIVE};
        if (b->allocated || b->pending) {
          bi.state = b->allocated ? GM_BLOCK_ALLOCATED : GM_BLOCK_PENDING;
          bi.id = b->id;
          si.active_size += b->size;
          si.requested_size += b->requested;
          if (b->allocated) si.allocated_size += b->size;
        }
        si.total_size += b->size;
        if (nb < nblk) blks[nb] = bi;
        nb++;
        si.nblocks++;
      }
      if (ns < nseg) segs[ns] = si;
      ns++;
    }
  }
  if (segs && ns <= nseg) qsort(segs, ns, sizeof *segs, cmp_seg);
  *need_seg = ns;
  *need_blk = nb;
}

/* ------------------------------------------------------------------ */

int gm_grow_slow(void **p, size_t *cap, size_t need, size_t elem) {
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return GM_EBACKEND;
  *p = q;
  *cap = c;
  return GM_OK;
}
