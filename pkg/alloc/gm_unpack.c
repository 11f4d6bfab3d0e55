/* gm_unpack: the reader of the packed op log (its format: gm_alloc.h).
 * The replay keeps a big plan's ops packed and unpacks them a batch at a
 * time for the allocator; this loop is that unpacking, without Go's
 * bounds checks, which cost about as much again. */
#include "gm_alloc.h"

/* the usual allocation's test of its ID and slot bytes at once */
_Static_assert(GM_PK_SIZE_SLOTS == 0x80, "a slot is a byte below 0x80");

/* uvarint reads the uvarint at *p and moves *p past it. */
static inline uint64_t uvarint(const uint8_t **p) {
  const uint8_t *q = *p;
  uint64_t v = *q++;
  if (v >= 0x80) {
    v &= 0x7f;
    for (unsigned s = 7;; s += 7) {
      uint64_t c = *q++;
      if (c < 0x80) {
        v |= c << (s & 63);
        break;
      }
      v |= (c & 0x7f) << (s & 63);
    }
  }
  *p = q;
  return v;
}

int gm_unpack(gm_unpack_t *u, const uint8_t *b, size_t len, size_t n, gm_op_t *ops, int32_t *event,
              int32_t *stack, size_t *done, size_t *used) {
  const uint8_t *p = b, *end = b + len;
  uint32_t ev = (uint32_t)u->event; /* uint32: the Event's deltas wrap */
  int32_t st = u->stack;
  size_t i;
  for (i = 0; i < n && p < end; i++) {
    gm_op_t *op = &ops[i];
    unsigned h = p[0], usual = h & ~GM_PK_STACK_SAME;
    if (usual == (GM_PK_EVENT_NEXT | GM_OP_FREE) && p[1] < 0x80) {
      /* the usual free: the next Event, the same Stack or none, an ID of
       * one byte, no other field */
      *op = (gm_op_t){.kind = GM_OP_FREE, .id = p[1]};
      p += 2;
      if (!(h & GM_PK_STACK_SAME)) st = -1;
      event[i] = (int32_t)++ev;
      stack[i] = st;
      continue;
    }
    if (usual == (GM_PK_EVENT_NEXT | GM_OP_ALLOC) && (p[1] | p[2]) < 0x80) {
      /* the usual allocation: as the usual free, of a size in the cache */
      *op = (gm_op_t){.kind = GM_OP_ALLOC, .id = p[1], .size = u->sizes[p[2]]};
      p += 3;
      if (!(h & GM_PK_STACK_SAME)) st = -1;
      event[i] = (int32_t)++ev;
      stack[i] = st;
      continue;
    }
    p++;
    unsigned x = 0;
    if (h & GM_PK_EXTRA) x = *p++;
    op->kind = (uint8_t)(h & GM_PK_KIND);
    op->id = (uint32_t)uvarint(&p);
    if (h & GM_PK_STACK_NEW)
      st = (int32_t)(uint32_t)uvarint(&p);
    else if (!(h & GM_PK_STACK_SAME))
      st = -1;
    uint64_t size = 0;
    if (x & GM_PKX_SIZE) {
      size = uvarint(&p);
    } else if (op->kind == GM_OP_ALLOC) {
      if (*p < GM_PK_SIZE_SLOTS) {
        size = u->sizes[*p++];
      } else {
        size = uvarint(&p) - GM_PK_SIZE_SLOTS;
        u->sizes[gm_pk_slot(size)] = size;
      }
    }
    op->size = size;
    unsigned next = (h & GM_PK_EVENT_NEXT) != 0;
    if (x) { /* rare: the fields most ops leave 0 */
      op->stream = x & GM_PKX_STREAM ? uvarint(&p) : 0;
      op->hint = x & GM_PKX_HINT ? uvarint(&p) : 0;
      op->pool = x & GM_PKX_POOL ? (uint32_t)uvarint(&p) : 0;
      op->flags = x & GM_PKX_FLAGS ? *p++ : 0;
      ev += x & GM_PKX_EVENT ? (uint32_t)uvarint(&p) : next;
    } else {
      op->stream = op->hint = 0;
      op->pool = 0;
      op->flags = 0;
      ev += next;
    }
    event[i] = (int32_t)ev;
    stack[i] = st;
  }
  *done = i;
  *used = (size_t)(p - b);
  u->event = (int32_t)ev;
  u->stack = st;
  return p > end ? GM_EINVAL : GM_OK;
}
