/* gm_flat_step: the block list followed op by op (the HTML explorer's
 * stepped replay; gm_steps_run.c runs the ops and marks what they
 * touch). The list is kept from step to step,
 * segment by segment, and only the segments an op touched (gm_touch) are
 * walked again and compared, in a segment that is not expandable only
 * its span from the first block the op touched to the last: a step costs
 * the blocks it changed, not the whole list, which is made only for the
 * keys (gm_flat_list) and where segments were made or removed: the
 * segments keep their places in the list, only those made are walked
 * and put in theirs, and those removed taken out (a->gone). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gm_internal.h"
#include "gm_steps.h"

/* alloc.FlatBlock's layout (snapshot.go), read in place by Go */
_Static_assert(sizeof(gm_flat_block_t) == 40 && offsetof(gm_flat_block_t, seg_size) == 16 &&
                   offsetof(gm_flat_block_t, seg_blocks) == 24 && offsetof(gm_flat_block_t, id) == 28 &&
                   offsetof(gm_flat_block_t, state) == 32,
               "gm_flat_block_t is not alloc.FlatBlock");

/* flat_state is block b's state and id as the list shows them. */
static inline void flat_state(const gm_block_t *b, uint8_t *state, uint32_t *id) {
  *state = GM_BLOCK_INACTIVE, *id = GM_NO_ID;
  if (b->allocated || b->pending) {
    *state = b->allocated ? GM_BLOCK_ALLOCATED : GM_BLOCK_PENDING;
    *id = b->id;
  }
}

/* flat_of is block b as the list shows it, in a segment of nb blocks,
 * not its first (seg_size 0). */
