/* gm_sim.h — the simulated device's state (gm_sim.c only): its layout
 * constants, its sorted arrays of ranges and chunks, the hole index and
 * the room index (described where it is kept, below sim_t).
 *
 * The hole index is a treap over the given-back chunks by address (the heap by priority),
 * each node keeping the largest key in its subtree, so that hole_fit can
 * ask for the highest chunk below an address whose key is above a size
 * in time logarithmic in the chunks. gm_sim.c says what the keys are and
 * keeps them; gm_sim_check compares the index with the given-back list
 * (I7). Nodes are indexes into one array, 0 for none; spare ones are
 * chained by l. */
#ifndef GM_SIM_H
#define GM_SIM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gm_alloc.h"

typedef struct hnode {
  uint64_t addr, key, max; /* max: the largest key in its subtree */
  uint32_t prio, l, r;
} hnode_t;

typedef struct holes {
  hnode_t *n; /* n[1..len] */
  uint32_t root, len, cap, spare, rng;
} holes_t;

static void holes_pull(holes_t *h, uint32_t x) {
  hnode_t *n = &h->n[x];
  uint64_t m = n->key;
  if (n->l && h->n[n->l].max > m) m = h->n[n->l].max;
  if (n->r && h->n[n->r].max > m) m = h->n[n->r].max;
  n->max = m;
}

/* the treap x split into the nodes below addr (*l) and the rest (*r) */
static void holes_split(holes_t *h, uint32_t x, uint64_t addr, uint32_t *l, uint32_t *r) {
  if (!x) {
    *l = *r = 0;
  } else if (h->n[x].addr < addr) {
    holes_split(h, h->n[x].r, addr, &h->n[x].r, r);
    holes_pull(h, x);
    *l = x;
  } else {
    holes_split(h, h->n[x].l, addr, l, &h->n[x].l);
    holes_pull(h, x);
    *r = x;
  }
}

static uint32_t holes_merge(holes_t *h, uint32_t a, uint32_t b) {
  if (!a || !b) return a ? a : b;
  if (h->n[a].prio > h->n[b].prio) {
    h->n[a].r = holes_merge(h, h->n[a].r, b);
    holes_pull(h, a);
    return a;
  }
  h->n[b].l = holes_merge(h, a, h->n[b].l);
  holes_pull(h, b);
  return b;
}

/* node y (its children none) into the treap x */
static uint32_t holes_insert(holes_t *h, uint32_t x, uint32_t y) {
  if (!x) return y;
  if (h->n[y].prio > h->n[x].prio) {
    holes_split(h, x, h->n[y].addr, &h->n[y].l, &h->n[y].r);
    holes_pull(h, y);
    return y;
  }
  if (h->n[y].addr < h->n[x].addr) h->n[x].l = holes_insert(h, h->n[x].l, y);
  else h->n[x].r = holes_insert(h, h->n[x].r, y);
  holes_pull(h, x);
  return x;
}

/* A chunk at addr, of key, joins the index. */
static int holes_add(holes_t *h, uint64_t addr, uint64_t key) {
  uint32_t y = h->spare;
  if (y) {
    h->spare = h->n[y].l;
  } else {
    if (h->len + 1 >= h->cap) {
      uint32_t cap = h->cap ? 2 * h->cap : 64;
      hnode_t *n = realloc(h->n, cap * sizeof *n);
      if (!n) return GM_ENOMEM;
      h->n = n;
      h->cap = cap;
    }
    y = ++h->len;
  }
  if (!h->rng) h->rng = 0x9e3779b9;
  h->rng ^= h->rng << 13;
  h->rng ^= h->rng >> 17;
  h->rng ^= h->rng << 5;
  h->n[y] = (hnode_t){addr, key, key, h->rng, 0, 0};
  h->root = holes_insert(h, h->root, y);
  return GM_OK;
}

/* the treap x without the node at addr */
static uint32_t holes_erase_at(holes_t *h, uint32_t x, uint64_t addr) {
  if (!x) return 0;
  hnode_t *n = &h->n[x];
  if (n->addr == addr) {
    uint32_t m = holes_merge(h, n->l, n->r);
    n->l = h->spare;
    h->spare = x;
    return m;
  }
  if (addr < n->addr) n->l = holes_erase_at(h, n->l, addr);
  else n->r = holes_erase_at(h, n->r, addr);
  holes_pull(h, x);
  return x;
}

/* The chunk at addr leaves the index. */
static void holes_erase(holes_t *h, uint64_t addr) { h->root = holes_erase_at(h, h->root, addr); }

/* The node at addr in the treap x gets key; whether the max of x
 * changed (0 when there is no such node): where a max stays, so do the
 * ones above it, and they are not pulled. */
static int holes_rekey(holes_t *h, uint32_t x, uint64_t addr, uint64_t key) {
  if (!x) return 0;
  hnode_t *n = &h->n[x];
  int changed;
  if (n->addr == addr) {
    changed = n->key != key;
    n->key = key;
  } else {
    changed = holes_rekey(h, addr < n->addr ? n->l : n->r, addr, key);
  }
  if (!changed) return 0;
  uint64_t was = n->max;
  holes_pull(h, x);
  return n->max != was;
}

