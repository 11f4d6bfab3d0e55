/* gm_run_steps: ops applied one at a time, each followed by gm_flat_step,
 * in one call from Go (the HTML explorer's stepped replay), with the
 * changes, and now and then the whole list, written to a buffer. */
#include <stdlib.h>
#include <string.h>

#include "gm_devlog.h"
#include "gm_internal.h"

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
    if (gm_flat_step(a, f) != GM_OK ||
        gm_grow((void **)&s->ops, &s->ops_cap, s->nops + 1, sizeof *s->ops) != GM_OK) {
      *done = j;
      return GM_EBACKEND;
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