static inline gm_flat_block_t flat_of(const gm_block_t *b, size_t nb) {
  gm_flat_block_t o = {.address = b->ptr, .size = b->size, .seg_blocks = (uint32_t)nb};
  flat_state(b, &o.state, &o.id);
  return o;
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
      (*buf)[nb++] = flat_of(b, 0); /* seg_blocks set below */
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

/* One segment (seg) and its blocks in the list, and while a step compares, the
 * first and last blocks the step touched that are still there (lo, hi:
 * NULL when none) and, when changed, its nold blocks before the step:
 * those of b but for [oi0, oi0 + nspan), which are old's (old_at). Unless
 * counted, only the blocks of the last span put_span made hold their
 * segment's block count (seg_blocks); count_seg sets the others'. */
struct gm_flat_seg {
  gm_seg_t *seg;
  gm_flat_block_t *b, *old;
  size_t n, cap, nold, old_cap, oi0, nspan;
  const gm_block_t *lo, *hi;
  int changed, counted;
};

/* old_at is block j of v before the step. */
static inline const gm_flat_block_t *old_at(const gm_flat_seg_t *v, size_t j) {
  if (j - v->oi0 < v->nspan) return &v->old[j - v->oi0]; /* j < oi0 wraps past nspan */
  return &v->b[j < v->oi0 ? j : j + v->n - v->nold];
}

/* count_seg sets the block count of v's blocks, one run (put_span's). */
static void count_seg(gm_flat_seg_t *v) {
  if (v->counted) return;
  for (size_t j = 0; j < v->n; j++) v->b[j].seg_blocks = (uint32_t)v->n;
  v->counted = 1;
}

/* The Fenwick tree fen[1..nseg] of the segments' block counts, but for
 * the changes of the last two segments whose counts changed (fen_k),
 * held apart with fen's count of the blocks before each (fen_pre) until
 * a third's changes: most ops change a segment one of the last two ops
 * changed (a block split in one, merged in another), and then cost no
 * walk of the tree, neither to add nor to count the blocks before it. */
static void fen_tree_add(gm_flat_t *f, size_t k, uint64_t d) {
  for (size_t i = k + 1; i <= f->nseg; i += i & -i) f->fen[i] += d;
}

static size_t fen_tree_before(const gm_flat_t *f, size_t k) {
  uint64_t s = 0;
  for (size_t i = k; i > 0; i -= i & -i) s += f->fen[i];
  return (size_t)s;
}

static inline __attribute__((always_inline)) void fen_add(gm_flat_t *f, size_t k, uint64_t d) {
  if (f->fen_k[0] == k + 1) {
    f->fen_d[0] += d;
    return;
  }
  if (f->fen_k[1] == k + 1) { /* the latest now: first */
    f->fen_k[1] = f->fen_k[0], f->fen_k[0] = k + 1;
    uint64_t t = f->fen_d[1] + d;
    f->fen_d[1] = f->fen_d[0], f->fen_d[0] = t;
    size_t p = f->fen_pre[1];
    f->fen_pre[1] = f->fen_pre[0], f->fen_pre[0] = p;
    return;
  }
  if (f->fen_k[1]) { /* the older into the tree */
    fen_tree_add(f, f->fen_k[1] - 1, f->fen_d[1]);
    if (f->fen_k[0] > f->fen_k[1]) f->fen_pre[0] += (size_t)f->fen_d[1];
  }
  f->fen_k[1] = f->fen_k[0], f->fen_d[1] = f->fen_d[0], f->fen_pre[1] = f->fen_pre[0];
  f->fen_k[0] = k + 1, f->fen_d[0] = d, f->fen_pre[0] = fen_tree_before(f, k);
}

static size_t fen_before(const gm_flat_t *f, size_t k) { /* blocks of segments [0, k) */
  size_t s = f->fen_k[0] == k + 1 ? f->fen_pre[0] : f->fen_k[1] == k + 1 ? f->fen_pre[1] : fen_tree_before(f, k);
  for (int j = 0; j < 2; j++)
    if (f->fen_k[j] && f->fen_k[j] - 1 < k) s += (size_t)f->fen_d[j];
  return s;
}

int gm_flat_list(gm_flat_t *f) {
  if (f->cur_ok) return GM_OK;
  if (gm_grow((void **)&f->cur, &f->cur_cap, f->ncur, sizeof *f->cur) != GM_OK) return GM_EBACKEND;
  size_t n = 0;
  for (size_t k = 0; k < f->nseg; k++) {
    gm_flat_seg_t *v = f->segv[k];
    count_seg(v);
    if (v->n) memcpy(f->cur + n, v->b, v->n * sizeof *v->b);
    n += v->n;
  }
  f->cur_ok = 1;
  return GM_OK;
}

/* order_all puts every segment of a, ns of them, into f's list in
 * address order. */
static int order_all(gm_alloc_t *a, gm_flat_t *f, size_t ns) {
  gm_seg_t **sorted = malloc((ns ? ns : 1) * sizeof *sorted);
  if (!sorted) return GM_EBACKEND;
  size_t i = 0;
  for (gm_seg_t *s = a->segs; s; s = s->next_seg) sorted[i++] = s;
  if (ns) qsort(sorted, ns, sizeof *sorted, cmp_seg_base);
  for (size_t k = 0; k < ns; k++) {
    f->segv[k]->seg = sorted[k];
    sorted[k]->touch = GM_TOUCHED; /* walked again */
  }
  free(sorted);
  return GM_OK;
}

/* order_changed puts the segments of a, ns of them, into f's list in
 * address order from the last step's: the segments removed since
 * (a->gone) are taken out, those made since (not watched yet) put in
 * their places, the others keep their blocks, and the entries before
 * the first change (*moved, a segment made, removed or touched) stay
 * where they are, as do the last *tail, after every change; the last
 * list's blocks between the two go into prev. It sets *ok, or leaves it
 * 0 having done nothing where a->gone does not name segments of the
 * list. */
static int order_changed(gm_alloc_t *a, gm_flat_t *f, size_t ns, int *ok, size_t *moved, size_t *tail) {
  size_t nold = f->nseg, nborn = 0;
  *ok = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg) nborn += !s->touch;
  if (nold + nborn < ns + a->ngone || nold + nborn - a->ngone != ns) return GM_OK;
  /* the first entry that moves: the first removed, or where the first
   * made goes among those before it */
  size_t first = nold;
  for (size_t g = 0; g < a->ngone; g++) {
    if (a->gone[g] >= nold) return GM_OK;
    if (a->gone[g] < first) first = a->gone[g];
  }
  gm_seg_t **born = malloc((nborn ? nborn : 1) * sizeof *born);
  if (!born) return GM_EBACKEND;
  size_t j = 0;
  for (gm_seg_t *s = a->segs; s; s = s->next_seg)
    if (!s->touch) born[j++] = s;
  if (nborn > 1) qsort(born, nborn, sizeof *born, cmp_seg_base);
  if (nborn) {
    size_t lo = 0, hi = first;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (f->segv[mid]->seg->base < born[0]->base) lo = mid + 1;
      else hi = mid;
    }
    first = lo;
  }
  /* the entries from first on: M in all, the list's or the last one's */
  size_t m = (ns > nold ? ns : nold) - first;
  gm_flat_seg_t **was = malloc((m ? m : 1) * sizeof *was), **spare = malloc((m ? m : 1) * sizeof *spare);
  if (!was || !spare) {
    free(was);
    free(spare);
    free(born);
    return GM_EBACKEND;
  }
  if (m) memcpy(was, f->segv + first, m * sizeof *was);
  size_t kept = nold - first; /* was[0, kept) were the last list's: NULL those removed */
  size_t nsp = 0;            /* their entries and those past the last list are spare */
  for (size_t g = 0; g < a->ngone; g++) {
    size_t k = a->gone[g] - first;
    if (!was[k]) { /* a segment removed twice: nothing moved yet */
      free(was);
      free(spare);
      free(born);
      return GM_OK;
    }
    spare[nsp++] = was[k];
    was[k] = NULL;
  }
  for (size_t k = kept; k < m; k++) spare[nsp++] = was[k];
  /* the last list's entries after every one removed and made keep their
   * order at the end of the list */
  size_t t = 0;
  while (t < kept && was[kept - 1 - t] && (!nborn || was[kept - 1 - t]->seg->base > born[nborn - 1]->base)) t++;
  /* the segments touched since change where they are: the last list's
   * blocks from the first change to the last, into prev, for diff */
  size_t lo = first;
  for (size_t i = 0; i < a->ntouched; i++) {
    size_t k = a->touched[i]->flat_k;
    if (k < lo) lo = k;
    if (k + t >= nold) t = nold - k - 1;
  }
  size_t np = 0;
  for (size_t k = lo; k < nold - t; k++) np += f->segv[k]->n;
  if (gm_grow((void **)&f->prev, &f->prev_cap, np, sizeof *f->prev) != GM_OK) {
    free(was);
    free(spare);
    free(born);
    return GM_EBACKEND;
  }
  f->nprev = 0;
  for (size_t k = lo; k < nold - t; k++) {
    const gm_flat_seg_t *v = f->segv[k];
    if (v->n) memcpy(f->prev + f->nprev, v->b, v->n * sizeof *v->b);
    f->nprev += v->n;
  }
  *moved = lo;
  *tail = t;
  /* merge the kept and the made, a made one into a spare entry */
  size_t i = 0, sp = 0;
  j = 0;
  for (size_t k = first; k < ns; k++) {
    while (i < kept && !was[i]) i++;
    if (j < nborn && (i >= kept || born[j]->base < was[i]->seg->base)) {
      f->segv[k] = spare[sp++];
      f->segv[k]->seg = born[j++];
    } else {
      f->segv[k] = was[i++];
    }
  }
  for (size_t k = ns; k < first + m; k++) f->segv[k] = spare[sp++]; /* those left, with their buffers */
  free(was);
  free(spare);
  free(born);
  *ok = 1;
  return GM_OK;
}

