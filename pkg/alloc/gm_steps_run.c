/* gm_run_steps: ops run one at a time, the block list followed after
 * each (gm_flat_step, gm_steps.c), the changes kept for Go to read; and
 * gm_touch_slow and gm_untouch_seg, through which the allocator marks
 * the segments and blocks each op touched for gm_flat_step. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gm_devlog.h"
#include "gm_internal.h"
#include "gm_steps.h"

/* touch_slowest is gm_touch_slow where an array is full: apart (never
 * inlined, reached by a jump), so that the common path, with room,
 * saves no registers for a call, most of its cost for the two or three
 * blocks each op touches. */
static __attribute__((noinline)) void touch_slowest(gm_block_t *b) {
  gm_seg_t *s = b->seg;
  gm_alloc_t *a = s->owner;
  if (s->touch == GM_WATCHED) {
    if (gm_grow((void **)&a->touched, &a->touched_cap, a->ntouched + 1, sizeof *a->touched) != GM_OK) {
      a->touch_lost = 1; /* the next step walks every segment */
      return;
    }
    a->touched[a->ntouched++] = s;
    s->touch = GM_TOUCHED;
  }
  /* an expandable segment is walked whole: its mapped runs may change */
  if (s->expandable || (a->ntblocks && a->tblocks[a->ntblocks - 1] == b)) return;
  if (gm_grow((void **)&a->tblocks, &a->tblocks_cap, a->ntblocks + 1, sizeof *a->tblocks) != GM_OK) {
    a->touch_lost = 1;
    return;
  }
  a->tblocks[a->ntblocks++] = b;
}

void gm_touch_slow(gm_block_t *b) {
  gm_seg_t *s = b->seg;
  gm_alloc_t *a = s->owner;
  size_t n = a->ntblocks;
  if (n >= a->tblocks_cap || (s->touch == GM_WATCHED && a->ntouched >= a->touched_cap)) {
    touch_slowest(b);
    return;
  }
  if (s->touch == GM_WATCHED) {
    a->touched[a->ntouched++] = s;
    s->touch = GM_TOUCHED;
  }
  /* a block handed again right after another (a merge touches the
   * block kept, the one it takes, then the block kept again) is kept
   * once: each block kept costs step_touched more than this check */
  if (s->expandable || (n && a->tblocks[n - 1] == b) || (n > 1 && a->tblocks[n - 2] == b)) return;
  a->tblocks[n] = b;
  a->ntblocks = n + 1;
}

/* gone_max is the most removed segments a step takes out of the list
 * one by one; past it (a replay no longer stepped) it walks every one. */
enum { gone_max = 4096 };

void gm_untouch_seg(gm_alloc_t *a, gm_seg_t *s) {
  if (s->touch == GM_TOUCHED) /* off the list of touched segments */
    for (size_t i = 0; i < a->ntouched; i++)
      if (a->touched[i] == s) {
        a->touched[i] = a->touched[--a->ntouched];
        break;
      }
  if (a->touch_lost) return;
  if (a->ngone >= gone_max || gm_grow((void **)&a->gone, &a->gone_cap, a->ngone + 1, sizeof *a->gone) != GM_OK) {
    a->touch_lost = 1;
    return;
  }
  a->gone[a->ngone++] = s->flat_k;
}

static int put_blocks(gm_steps_t *s, const gm_flat_block_t *b, size_t n) {
  if (n == 0) return GM_OK;
  if (gm_grow((void **)&s->blocks, &s->blocks_cap, s->nblocks + n, sizeof *s->blocks) != GM_OK) return GM_EBACKEND;
  move_blocks(s->blocks + s->nblocks, b, n);
  s->nblocks += n;
  return GM_OK;
}

int gm_run_steps(gm_alloc_t *a, const gm_op_t *ops, size_t n, uint64_t base, uint64_t key_gap,
                 gm_timeline_t *tl, gm_flat_t *f, gm_steps_t *s, size_t *done) {
  s->nops = 0;
  s->nblocks = 0;
  s->peak_in = 0;
  /* device log events carry op indexes: base + j while op j runs, as
   * every op applied counts one in ex.ops */
  gm_devlog_at(a, base);
  const uint64_t tl_base = tl ? tl->base : 0;
  for (size_t j = 0; j < n; j++) {
    size_t d = 0;
    gm_oom_t oom;
    const uint64_t peak_op = a->ex.peak_op;
    if (tl) tl->base = tl_base + j; /* gm_run samples op j as its first */
    int rc = gm_run(a, &ops[j], 1, &d, &oom, tl, NULL, NULL);
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
    /* pos and del one at a time (volatile): the compiler would read the
     * pair in one 16-byte load, which cannot take its bytes from the two
     * 8-byte stores gm_flat_step just made and waits for them to retire
     * (a store-forwarding stall, a third of this loop's time) */
    h->pos = *(const volatile size_t *)&f->pos;
    h->del = *(const volatile size_t *)&f->del;
    h->nins = f->nins;
    h->nlist = f->ncur;
    h->key = 0;
    h->peak = a->ex.peak_op != peak_op;
    if (h->peak && s->keep_peak) {
      if (gm_flat_list(f) != GM_OK ||
          (f->ncur && gm_grow((void **)&s->peak, &s->peak_cap, f->ncur, sizeof *s->peak) != GM_OK)) {
        *done = j;
        return GM_EBACKEND;
      }
      if (f->ncur) move_blocks(s->peak, f->cur, f->ncur);
      s->npeak = f->ncur;
      s->peak_at = j;
      s->peak_in = 1;
    }
    if (put_blocks(s, f->ins, f->nins) != GM_OK) {
      *done = j;
      return GM_EBACKEND;
    }
    /* the whole list once the changes since the last one hold as many
     * blocks as it, and key_gap ops have passed */
    uint64_t i = base + j;
    f->since_key += f->nins + 1;
    if (key_gap && f->since_key >= f->ncur && i + 1 - f->last_key >= key_gap) {
      h->key = 1;
      if (gm_flat_list(f) != GM_OK || put_blocks(s, f->cur, f->ncur) != GM_OK) {
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
  free(s->peak);
  memset(s, 0, sizeof *s);
}