/* The node at from moves to to: no other node's address lies between
 * them, so the treap's order stays. */
static void holes_move(holes_t *h, uint64_t from, uint64_t to) {
  for (uint32_t x = h->root; x; x = from < h->n[x].addr ? h->n[x].l : h->n[x].r) {
    if (h->n[x].addr == from) {
      h->n[x].addr = to;
      return;
    }
  }
}

/* The address of the highest chunk below `before` in the treap x whose
 * key is above t, or 0. */
static uint64_t holes_last(const holes_t *h, uint32_t x, uint64_t before, uint64_t t) {
  while (x && h->n[x].max > t) {
    const hnode_t *n = &h->n[x];
    if (n->addr >= before) {
      x = n->l;
      continue;
    }
    uint64_t at = holes_last(h, n->r, before, t);
    if (at) return at;
    if (n->key > t) return n->addr;
    x = n->l;
  }
  return 0;
}

/* Whether the subtree x is a treap of priorities at most up, each max the
 * largest key below it, handing want each node in address order with the
 * count *k of nodes before it (want says whether the node is right). */
static int holes_ok(const holes_t *h, uint32_t x, uint32_t up, size_t *k,
                    int (*want)(const void *ctx, size_t k, uint64_t addr, uint64_t key), const void *ctx) {
  if (!x) return 1;
  const hnode_t *n = &h->n[x];
  if (x > h->len || n->prio > up || !holes_ok(h, n->l, n->prio, k, want, ctx)) return 0;
  if (!want(ctx, *k, n->addr, n->key)) return 0;
  (*k)++;
  uint64_t m = n->key;
  if (n->l && h->n[n->l].max > m) m = h->n[n->l].max;
  if (n->r && h->n[n->r].max > m) m = h->n[n->r].max;
  return n->max == m && holes_ok(h, n->r, n->prio, k, want, ctx);
}

#define SIM_TOP 0x7fff00000000ull
#define SIM_FLOOR 0x100000000ull /* the address space is [SIM_FLOOR, SIM_TOP) */
#define SIM_LOW 0x302000000ull   /* where the driver's first reservation went */
#define MIB 1048576ull
#define SIM_ALIGN (2 * MIB)
#define SIM_CHUNK (32 * MIB)
#define SIM_REGION (24 * MIB)   /* the start-up region's free room */
#define SIM_REGION_UP (488 * MIB) /* from the top of the first chunk to it */
#define SIM_HOLE_DOWN (74 * MIB)  /* from it down to the 2 MiB hole */
/* the start-up range kernels free: from the top of the first chunk up to the hole */
#define SIM_RANGE (SIM_REGION_UP - SIM_HOLE_DOWN)
#define SIM_UNLIMITED (1ull << 40) /* what an unlimited device reports: 1 TiB */

typedef struct range {
  uint64_t addr, size;
} range_t;

typedef struct chunk {
  uint64_t addr, size;
  uint64_t carved;    /* when: chunks carved later are searched first */
  uint64_t used;      /* bytes of the allocations inside: a chunk with less
                       * free than a request has no gap for it */
  uint32_t live;      /* allocations inside */
  uint8_t permanent;  /* the driver's own start-up room: never given back */
  uint8_t released;   /* given back: room a later chunk can be carved from */
} chunk_t;

typedef struct sim {
  uint64_t capacity, used;
  /* Both arrays sit inside a buffer with room on either side (see
   * open_at): r is rbuf + rfront, c is cbuf + cfront. */
  range_t *r; /* live address ranges, sorted by address */
  size_t n, cap;
  chunk_t *c; /* chunks, sorted by address */
  size_t nc, capc;
  range_t *g; /* the given-back (released) chunks, sorted by address */
  size_t ng, capg;
  range_t *rbuf, *gbuf;
  chunk_t *cbuf;
  size_t rfront, cfront, gfront;
  holes_t holes; /* the given-back chunks by address (see given_key) */
  uint64_t carved; /* the last carved number given (room_renumber renumbers) */
  /* the room index (see room_set): 2 * tcap nodes in room, the chunks'
   * addresses by carved in cat (tcap of them) */
  uint64_t *room, *cat;
  size_t tcap;
  /* the top of the room chunks are carved from (the start-up mappings sit
   * above it); 0 until the first chunk when the layout is unknown */
  uint64_t ceiling;
  /* where the start-up range opens once the first chunk is carved; 0 = not
   * pending (opened, no layout read, or a process without kernels) */
  uint64_t range;
  uint64_t hole; /* the start-up hole's address; 0 = no layout read */
  /* GM_SIM_KERNEL_SIGNAL: the range opens when gm_sim_kernels_started says
   * so, not once the first chunk is carved */
  int started, diverged, ignore, no_kernels, on_signal;
  /* two chunks may overlap (a recording's block ran over a chunk in use);
   * until then no two do, and the chunk holding an address is the last
   * that begins at or below it */
  int overlap;
  gm_sim_addressing_t st;
} sim_t;