/* step_all walks the segments after segments were made or removed (and
 * on the first step): in a step that follows the last, only those made
 * and those touched; where a step was missed, every one, sorted again. */
static int step_all(gm_alloc_t *a, gm_flat_t *f) {
  int again = f->alloc == a && !a->touch_lost;
  size_t ns = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg) ns++;
  size_t old = f->segv_cap;
  if (gm_grow((void **)&f->segv, &f->segv_cap, ns, sizeof *f->segv) != GM_OK ||
      gm_grow((void **)&f->fen, &f->fen_cap, ns + 1, sizeof *f->fen) != GM_OK)
    return GM_EBACKEND;
  if (f->segv_cap > old) memset(f->segv + old, 0, (f->segv_cap - old) * sizeof *f->segv);
  for (size_t k = old; k < f->segv_cap; k++)
    if (!(f->segv[k] = calloc(1, sizeof **f->segv))) {
      f->segv_cap = k; /* the entries made */
      return GM_EBACKEND;
    }
  /* the entries before moved and the last tail are the last list's */
  size_t moved = 0, tail = 0;
  int ordered = 0, rc = again ? order_changed(a, f, ns, &ordered, &moved, &tail) : GM_OK;
  if (rc != GM_OK) return rc;
  if (!ordered) {
    /* the last list, whole, into prev */
    if (gm_flat_list(f) != GM_OK) return GM_EBACKEND;
    gm_flat_block_t *t = f->prev;
    size_t tc = f->prev_cap;
    f->prev = f->cur, f->prev_cap = f->cur_cap, f->nprev = f->ncur;
    f->cur = t, f->cur_cap = tc;
    if ((rc = order_all(a, f, ns)) != GM_OK) return rc;
  }
  f->cur_ok = 0;
  f->nseg = ns;
  f->ncur = 0;
  memset(f->fen, 0, (ns + 1) * sizeof *f->fen);
  memset(f->fen_k, 0, sizeof f->fen_k); /* the tree is made again, whole */
  memset(f->fen_d, 0, sizeof f->fen_d);
  for (size_t k = 0; k < ns && rc == GM_OK; k++) {
    gm_flat_seg_t *v = f->segv[k];
    gm_seg_t *s = v->seg;
    if (s->touch != GM_WATCHED) { /* made or touched since: walked */
      v->n = 0;
      v->counted = 1;
      rc = put_seg(s, &v->b, &v->cap, &v->n);
    }
    s->flat_k = (uint32_t)k;
    s->touch = GM_WATCHED;
    v->changed = 0;
    v->lo = v->hi = NULL;
    f->ncur += v->n;
    f->fen[k + 1] = v->n;
  }
  for (size_t i = 1; i <= ns; i++) /* the Fenwick tree of those counts */
    if (i + (i & -i) <= ns) f->fen[i + (i & -i)] += f->fen[i];
  a->ntouched = 0;
  a->ntblocks = 0;
  a->ngone = 0;
  if (rc != GM_OK) {
    f->alloc = NULL; /* the next step walks every segment */
    return rc;
  }
  a->touch_lost = 0;
  f->alloc = a;
  f->seg_gen = a->seg_gen;
  if (!ordered) {
    if (gm_flat_list(f) != GM_OK) return GM_EBACKEND;
    diff(f, f->prev, f->nprev, f->cur, f->ncur);
    f->ins = f->cur + f->pos; /* the inserted blocks, in the whole list */
    return GM_OK;
  }
  /* the blocks between the unchanged head and tail, compared with the
   * last list's (prev): distinct blocks of one list never compare the
   * same, so the lists' common head and tail end within these */
  size_t nm = f->ncur - fen_before(f, moved) - (f->ncur - fen_before(f, ns - tail)), n = 0;
  if (gm_grow((void **)&f->ins_buf, &f->ins_cap, nm, sizeof *f->ins_buf) != GM_OK) return GM_EBACKEND;
  for (size_t k = moved; k < ns - tail; k++) {
    gm_flat_seg_t *v = f->segv[k];
    count_seg(v);
    if (v->n) memcpy(f->ins_buf + n, v->b, v->n * sizeof *v->b);
    n += v->n;
  }
  diff(f, f->prev, f->nprev, f->ins_buf, nm);
  if (f->del == 0 && f->nins == 0) { /* the same list */
    f->pos = f->ncur;
    return GM_OK;
  }
  f->ins = f->ins_buf + f->pos;
  f->pos += fen_before(f, moved);
  return GM_OK;
}

