/* gm_unpack: the reader of the packed op log (its format: gm_alloc.h) into
 * an array. The replay keeps a big plan's ops packed and unpacks them a
 * batch at a time where it needs them as an array (the HTML explorer, the
 * stepper, the placement check's twin; the plain replay reads the log in
 * gm_run_packed); this loop is that unpacking, without Go's bounds checks,
 * which cost about as much again. */
#include "gm_pack.h"

int gm_unpack(gm_unpack_t *u, const uint8_t *b, size_t len, size_t n, gm_op_t *ops, int32_t *event,
              int32_t *stack, size_t *done, size_t *used) {
  const uint8_t *p = b, *end = b + len;
  uint32_t ev = (uint32_t)u->event; /* uint32: the Event's deltas wrap */
  int32_t st = u->stack;
  size_t i;
  for (i = 0; i < n && p < end; i++) {
    p = gm_pk_read(u->sizes, p, &ops[i], &ev, &st);
    event[i] = (int32_t)ev;
    stack[i] = st;
  }
  *done = i;
  *used = (size_t)(p - b);
  u->event = (int32_t)ev;
  u->stack = st;
  return p > end ? GM_EINVAL : GM_OK;
}
