/* gm_flat_step and gm_run_steps: the block list followed op by op (the
 * HTML explorer's stepped replay). The list is kept from step to step and
 * only the segments an op touched (gm_touch) are walked again: a step
 * costs the blocks it changed, not the whole list. */
#include <stdlib.h>
#include <string.h>

#include "gm_devlog.h"
#include "gm_internal.h"

void gm_touch_slow(gm_seg_t *s) {
  gm_alloc_t *a = s->owner;
  if (gm_grow((void **)&a->touched, &a->touched_cap, a->ntouched + 1, sizeof *a->touched) != GM_OK) {
    a->touch_lost = 1; /* the next step walks every segment */
    return;
  }
  a->touched[a->ntouched++] = s;
  s->touch = GM_TOUCHED;
}

static int cmp_seg_base(const void *x, const void *y) {
  const gm_seg_t *a = *(const gm_seg_t *const *)x, *b = *(const gm_seg_t *const *)y;
  return a->base < b->base ? -1 : a->base > b->base;
}

/* put_seg appends s's mapped blocks to *buf (*n of *cap), each mapped run
 * a segment of its own, as gm_snapshot shows them. */
static int put_seg(const gm_seg_t *s, gm_flat_block_t **buf, size_t *cap, size_t *n) {
  size_t nb = *n;
  const gm_block_t *b = s->head;
  while (b) {
    if (!b->mapped) {
      b = b->next;
      continue;
    }
    size_t first = nb;
    uint64_t total = 0;
    for (; b && b->mapped; b = b->next) {
      if (nb >= *cap && gm_grow((void **)buf, cap, nb + 1, sizeof **buf) != GM_OK) return GM_EBACKEND;
      gm_flat_block_t *o = &(*buf)[nb++];
      *o = (gm_flat_block_t){.address = b->ptr, .size = b->size, .id = GM_NO_ID, .state = GM_BLOCK_INACTIVE};
      if (b->allocated || b->pending) {
        o->state = b->allocated ? GM_BLOCK_ALLOCATED : GM_BLOCK_PENDING;
        o->id = b->id;
      }
      total += b->size;
    }
    (*buf)[first].seg_size = total;
    for (size_t j = first; j < nb; j++) (*buf)[j].seg_blocks = (uint32_t)(nb - first);
  }
  *n = nb;
  return GM_OK;
}

/* Two blocks of consecutive steps are the same when their address, size,
 * segment size, id and state are (see diff in the pipeline's explorer.go). */
static inline int same(const gm_flat_block_t *x, const gm_flat_block_t *y) {
  return x->address == y->address && x->size == y->size && x->seg_size == y->seg_size && x->id == y->id &&
         x->state == y->state;
}

/* diff sets f's pos, del and nins from the lists' common head and tail. */
static void diff(gm_flat_t *f, const gm_flat_block_t *prev, size_t np, const gm_flat_block_t *cur, size_t nc) {
  size_t p = 0;
  while (p < np && p < nc && same(&prev[p], &cur[p])) p++;
  size_t q = 0;
  while (q < np - p && q < nc - p && same(&prev[np - 1 - q], &cur[nc - 1 - q])) q++;
  f->pos = p;
  f->del = np - p - q;
  f->nins = nc - p - q;
}

/* step_all walks every segment: the first step, and after segments were
 * made or removed (their address order is sorted again). */
static int step_all(gm_alloc_t *a, gm_flat_t *f) {
  size_t ns = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg) ns++;
  if (gm_grow((void **)&f->sorted, &f->sorted_cap, ns, sizeof *f->sorted) != GM_OK ||
      gm_grow((void **)&f->at, &f->at_cap, ns + 1, sizeof *f->at) != GM_OK)
    return GM_EBACKEND;
  size_t i = 0;
  for (gm_seg_t *s = a->segs; s; s = s->next_seg) f->sorted[i++] = s;
  if (ns) qsort(f->sorted, ns, sizeof *f->sorted, cmp_seg_base);
  /* this call's list goes where the one before the last was */
  gm_flat_block_t *t = f->prev;
  size_t tc = f->prev_cap;
  f->prev = f->cur, f->prev_cap = f->cur_cap, f->nprev = f->ncur;
  f->cur = t, f->cur_cap = tc, f->ncur = 0;
  for (size_t k = 0; k < ns; k++) {
    gm_seg_t *s = f->sorted[k];
    f->at[k] = f->ncur;
    s->flat_k = (uint32_t)k;
    s->touch = GM_WATCHED;
    if (put_seg(s, &f->cur, &f->cur_cap, &f->ncur) != GM_OK) return GM_EBACKEND;
  }
  f->at[ns] = f->ncur;
  f->nseg = ns;
  a->ntouched = 0;
  a->touch_lost = 0;
  f->alloc = a;
  f->seg_gen = a->seg_gen;
  diff(f, f->prev, f->nprev, f->cur, f->ncur);
  return GM_OK;
}