/* A walk over the list before the step (old) or after it, one block at
 * a time: segment k, block j. */
typedef struct {
  const gm_flat_t *f;
  int old;
  size_t k, j;
} walk_t;

static inline size_t walk_n(const walk_t *w, size_t k) {
  const gm_flat_seg_t *v = w->f->segv[k];
  return w->old && v->changed ? v->nold : v->n;
}

static inline const gm_flat_block_t *walk_at(const walk_t *w) {
  const gm_flat_seg_t *v = w->f->segv[w->k];
  return w->old && v->changed ? old_at(v, w->j) : v->b + w->j;
}

/* walk_fwd moves w to the next block that is, from (k, j) on; 0 at the end. */
static inline int walk_fwd(walk_t *w) {
  while (w->k < w->f->nseg && w->j >= walk_n(w, w->k)) w->k++, w->j = 0;
  return w->k < w->f->nseg;
}

/* walk_back moves w back one block from (k, j) (j counts from 1: j = 0
 * is before the segment's first); 0 at the start. */
static inline int walk_back(walk_t *w) {
  while (w->j == 0) {
    if (w->k == 0) return 0;
    w->k--;
    w->j = walk_n(w, w->k);
  }
  w->j--;
  return 1;
}

/* find_at is the index of the block of b[0, n) (in address order) that
 * starts at address p; n when none does. Without branches on the
 * addresses (a conditional move a halving): a step's span falls
 * anywhere in its segment, and gm_first_at_least's branch, taken or not
 * at random, was mispredicted about every other halving (a tenth of
 * gm_flat_step's cycles at 1M). */
