/* gm_internal.h — data structures shared by the allocator's C files.
 * Not part of the public API: only gm_*.c include it. */
#ifndef GM_INTERNAL_H
#define GM_INTERNAL_H

#include "gm_alloc.h"

#define GM_MIN_BLOCK 512ull
#define GM_SMALL_SIZE 1048576ull       /* kSmallSize: largest small-pool request */
#define GM_SMALL_BUFFER 2097152ull     /* kSmallBuffer: small segment size */
#define GM_MIN_LARGE_ALLOC 10485760ull /* kMinLargeAlloc */
#define GM_ROUND_LARGE 2097152ull      /* kRoundLarge */
#define GM_NO_ID UINT32_MAX

typedef struct gm_pool gm_pool_t;
typedef struct gm_seg gm_seg_t;

/* A block. Free mapped idle blocks live in their pool's `free` treap keyed
 * (stream, size, ptr); unmapped blocks in its `unmapped` treap keyed
 * (stream, ptr). prev/next link the blocks of one segment in address order. */
typedef struct gm_block {
  /* the treap's key and links first: one cache line per search step */
  uint64_t stream, size, ptr;
  struct gm_block *left, *right;  /* treap children */
  struct gm_block *parent;        /* treap parent, NULL at the root */
  uint32_t prio;                  /* treap priority */
  uint32_t id;                    /* allocation id while allocated or pending */
  uint64_t requested;
  struct gm_block *prev, *next;   /* segment neighbours */
  struct gm_block *pend_next;     /* FIFO of pending frees */
  gm_pool_t *pool;
  gm_seg_t *seg;
  int64_t gc_base;                /* pool clock when inserted in the free set */
  uint8_t allocated;
  uint8_t mapped;
  uint8_t pending;                /* freed, waiting for other streams */
  uint8_t uses;                   /* record_stream recorded another stream */
  uint8_t in_set;                 /* 0, GM_SET_FREE or GM_SET_UNMAPPED */
} gm_block_t;

enum { GM_SET_FREE = 1, GM_SET_UNMAPPED = 2 };

struct gm_pool {
  gm_block_t *free;       /* free mapped idle blocks */
  gm_block_t *unmapped;   /* unmapped expandable ranges */
  int is_small;
  int64_t clock;          /* get_free_blocks_call_count: the GC clock */
};

/* A segment: one cudaMalloc, or one expandable virtual range. */
struct gm_seg {
  uint64_t base, size, stream, page;
  gm_pool_t *pool;
  gm_block_t *head;       /* lowest block */
  gm_seg_t *prev_seg, *next_seg;
  int expandable;
  /* kept by the best-fit helpers of gm_bestfit.c only (they make
   * inactive_split O(1)): free bytes, blocks, free blocks */
  uint64_t free_bytes;
  uint32_t nblocks, nfree;
};

typedef struct gm_policy gm_policy_t; /* gm_policy.h */

struct gm_alloc {
  const gm_policy_t *pol;  /* from the table in gm_policies.h; never NULL */
  void *pol_state;         /* the policy's own, from its init */
  gm_config_t cfg;
  gm_backend_t be;
  gm_pool_t small, large;
  gm_seg_t *segs;          /* all segments, most recent first */
  gm_block_t **ids;        /* allocation id -> block */
  uint32_t nids;
  gm_block_t *pend_head, *pend_tail;
  gm_block_t *spare;       /* recycled block structs */
  uint64_t total_allocated; /* bytes obtained from the backend */
  uint64_t device_total;
  uint32_t rng;
  gm_stats_t st;
  gm_extra_t ex;
  int64_t peak_seen;       /* reserved peak already recorded in ex */
};

#endif