/* step_touched walks again the segments touched since the last step, from
 * the first to the last of them in address order, and splices them into
 * the list; the comparison runs from the known common head and tail. */
static int step_touched(gm_alloc_t *a, gm_flat_t *f) {
  size_t n = f->ncur;
  if (a->ntouched == 0) { /* the list is as it was */
    f->pos = n;
    f->del = f->nins = 0;
    return GM_OK;
  }
  uint32_t k0 = UINT32_MAX, k1 = 0;
  for (size_t i = 0; i < a->ntouched; i++) {
    gm_seg_t *s = a->touched[i];
    if (s->flat_k < k0) k0 = s->flat_k;
    if (s->flat_k > k1) k1 = s->flat_k;
    s->touch = GM_WATCHED;
  }
  a->ntouched = 0;
  size_t lo = f->at[k0], hi = f->at[k1 + 1], mp = hi - lo;
  /* the old stretch into prev, the new one into win */
  if (gm_grow((void **)&f->prev, &f->prev_cap, mp, sizeof *f->prev) != GM_OK) return GM_EBACKEND;
  memcpy(f->prev, f->cur + lo, mp * sizeof *f->cur);
  size_t mc = 0;
  for (uint32_t k = k0; k <= k1; k++) {
    f->at[k] = lo + mc;
    if (put_seg(f->sorted[k], &f->win, &f->win_cap, &mc) != GM_OK) return GM_EBACKEND;
  }
  size_t nc = n - mp + mc;
  for (size_t k = k1 + 1; k <= f->nseg; k++) f->at[k] = f->at[k] - mp + mc;
  if (gm_grow((void **)&f->cur, &f->cur_cap, nc, sizeof *f->cur) != GM_OK) return GM_EBACKEND;
  memmove(f->cur + lo + mc, f->cur + hi, (n - hi) * sizeof *f->cur);
  memcpy(f->cur + lo, f->win, mc * sizeof *f->cur);
  f->ncur = nc;
  f->nprev = n;
  /* diff's comparison, of the list before (cur outside the stretch, prev
   * in it) with the list now, from the common head and tail known */
  const gm_flat_block_t *cur = f->cur, *old = f->prev;
#define OLD(i) ((i) < lo ? &cur[i] : (i) < hi ? &old[(i) - lo] : &cur[(i) - hi + lo + mc])
  size_t p = lo;
  if (mp == mc) {
    while (p < hi && same(&old[p - lo], &cur[p])) p++;
    if (p == hi) p = n; /* nothing changed: the whole list is common */
  }
  while (p < n && p < nc && same(OLD(p), &cur[p])) p++;
  size_t q = n - hi;
  if (q > n - p) q = n - p;
  if (q > nc - p) q = nc - p;
  while (q < n - p && q < nc - p && same(OLD(n - 1 - q), &cur[nc - 1 - q])) q++;
#undef OLD
  f->pos = p;
  f->del = n - p - q;
  f->nins = nc - p - q;
  return GM_OK;
}

/* check_step compares the step that made f's list from old (n blocks) with
 * a walk of every segment: the list, and the change. */