static size_t find_at(const gm_flat_block_t *b, size_t n, uint64_t p) {
  if (n == 0) return 0;
  const gm_flat_block_t *x = b; /* the first block at least p is among x[0, len] */
  for (size_t len = n; len > 1; len -= len / 2) x = x[len / 2].address < p ? x + len / 2 : x;
  size_t i = (size_t)(x - b) + (x->address < p);
  return i < n && b[i].address == p ? i : n;
}

/* find_after is find_at for an address p past block i0's: the span a
 * step touched most often ends a few blocks on, which a walk finds
 * before the search would. */
static size_t find_after(const gm_flat_block_t *b, size_t n, size_t i0, uint64_t p) {
  if (p <= b[i0].address) return find_at(b, n, p);
  size_t j = i0 + 1;
  for (; j < n && j <= i0 + 8; j++)
    if (b[j].address >= p) return b[j].address == p ? j : n;
  if (j >= n) return n;
  size_t k = find_at(b + j, n - j, p);
  return k == n - j ? n : j + k;
}

enum { SPAN_WHOLE = -1 }; /* put_span: walk the segment whole */

/* put_span makes v->b, the blocks of s (a segment that is not
 * expandable: every block mapped, one run), the blocks after the step,
 * in place, from its span from v->lo to v->hi: the blocks the step did
 * not touch are as they were, so those before the span and after it
 * stay, and only the old span's go to v->old. Sets *head and *tail to
 * their counts (blocks that compare the same before and after).
 * SPAN_WHOLE, with nothing changed, when the blocks before do not end
 * and start where the span does. */
/* find_span finds v's blocks before the step that the span from v->lo
 * to v->hi (m blocks now) replaces: [*i0, *i1); SPAN_WHOLE when the
 * blocks before do not end and start where the span does. */
static inline __attribute__((always_inline)) int find_span(const gm_seg_t *s, const gm_flat_seg_t *v, size_t *pi0, size_t *pi1, size_t *pm) {
  size_t no = v->n;
  const gm_block_t *lo = v->lo, *hi = v->hi;
  uint64_t end = hi->ptr + hi->size;
  /* the last step's span in this segment most often started where this
   * one does, or a block either side (a block split, then merged back):
   * tried before the search */
  size_t h = v->oi0, i0;
  if (h < no && v->b[h].address == lo->ptr) i0 = h;
  else if (h - 1 < no && v->b[h - 1].address == lo->ptr) i0 = h - 1; /* h = 0 wraps past no */
  else if (h + 1 < no && v->b[h + 1].address == lo->ptr) i0 = h + 1;
  else i0 = find_at(v->b, no, lo->ptr);
  if (i0 == no) return SPAN_WHOLE;
  size_t i1 = end == s->base + s->size ? no : find_after(v->b, no, i0, end);
  if (i0 == no || (i1 == no && end != s->base + s->size) || i1 <= i0) return SPAN_WHOLE;
  size_t m = 1;
  for (const gm_block_t *b = lo; b != hi; b = b->next, m++)
    if (!b || !b->mapped) return SPAN_WHOLE;
  if (!hi->mapped) return SPAN_WHOLE;
  *pi0 = i0, *pi1 = i1, *pm = m;
  return GM_OK;
}

