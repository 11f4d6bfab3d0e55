/* What gm_steps.c (the block list followed op by op) and
 * gm_steps_run.c (the ops run for it) share. */
#ifndef GM_STEPS_H
#define GM_STEPS_H

#include <string.h>

#include "gm_alloc.h"

/* move_blocks is memmove of n blocks: most moves and copies of a step are
 * of a few blocks, which a loop does for less than the call. */
static inline void move_blocks(gm_flat_block_t *dst, const gm_flat_block_t *src, size_t n) {
  if (n > 4) {
    memmove(dst, src, n * sizeof *dst);
  } else if (dst < src) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
  } else {
    for (size_t i = n; i > 0; i--) dst[i - 1] = src[i - 1];
  }
}

#endif