/* Chunk i may overlap its neighbours: note it when it does. */
static void overlap_at(sim_t *s, size_t i) {
  uint64_t lo = s->c[i].addr, hi = lo + s->c[i].size;
  s->overlap |= (i > 0 && s->c[i - 1].addr + s->c[i - 1].size > lo) || (i + 1 < s->nc && s->c[i + 1].addr < hi);
}

/* The room index lets gap_fit visit only the chunks that may have a gap
 * for a request, latest carved first, instead of every chunk. It is a max
 * segment tree over the carved numbers: leaf k (node tcap + k) belongs to
 * the chunk carved k-th, and holds one more than its free bytes (size -
 * used) while that chunk is in use (not released) and used <= size, else
 * 0, as it does once the chunk is dropped; cat[k] is that chunk's address.
 * Node j < tcap holds the larger of nodes 2j and 2j + 1. A chunk has a
 * gap of n bytes only if its leaf is at least n + 1 (gap_fit's test). Every
 * change of a chunk's size, used or released goes through room_sync or
 * drop_chunk (given_shrink's need not: a given-back chunk's leaf is 0
 * whatever its size, only its cat entry follows its address);
 * gm_sim_check compares the index with the chunks, and that each chunk's
 * number is its own, at most carved.
 *
 * Only the order of the carved numbers matters (gap_fit's "latest carved
 * first"), so when they run out room_renumber gives the chunks there are
 * the numbers 1.. in the same order, in a tree sized for them: its depth
 * follows the chunks there are, not every chunk ever carved (a trace that
 * gives back and carves a chunk per allocation carves hundreds of
 * thousands). */
static void room_set(sim_t *s, uint64_t k, uint64_t v) {
  size_t j = s->tcap + k;
  uint64_t old = s->room[j];
  if (v == old) return;
  s->room[j] = v;
  if (v > old) { /* up while the nodes above held less */
    for (j /= 2; j > 0 && s->room[j] < v; j /= 2) s->room[j] = v;
    return;
  }
  /* down: only the nodes above that held old may have held it for this leaf */
  for (j /= 2; j > 0 && s->room[j] == old; j /= 2) {
    uint64_t m = s->room[2 * j] > s->room[2 * j + 1] ? s->room[2 * j] : s->room[2 * j + 1];
    if (m == old) break; /* another leaf holds it: so are the nodes above */
    s->room[j] = m;
  }
}

static uint64_t room_of(const chunk_t *c) { return !c->released && c->used <= c->size ? c->size - c->used + 1 : 0; }

static void room_sync(sim_t *s, const chunk_t *c) { room_set(s, c->carved, room_of(c)); }

/* Room for one more carved number: the chunks there are renumbered 1..nc
 * in carved order (see above), in a tree with at least as many numbers
 * again free, rebuilt. The old tree's inner nodes, rebuilt last, map each
 * old number to 1 + its chunk's index meanwhile; the arrays stay when
 * the tree keeps its size. */
static int room_renumber(sim_t *s) {
  size_t cap = 64;
  while (cap <= 2 * (s->nc + 1)) cap *= 2;
  uint64_t *room = s->room, *cat = s->cat, *at = s->room;
  if (cap != s->tcap) {
    room = calloc(2 * cap, sizeof *room);
    cat = calloc(cap, sizeof *cat);
    if (!room || !cat) {
      free(room);
      free(cat);
      return GM_ENOMEM;
    }
  } else {
    memset(room + cap, 0, cap * sizeof *room); /* the leaves */
  }
  uint64_t k = 0;
  if (s->tcap) {
    memset(at + 1, 0, (s->tcap - 1) * sizeof *at);
    for (size_t i = 0; i < s->nc; i++) at[s->c[i].carved] = i + 1;
    for (size_t old = 1; old < s->tcap; old++) {
      if (!at[old]) continue;
      chunk_t *c = &s->c[at[old] - 1];
      c->carved = ++k;
      cat[k] = c->addr;
      room[cap + k] = room_of(c);
    }
  }
  for (size_t j = cap - 1; j > 0; j--) room[j] = room[2 * j] > room[2 * j + 1] ? room[2 * j] : room[2 * j + 1];
  if (room != s->room) {
    free(s->room);
    free(s->cat);
  }
  s->room = room;
  s->cat = cat;
  s->tcap = cap;
  s->carved = k;
  return GM_OK;
}

/* The largest carved number below `before` whose leaf is at least t, or 0
 * (no chunk is carved 0th): up from leaf `before` to the first left
 * sibling that holds one, then down its right side. */
static uint64_t room_last(const sim_t *s, uint64_t t, uint64_t before) {
  size_t j;
  if (before >= s->tcap) {
    if (!s->tcap || s->room[1] < t) return 0;
    j = 1;
  } else {
    j = s->tcap + before;
    while (j > 1 && !((j & 1) && s->room[j - 1] >= t)) j /= 2;
    if (j <= 1) return 0;
    j--;
  }
  while (j < s->tcap) j = s->room[2 * j + 1] >= t ? 2 * j + 1 : 2 * j;
  return j - s->tcap;
}

#endif /* GM_SIM_H */