static int put_span(const gm_seg_t *s, gm_flat_seg_t *v, size_t *head, size_t *tail) {
  size_t no = v->n, i0, i1, m;
  const gm_block_t *lo = v->lo, *hi = v->hi;
  int rc = find_span(s, v, &i0, &i1, &m);
  if (rc != GM_OK) return rc;
  size_t n = i0 + m + (no - i1);
  if (gm_grow((void **)&v->old, &v->old_cap, i1 - i0, sizeof *v->old) != GM_OK ||
      gm_grow((void **)&v->b, &v->cap, n, sizeof *v->b) != GM_OK)
    return GM_EBACKEND;
  for (size_t j = i0; j < i1; j++) v->old[j - i0] = v->b[j];
  v->nold = no, v->oi0 = i0, v->nspan = i1 - i0;
  if (m != i1 - i0) move_blocks(v->b + i0 + m, v->b + i1, no - i1);
  /* the span's blocks with their count of their segment's blocks; the
   * others' are the old count, which count_seg corrects when they are
   * asked for */
  gm_flat_block_t *w = v->b + i0;
  for (const gm_block_t *b = lo;; b = b->next, w++) {
    *w = flat_of(b, n);
    if (b == hi) break;
  }
  if (i0 == 0) v->b[0].seg_size = v->old[0].seg_size; /* the segment's size: its blocks tile it (I1) */
  v->counted = v->counted && n == no;
  v->n = n;
  *head = i0;
  *tail = no - i1;
  return GM_OK;
}

/* same_block is same for list block o and block b as flat_of shows
 * it, with seg_size, read in place: no block built to compare. */
static inline int same_block(const gm_flat_block_t *o, const gm_block_t *b, uint64_t seg_size) {
  uint32_t id;
  uint8_t st;
  flat_state(b, &st, &id);
  return o->address == b->ptr && o->size == b->size && o->seg_size == seg_size && o->id == id && o->state == st;
}

/* step_alone is step_touched's step where one segment, not
 * expandable, is all the op touched (most ops): the span's blocks now
 * are compared with those it replaces before any is written, so that
 * only the blocks between their common head and tail are, with no copy
 * of the old span (put_span's v->old) to compare them with after.
 * SPAN_WHOLE, with nothing changed, where put_span would walk the
 * segment whole. */
static int step_alone(gm_flat_t *f, size_t k, const gm_seg_t *s, gm_flat_seg_t *v) {
  size_t no = v->n, i0, i1, m;
  int rc = find_span(s, v, &i0, &i1, &m);
  if (rc != GM_OK) return rc;
  size_t span = i1 - i0, n = i0 + m + (no - i1), lim = m < span ? m : span;
  uint64_t seg0 = v->b[0].seg_size; /* the segment's size: its blocks tile it (I1) */
  /* the common head and tail of the span now and before: distinct
   * blocks of a segment never compare the same, so those of the list
   * end in the span, as diff would find them */
  size_t h = 0, t = 0;
  const gm_block_t *b = v->lo, *e = v->hi;
  for (; h < lim; h++, b = b->next)
    if (!same_block(&v->b[i0 + h], b, i0 + h == 0 ? seg0 : 0)) break;
  for (; t < lim - h; t++, e = e->prev)
    if (!same_block(&v->b[i1 - 1 - t], e, i0 + m - 1 - t == 0 ? seg0 : 0)) break;
  v->oi0 = i0; /* where the next step's span most often starts */
  if (h == m && m == span) { /* touched, but its blocks compare the same */
    f->pos = f->ncur;
    f->del = f->nins = 0;
    return GM_OK;
  }
  if (gm_grow((void **)&v->b, &v->cap, n, sizeof *v->b) != GM_OK) return GM_EBACKEND;
  if (m != span) move_blocks(v->b + i0 + m - t, v->b + i1 - t, no - i1 + t);
  /* the blocks between, with their count of their segment's blocks;
   * the others' are the old count, which count_seg corrects when they
   * are asked for */
  gm_flat_block_t *w = v->b + i0 + h;
  for (size_t j = h; j < m - t; j++, b = b->next, w++) {
    *w = flat_of(b, n);
    if (i0 + j == 0) w->seg_size = seg0;
  }
  v->counted = v->counted && n == no;
  v->n = n;
  if (n != no) fen_add(f, k, n - no);
  f->cur_ok = 0;
  f->ncur += n - no;
  f->pos = fen_before(f, k) + i0 + h;
  f->del = span - h - t;
  f->nins = m - h - t;
  f->ins = v->b + i0 + h;
  return GM_OK;
}

