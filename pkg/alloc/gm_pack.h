/* gm_pack.h — reading one op of the packed op log (its format: gm_alloc.h,
 * "The packed op log"). Private: gm_unpack reads ops into an array with
 * it, gm_run_packed applies each as it reads it, so that the two read the
 * log alike. */
#ifndef GM_PACK_H
#define GM_PACK_H

#include "gm_alloc.h"

/* the usual allocation's test of its ID and slot bytes at once */
_Static_assert(GM_PK_SIZE_SLOTS == 0x80, "a slot is a byte below 0x80");

/* gm_pk_uvarint reads the uvarint at *p and moves *p past it. */
static inline uint64_t gm_pk_uvarint(const uint8_t **p) {
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

/* gm_pk_read reads the op packed at p into *op, moves *ev and *st from the
 * previous op's Event and Stack to its own, keeps sizes (a gm_unpack_t's
 * cache) as the format says, and returns the byte after the op. It checks
 * nothing: the caller compares that byte with the log's end.
 * always_inline: gm_run_packed's two loops would otherwise call it. */
__attribute__((always_inline)) static inline const uint8_t *gm_pk_read(uint64_t *sizes, const uint8_t *p,
                                                                      gm_op_t *op, uint32_t *ev,
                                        int32_t *st) {
  unsigned h = p[0], usual = h & ~GM_PK_STACK_SAME;
  if (usual == (GM_PK_EVENT_NEXT | GM_OP_FREE) && p[1] < 0x80) {
    /* the usual free: the next Event, the same Stack or none, an ID of
     * one byte, no other field */
    *op = (gm_op_t){.kind = GM_OP_FREE, .id = p[1]};
    if (!(h & GM_PK_STACK_SAME)) *st = -1;
    ++*ev;
    return p + 2;
  }
  if (usual == (GM_PK_EVENT_NEXT | GM_OP_ALLOC) && (p[1] | p[2]) < 0x80) {
    /* the usual allocation: as the usual free, of a size in the cache */
    *op = (gm_op_t){.kind = GM_OP_ALLOC, .id = p[1], .size = sizes[p[2]]};
    if (!(h & GM_PK_STACK_SAME)) *st = -1;
    ++*ev;
    return p + 3;
  }
  p++;
  unsigned x = 0;
  if (h & GM_PK_EXTRA) x = *p++;
  op->kind = (uint8_t)(h & GM_PK_KIND);
  op->id = (uint32_t)gm_pk_uvarint(&p);
  if (h & GM_PK_STACK_NEW)
    *st = (int32_t)(uint32_t)gm_pk_uvarint(&p);
  else if (!(h & GM_PK_STACK_SAME))
    *st = -1;
  uint64_t size = 0;
  if (x & GM_PKX_SIZE) {
    size = gm_pk_uvarint(&p);
  } else if (op->kind == GM_OP_ALLOC) {
    if (*p < GM_PK_SIZE_SLOTS) {
      size = sizes[*p++];
    } else {
      size = gm_pk_uvarint(&p) - GM_PK_SIZE_SLOTS;
      sizes[gm_pk_slot(size)] = size;
    }
  }
  op->size = size;
  unsigned next = (h & GM_PK_EVENT_NEXT) != 0;
  if (x) { /* rare: the fields most ops leave 0 */
    op->stream = x & GM_PKX_STREAM ? gm_pk_uvarint(&p) : 0;
    op->hint = x & GM_PKX_HINT ? gm_pk_uvarint(&p) : 0;
    op->pool = x & GM_PKX_POOL ? (uint32_t)gm_pk_uvarint(&p) : 0;
    op->flags = x & GM_PKX_FLAGS ? *p++ : 0;
    *ev += x & GM_PKX_EVENT ? (uint32_t)gm_pk_uvarint(&p) : next;
  } else {
    op->stream = op->hint = 0;
    op->pool = 0;
    op->flags = 0;
    *ev += next;
  }
  return p;
}

#endif