static int check_step(const gm_alloc_t *a, const gm_flat_t *f, const gm_flat_block_t *old, size_t n) {
  size_t ns = 0, nb = 0, cap = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg) ns++;
  const gm_seg_t **segs = malloc((ns ? ns : 1) * sizeof *segs);
  gm_flat_block_t *list = NULL;
  int rc = segs ? GM_OK : GM_EBACKEND;
  if (rc == GM_OK) {
    size_t i = 0;
    for (const gm_seg_t *s = a->segs; s; s = s->next_seg) segs[i++] = s;
    if (ns) qsort(segs, ns, sizeof *segs, cmp_seg_base);
    for (i = 0; i < ns && rc == GM_OK; i++) rc = put_seg(segs[i], &list, &cap, &nb);
  }
  if (rc == GM_OK) {
    gm_flat_t d = {0};
    diff(&d, old, n, list, nb);
    if (nb != f->ncur || d.pos != f->pos || d.del != f->del || d.nins != f->nins ||
        (nb && memcmp(list, f->cur, nb * sizeof *list) != 0))
      rc = GM_ECORRUPT;
  }
  free(segs);
  free(list);
  return rc;
}

int gm_flat_step(gm_alloc_t *a, gm_flat_t *f) {
  int all = f->alloc != a || f->seg_gen != a->seg_gen || a->touch_lost;
  gm_flat_block_t *old = NULL;
  size_t n = f->ncur;
  if (a->cfg.check && n) { /* the list before, for check_step */
    if (!(old = malloc(n * sizeof *old))) return GM_EBACKEND;
    memcpy(old, f->cur, n * sizeof *old);
  }
  int rc = all ? step_all(a, f) : step_touched(a, f);
  if (rc == GM_OK && a->cfg.check) rc = check_step(a, f, old, old ? n : 0);
  free(old);
  return rc;
}

void gm_flat_free(gm_flat_t *f) {
  free(f->sorted);
  free(f->at);
  free(f->prev);
  free(f->cur);
  free(f->win);
  memset(f, 0, sizeof *f);
}

static int put_blocks(gm_steps_t *s, const gm_flat_block_t *b, size_t n) {
  if (n == 0) return GM_OK;
  if (gm_grow((void **)&s->blocks, &s->blocks_cap, s->nblocks + n, sizeof *s->blocks) != GM_OK) return GM_EBACKEND;
  memcpy(s->blocks + s->nblocks, b, n * sizeof *b);
  s->nblocks += n;
  return GM_OK;
}

int gm_run_steps(gm_alloc_t *a, const gm_op_t *ops, size_t n, uint64_t base, uint64_t key_gap,
                 gm_flat_t *f, gm_steps_t *s, size_t *done) {
  s->nops = 0;
  s->nblocks = 0;
  for (size_t j = 0; j < n; j++) {
    gm_devlog_at(a, base + j); /* device log events carry op indexes */
    size_t d = 0;
    gm_oom_t oom;
    int rc = gm_run(a, &ops[j], 1, &d, &oom, NULL, NULL);
    if (rc != GM_OK && rc != GM_ENOMEM) {
      *done = j + d;
      return rc;
    }
    int frc = gm_flat_step(a, f);
    if (frc == GM_OK && gm_grow((void **)&s->ops, &s->ops_cap, s->nops + 1, sizeof *s->ops) != GM_OK)
      frc = GM_EBACKEND;
    if (frc != GM_OK) {
      *done = frc == GM_ECORRUPT ? j + 1 : j; /* the op was applied */
      return frc;
    }
    gm_step_t *h = &s->ops[s->nops++];
    h->pos = f->pos;
    h->del = f->del;
    h->nins = f->nins;
    h->nlist = f->ncur;
    h->key = 0;
    if (put_blocks(s, f->cur + f->pos, f->nins) != GM_OK) {
      *done = j;
      return GM_EBACKEND;
    }
    /* the whole list once the changes since the last one hold as many
     * blocks as it, and key_gap ops have passed */
    uint64_t i = base + j;
    f->since_key += f->nins + 1;
    if (key_gap && f->since_key >= f->ncur && i + 1 - f->last_key >= key_gap) {
      h->key = 1;
      if (put_blocks(s, f->cur, f->ncur) != GM_OK) {
        *done = j;
        return GM_EBACKEND;
      }
      f->since_key = 0;
      f->last_key = i + 1;
    }
    if (rc == GM_ENOMEM) {
      s->oom = oom;
      *done = j + 1;
      return GM_ENOMEM;
    }
  }
  *done = n;
  return GM_OK;
}

void gm_steps_free(gm_steps_t *s) {
  free(s->ops);
  free(s->blocks);
  memset(s, 0, sizeof *s);
}