/* step_touched walks again the segments touched since the last step and
 * compares the list before and after from the first of those that
 * changed on and from the last of them back, block by block: a step costs
 * the blocks that changed, not the list. */
static int step_touched(gm_alloc_t *a, gm_flat_t *f) {
  size_t n = f->ncur, nc = n;
  f->ins = NULL;
  if (a->ntouched == 0) { /* the list is as it was */
    a->ntblocks = 0;
    f->pos = n;
    f->del = f->nins = 0;
    return GM_OK;
  }
  /* the first and last touched blocks still in each touched segment (a
   * deleted block is in none; one whose struct was reused is a block made
   * in this step, touched too) */
  for (size_t i = 0; i < a->ntblocks; i++) {
    const gm_block_t *b = a->tblocks[i];
    if (!b->seg || b->seg->touch != GM_TOUCHED) continue;
    gm_flat_seg_t *v = f->segv[b->seg->flat_k];
    if (!v->lo || b->ptr < v->lo->ptr) v->lo = b;
    if (!v->hi || b->ptr > v->hi->ptr) v->hi = b;
  }
  a->ntblocks = 0;
  if (a->ntouched == 1) {
    gm_seg_t *s = a->touched[0];
    gm_flat_seg_t *v = f->segv[s->flat_k];
    int rc = v->lo && !s->expandable ? step_alone(f, s->flat_k, s, v) : SPAN_WHOLE;
    if (rc != SPAN_WHOLE) {
      s->touch = GM_WATCHED;
      v->lo = v->hi = NULL;
      a->ntouched = 0;
      if (rc != GM_OK) f->alloc = NULL; /* the next step walks every segment */
      return rc;
    }
  }
  size_t k0 = SIZE_MAX, k1 = 0, h0 = 0, t0 = 0; /* h0, t0: the common head and tail of segment k0's blocks */
  int changed = 0;
  for (size_t i = 0; i < a->ntouched; i++) {
    gm_seg_t *s = a->touched[i];
    size_t k = s->flat_k;
    gm_flat_seg_t *v = f->segv[k];
    s->touch = GM_WATCHED;
    size_t h = 0, tl = 0; /* blocks known the same at the head and the tail */
    int rc = v->lo && !s->expandable ? put_span(s, v, &h, &tl) : SPAN_WHOLE;
    if (rc == SPAN_WHOLE) { /* its blocks before into old, now into b */
      gm_flat_block_t *t = v->old;
      size_t tc = v->old_cap;
      v->old = v->b, v->old_cap = v->cap, v->nold = v->n, v->oi0 = 0, v->nspan = v->n;
      v->b = t, v->cap = tc, v->n = 0;
      rc = put_seg(s, &v->b, &v->cap, &v->n);
      v->counted = 1;
    }
    v->lo = v->hi = NULL;
    if (rc != GM_OK) {
      a->ntouched = 0;
      f->alloc = NULL; /* the next step walks every segment */
      return GM_EBACKEND;
    }
    size_t m = v->n < v->nold ? v->n : v->nold;
    while (h < m && same(&v->b[h], old_at(v, h))) h++;
    if (h == m && v->n == v->nold) continue; /* touched, but its blocks compare the same */
    v->changed = 1;
    if (v->n != v->nold) {
      fen_add(f, k, v->n - v->nold);
      nc += v->n - v->nold;
    }
    changed++;
    if (k < k0) k0 = k, h0 = h, t0 = tl;
    if (k > k1) k1 = k;
  }
  size_t nt = a->ntouched;
  a->ntouched = 0;
  if (!changed) { /* the list is as it was */
    f->pos = n;
    f->del = f->nins = 0;
    return GM_OK;
  }
  f->cur_ok = 0;
  f->ncur = nc;
  gm_flat_seg_t *v0 = f->segv[k0];
  if (changed == 1 && h0 < v0->n && h0 < v0->nold) {
    /* one segment changed, and not only at its end: the lists' common
     * head and tail end within its blocks, which compare in place */
    size_t m = (v0->n < v0->nold ? v0->n : v0->nold) - h0, t = t0 < m ? t0 : m;
    while (t < m && same(&v0->b[v0->n - 1 - t], old_at(v0, v0->nold - 1 - t))) t++;
    f->pos = fen_before(f, k0) + h0;
    f->del = v0->nold - h0 - t;
    f->nins = v0->n - h0 - t;
    f->ins = v0->b + h0;
    v0->changed = 0; /* the only one set */
    return GM_OK;
  }
  /* the common head, from the first changed segment on */
  size_t p = fen_before(f, k0);
  walk_t o = {f, 1, k0, 0}, w = {f, 0, k0, 0};
  for (; walk_fwd(&o) && walk_fwd(&w) && same(walk_at(&o), walk_at(&w)); o.j++, w.j++) p++;
  walk_t ins = w; /* the first block after the common head */
  /* the common tail, from the last changed segment back: the blocks
   * after it are the same before and after */
  size_t tail = nc - fen_before(f, k1 + 1), q = tail;
  if (q > n - p) q = n - p;
  if (q > nc - p) q = nc - p;
  if (q == tail) {
    walk_t ob = {f, 1, k1 + 1, 0}, wb = {f, 0, k1 + 1, 0};
    while (q < n - p && q < nc - p && walk_back(&ob) && walk_back(&wb) && same(walk_at(&ob), walk_at(&wb))) q++;
  }
  f->pos = p;
  f->del = n - p - q;
  f->nins = nc - p - q;
  /* the inserted blocks, gathered */
  if (gm_grow((void **)&f->ins_buf, &f->ins_cap, f->nins, sizeof *f->ins_buf) != GM_OK) return GM_EBACKEND;
  for (size_t i = 0; i < f->nins; i++, ins.j++) {
    walk_fwd(&ins);
    f->ins_buf[i] = *walk_at(&ins);
    const gm_flat_seg_t *v = f->segv[ins.k];
    if (!v->counted) f->ins_buf[i].seg_blocks = (uint32_t)v->n;
  }
  f->ins = f->ins_buf;
  for (size_t i = 0; i < nt; i++) f->segv[a->touched[i]->flat_k]->changed = 0;
  return GM_OK;
}

/* check_step compares the step that made f's list from old (n blocks) with
 * a walk of every segment: the list, and the change. */
static int check_step(const gm_alloc_t *a, gm_flat_t *f, const gm_flat_block_t *old, size_t n) {
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
  if (rc == GM_OK) rc = gm_flat_list(f);
  if (rc == GM_OK) {
    gm_flat_t d = {0};
    diff(&d, old, n, list, nb);
    if (nb != f->ncur || d.pos != f->pos || d.del != f->del || d.nins != f->nins ||
        (nb && memcmp(list, f->cur, nb * sizeof *list) != 0) ||
        (f->nins && memcmp(list + f->pos, f->ins, f->nins * sizeof *list) != 0))
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
    if (gm_flat_list(f) != GM_OK || !(old = malloc(n * sizeof *old))) return GM_EBACKEND;
    memcpy(old, f->cur, n * sizeof *old);
  }
  int rc = all ? step_all(a, f) : step_touched(a, f);
  if (a->cfg.check) {
    if (rc == GM_OK) rc = check_step(a, f, old, old ? n : 0);
    free(old);
  }
  return rc;
}

void gm_flat_free(gm_flat_t *f) {
  for (size_t k = 0; k < f->segv_cap && f->segv[k]; k++) {
    free(f->segv[k]->b);
    free(f->segv[k]->old);
    free(f->segv[k]);
  }
  free(f->segv);
  free(f->fen);
  free(f->prev);
  free(f->cur);
  free(f->ins_buf);
  memset(f, 0, sizeof *f);
}
