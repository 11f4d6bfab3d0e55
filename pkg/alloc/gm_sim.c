/* gm_sim.c — the simulated device: deterministic, pure C, no GPU.
 *
 * It counts the bytes in use against an optional capacity and hands out
 * addresses. Addresses matter because best fit breaks ties between
 * equal-size free blocks by address, so the simulator models where the CUDA
 * driver (CUDA 13, driver 580, H200) puts each cudaMalloc; the model and its
 * evidence are in docs/pytorch-allocator.md, "Where the driver places
 * segments". In short:
 *
 *   - the driver hands out address space in chunks of the request rounded up
 *     to 32 MiB, carved top down, one below the other;
 *   - a request first goes to a free 2 MiB-aligned gap inside a chunk still
 *     in use (the tail a smaller request left, or room a free left): in the
 *     chunk carved last that has one, the smallest gap that fits, at its
 *     start;
 *   - a chunk whose last allocation is freed is given back; a new chunk goes
 *     at the top of the highest run of given-back chunks that is larger than
 *     it (never into room of exactly its size), else below the lowest chunk
 *     (the frontier);
 *   - the first segment tells where the driver's own start-up mappings sit:
 *     a permanent 24 MiB region 488 MiB above the top of the first chunk,
 *     and a permanent 2 MiB hole 74 MiB below that region;
 *   - in a process that runs kernels, the 414 MiB between the top of the
 *     first chunk and the hole become free once kernels start, and are
 *     filled bottom up like a tail; the model opens them once the first
 *     chunk has been carved (programs put their first tensors on the device
 *     before their first kernels run);
 *     (GM_SIM_KERNEL_SIGNAL: when told the program's first kernel ran; then,
 *     if no segment holds the hole, the range and the hole are one empty
 *     416 MiB chunk, given back: chunks are carved from its top down);
 *   - the first cuBLAS handle makes the driver map 64 MiB of its own, where
 *     a cudaMalloc of that size would go (gm_sim_tenant, when told);
 *   - reservations for expandable segments (cuMemAddressReserve) grow bottom
 *     up from a low base, 32 MiB-aligned.
 *
 * While a replay follows its recording, every cudaMalloc comes with a hint
 * (the address the recording got at that point) and the hint is used, so the
 * replay sees the real addresses and the model learns the real layout. Once a
 * cudaMalloc comes without a hint, or with one that is taken, the replay has
 * left the recording and the model places every later segment. With
 * GM_SIM_IGNORE_HINTS, only the first segment's hint is used. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gm_devlog.h"
#include "gm_internal.h"
#include "gm_sim.h"

static uint64_t up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* index of the first range whose end is above addr (the ranges do not
 * overlap: their ends are sorted too). Without a branch on the
 * comparison, which a run of scattered addresses does not predict: the
 * answer is in [b, b + n], the ranges before b end at or below addr. */
static size_t find(const sim_t *s, uint64_t addr) {
  const range_t *b = s->r;
  size_t n = s->n;
  if (!n) return 0;
  while (n > 1) {
    size_t half = n / 2;
    b = b[half].addr + b[half].size <= addr ? b + half : b;
    n -= half;
  }
  return (size_t)(b - s->r) + (b->addr + b->size <= addr);
}

static int overlaps(const sim_t *s, uint64_t addr, uint64_t size) {
  size_t i = find(s, addr);
  return i < s->n && s->r[i].addr < addr + size;
}

/* The sorted arrays take and give up elements where the layout changes,
 * which is often at their low end (the frontier moves down): an element
 * goes in or out by moving the shorter side, into room kept on both sides
 * of the n elements at *base, *front elements into *buf of cap. */
static int open_at(void **base, void **buf, size_t *front, size_t *cap, size_t n, size_t i, size_t elem) {
  char *b = *base;
  int low = i < n - i;
  if (low && *front > 0) { /* the low side moves down */
    memmove(b - elem, b, i * elem);
    *base = b - elem;
    (*front)--;
    return GM_OK;
  }
  if (!low && *front + n < *cap) { /* the high side moves up */
    memmove(b + (i + 1) * elem, b + i * elem, (n - i) * elem);
    return GM_OK;
  }
  /* no room on that side: a buffer with half its room on either side,
   * twice as large when it is half full */
  size_t c = *cap < 32 ? 64 : n + 1 > *cap / 2 ? *cap * 2 : *cap, f = (c - n - 1) / 2;
  char *q = malloc(c * elem);
  if (!q) return GM_ENOMEM;
  if (n) {
    memcpy(q + f * elem, b, i * elem);
    memcpy(q + (f + i + 1) * elem, b + i * elem, (n - i) * elem);
  }
  free(*buf);
  *buf = q;
  *base = q + f * elem;
  *front = f;
  *cap = c;
  return GM_OK;
}

/* The element at index i of the n at *base goes: the shorter side moves. */
static void close_at(void **base, size_t *front, size_t n, size_t i, size_t elem) {
  char *b = *base;
  if (i < n - 1 - i) {
    memmove(b + elem, b, i * elem);
    *base = b + elem;
    (*front)++;
  } else {
    memmove(b + i * elem, b + (i + 1) * elem, (n - i - 1) * elem);
  }
}

/* A range goes in at index i (find's for addr). */
static int insert_at(sim_t *s, size_t i, uint64_t addr, uint64_t size) {
  if (open_at((void **)&s->r, (void **)&s->rbuf, &s->rfront, &s->cap, s->n, i, sizeof *s->r) != GM_OK)
    return GM_ENOMEM;
  s->r[i].addr = addr;
  s->r[i].size = size;
  s->n++;
  return GM_OK;
}

static int insert(sim_t *s, uint64_t addr, uint64_t size) { return insert_at(s, find(s, addr), addr, size); }

static int erase(sim_t *s, uint64_t addr) {
  size_t i = find(s, addr);
  if (i >= s->n || s->r[i].addr != addr) return GM_EBACKEND;
  close_at((void **)&s->r, &s->rfront, s->n, i, sizeof *s->r);
  s->n--;
  return GM_OK;
}

/* index of the first chunk whose address is at least addr (the chunks
 * are sorted by address, and a chunk's address never changes) */
static size_t chunk_from(const sim_t *s, uint64_t addr) {
  return gm_first_at_least(s->c, s->nc, sizeof *s->c, offsetof(chunk_t, addr), addr);
}

/* the first chunk that may reach up to addr or above: while no two
 * overlap, those before the last that begins below it end below it */
static size_t reach_from(const sim_t *s, uint64_t addr) {
  size_t i = s->overlap ? 0 : chunk_from(s, addr);
  return i > 0 ? i - 1 : 0;
}

/* the chunk holding addr, or NULL: the first that does, of those that
 * begin at or below it (while no two overlap, only the last can) */
static chunk_t *chunk_at(sim_t *s, uint64_t addr) {
  size_t n = addr < UINT64_MAX ? chunk_from(s, addr + 1) : s->nc;
  if (!s->overlap) return n > 0 && addr < s->c[n - 1].addr + s->c[n - 1].size ? &s->c[n - 1] : NULL;
  for (size_t i = 0; i < n; i++)
    if (addr < s->c[i].addr + s->c[i].size) return &s->c[i];
  return NULL;
}

/* the chunk carved k-th, or NULL */
static const chunk_t *carved_chunk(const sim_t *s, uint64_t k) {
  for (size_t i = chunk_from(s, s->cat[k]); i < s->nc && s->c[i].addr == s->cat[k]; i++)
    if (s->c[i].carved == k) return &s->c[i];
  return NULL;
}

/* index of the first given-back chunk whose address is at least addr */
static size_t given_from(const sim_t *s, uint64_t addr) {
  return gm_first_at_least(s->g, s->ng, sizeof *s->g, offsetof(range_t, addr), addr);
}

/* index of the given-back chunk at addr in the chunks */
static size_t given_index(const sim_t *s, uint64_t addr) {
  size_t i = chunk_from(s, addr);
  while (i + 1 < s->nc && !s->c[i].released && s->c[i + 1].addr == addr) i++;
  return i;
}

/* The hole index (gm_sim.h) lets hole_fit visit only the given-back
 * chunks that may matter to it instead of every one. A chunk's key is
 * UINT64_MAX when it ends where the next one below it begins (a run may
 * go on there), else its size: a run of one chunk with a key of cs or less
 * holds no new chunk of cs bytes, and hole_fit passes over it. Every
 * change of the given-back list goes through give, drop_chunk, given_grew
 * or given_shrink, which keep it; gm_sim_check compares it with the
 * list. */
/* whether given-back chunk lo ends where chunk hi begins */
static int joins(const sim_t *s, size_t lo, size_t hi) { return s->g[lo].addr + s->g[lo].size == s->g[hi].addr; }

/* given-back chunk j's key in the hole index */
static uint64_t given_key_of(const sim_t *s, size_t j) { return j > 0 && joins(s, j - 1, j) ? UINT64_MAX : s->g[j].size; }

/* Given-back chunk j's key is brought up to date, when there is one and
 * it was `was` (UINT64_MAX: joined below) or may have changed (dirty). */
static void given_key(sim_t *s, size_t j, int was, int dirty) {
  if (j >= s->ng) return;
  int now = j > 0 && joins(s, j - 1, j);
  if (dirty || now != was) holes_rekey(&s->holes, s->holes.root, s->g[j].addr, given_key_of(s, j));
}

/* Chunk c goes; a pointer to another chunk may move with it, an index
 * below c's stays. */
static void drop_chunk(sim_t *s, chunk_t *c) {
  room_set(s, c->carved, 0);
  if (c->released) {
    size_t j = given_from(s, c->addr);
    int above = j + 1 < s->ng && joins(s, j, j + 1);
    holes_erase(&s->holes, c->addr);
    close_at((void **)&s->g, &s->gfront, s->ng, j, sizeof *s->g);
    s->ng--;
    given_key(s, j, above, 0); /* the one above it: its neighbour below changed */
  }
  close_at((void **)&s->c, &s->cfront, s->nc, (size_t)(c - s->c), sizeof *s->c);
  s->nc--;
}

/* Chunk c is given back: it joins the given-back chunks. */
static int give(sim_t *s, const chunk_t *c) {
  size_t j = given_from(s, c->addr);
  int above = j > 0 && j < s->ng && joins(s, j - 1, j);
  if (open_at((void **)&s->g, (void **)&s->gbuf, &s->gfront, &s->capg, s->ng, j, sizeof *s->g) != GM_OK)
    return GM_ENOMEM;
  s->g[j] = (range_t){c->addr, c->size};
  s->ng++;
  if (holes_add(&s->holes, c->addr, given_key_of(s, j)) != GM_OK) {
    close_at((void **)&s->g, &s->gfront, s->ng, j, sizeof *s->g);
    s->ng--;
    return GM_ENOMEM;
  }
  given_key(s, j + 1, above, 0);
  return GM_OK;
}

/* Given-back chunk c grew. */
static void given_grew(sim_t *s, const chunk_t *c) {
  size_t j = given_from(s, c->addr);
  int above = j + 1 < s->ng && joins(s, j, j + 1);
  s->g[j].size = c->size;
  given_key(s, j, 0, 1);
  given_key(s, j + 1, above, 0);
}

/* Given-back chunk c keeps [addr, addr + size) of its room, its low or
 * its high part (a chunk is carved over the rest), in place: in the
 * chunks, the given-back list and the hole index it keeps its place, as
 * no other chunk begins inside it while none overlap (the caller's
 * condition). Its carved number stays: a given-back chunk's does not
 * matter (its room leaf is 0), so it need not be the latest. */
static void given_shrink(sim_t *s, chunk_t *c, uint64_t addr, uint64_t size) {
  size_t j = given_from(s, c->addr);
  int above = j + 1 < s->ng && joins(s, j, j + 1);
  if (addr != c->addr) {
    holes_move(&s->holes, c->addr, addr);
    s->cat[c->carved] = addr;
  }
  c->addr = addr;
  c->size = size;
  s->g[j] = (range_t){addr, size};
  given_key(s, j, 0, 1);
  given_key(s, j + 1, above, 0);
}

/* A chunk is carved at addr, of size bytes, with live allocations of
 * used bytes inside (a new chunk comes with its first: the room index is
 * set once, for both). */
static chunk_t *add_chunk(sim_t *s, uint64_t addr, uint64_t size, int permanent, int released, uint32_t live,
                          uint64_t used) {
  size_t i = chunk_from(s, addr);
  if (s->carved + 1 >= s->tcap && room_renumber(s) != GM_OK) return NULL;
  if (open_at((void **)&s->c, (void **)&s->cbuf, &s->cfront, &s->capc, s->nc, i, sizeof *s->c) != GM_OK)
    return NULL;
  s->c[i] = (chunk_t){addr, size, ++s->carved, used, live, (uint8_t)permanent, (uint8_t)released};
  s->nc++;
  overlap_at(s, i);
  if (released && give(s, &s->c[i]) != GM_OK) {
    s->c[i].released = 0;
    drop_chunk(s, &s->c[i]);
    return NULL;
  }
  s->cat[s->carved] = addr;
  room_sync(s, &s->c[i]);
  if (!permanent && !s->ceiling) s->ceiling = addr + size;
  return &s->c[i];
}

/* Take [lo, hi) out of the given-back room: a chunk is carved there, or
 * mappings the trace does not show took it. */
static int forget(sim_t *s, uint64_t lo, uint64_t hi) {
  for (size_t i = reach_from(s, lo); i < s->nc; i++) {
    chunk_t *c = &s->c[i];
    if (c->addr >= hi) break; /* and so do all after it */
    if (!c->released || c->addr + c->size <= lo) continue;
    uint64_t a = c->addr, b = c->addr + c->size;
    if (!s->overlap && a < lo) { /* the low part stays: the chunk shrinks to it */
      given_shrink(s, c, a, lo - a);
    } else if (!s->overlap && hi < b) { /* the high part stays */
      given_shrink(s, c, hi, b - hi);
      continue; /* nothing of [lo, hi) is above it */
    } else {
      drop_chunk(s, c);
      if (a < lo && !add_chunk(s, a, lo - a, 0, 1, 0, 0)) return GM_ENOMEM;
    }
    if (hi < b && !add_chunk(s, hi, b - hi, 0, 1, 0, 0)) return GM_ENOMEM;
    i = reach_from(s, lo) - 1; /* the array moved: look again (from 0, i wraps to it) */
  }
  return GM_OK;
}

/* The driver's start-up layout, read from the first segment (at `at`,
 * `size` bytes): see the file comment. */
static int start(sim_t *s, uint64_t at, uint64_t size) {
  uint64_t region;
  s->started = 1;
  if (size <= SIM_ALIGN) region = at + SIM_HOLE_DOWN;
  else if (size <= SIM_REGION) region = at;
  else region = at + up(size, SIM_CHUNK) + SIM_REGION_UP;
  if (region < SIM_FLOOR + SIM_REGION_UP + SIM_CHUNK || region + SIM_REGION > SIM_TOP) {
    return GM_OK; /* a made-up address: no layout to read, chunks go below it */
  }
  /* the hole counts as carved after the region: a small request takes it
   * before the region's room */
  if (!add_chunk(s, region, SIM_REGION, 1, 0, 0, 0) || !add_chunk(s, region - SIM_HOLE_DOWN, SIM_ALIGN, 1, 0, 0, 0)) {
    return GM_ENOMEM;
  }
  s->ceiling = region - SIM_REGION_UP;
  s->hole = region - SIM_HOLE_DOWN;
  if (!s->no_kernels) s->range = region - SIM_REGION_UP;
  return GM_OK;
}

/* Open the start-up range (see the file comment) as a permanent chunk, unless
 * the recording already put a chunk there: its layout is another. When the
 * range opens at the program's first kernel (GM_SIM_KERNEL_SIGNAL) and no
 * segment holds the hole, the range and the hole are one empty chunk of the
 * driver's, [first chunk's top, hole's end), 416 MiB: it is given back, and
 * chunks are carved from its top down (rule 5), where a live hole keeps it a
 * gap filled bottom up. */
static int open_range(sim_t *s) {
  uint64_t at = s->range;
  s->range = 0;
  for (size_t i = 0; i < s->nc; i++)
    if (s->c[i].addr < at + SIM_RANGE && at < s->c[i].addr + s->c[i].size) return GM_OK;
  if (s->on_signal && s->hole == at + SIM_RANGE && !overlaps(s, s->hole, SIM_ALIGN)) {
    chunk_t *h = chunk_at(s, s->hole);
    if (h && h->permanent && h->live == 0) drop_chunk(s, h);
    if (!chunk_at(s, s->hole)) {
      if (!add_chunk(s, at, SIM_RANGE + SIM_ALIGN, 0, 1, 0, 0)) return GM_ENOMEM;
      s->ceiling = at + SIM_RANGE + SIM_ALIGN;
      return GM_OK;
    }
  }
  return add_chunk(s, at, SIM_RANGE, 1, 0, 0, 0) ? GM_OK : GM_ENOMEM;
}

/* Record an allocation at [at, at+size) in the chunk layout. */
static int note(sim_t *s, uint64_t at, uint64_t size) {
  chunk_t *c = chunk_at(s, at);
  if (!c || c->released) { /* a new chunk, over any given-back room it covers */
    uint64_t end = at + up(size, SIM_CHUNK);
    /* up to the lowest chunk in use above at */
    for (size_t i = chunk_from(s, at + 1); i < s->nc && s->c[i].addr < end; i++)
      if (!s->c[i].released) {
        end = s->c[i].addr;
        break;
      }
    if (end < at + size) end = at + size;
    if (forget(s, at, end) != GM_OK) return GM_ENOMEM;
    if (!add_chunk(s, at, end - at, 0, 0, 1, size)) return GM_ENOMEM;
    return s->range && !s->on_signal ? open_range(s) : GM_OK; /* the first chunk carved */
  } else if (at + size > c->addr + c->size) { /* the recording's block runs past its chunk */
    uint64_t end = c->addr + c->size;
    c->size = at + size - c->addr;
    room_sync(s, c);
    if (forget(s, end, at + size) != GM_OK) return GM_ENOMEM;
    if (!(c = chunk_at(s, at))) return GM_EBACKEND; /* forget moved the array */
    overlap_at(s, (size_t)(c - s->c)); /* over a chunk in use */
  }
  c->live++;
  c->used += size;
  room_sync(s, c);
  return GM_OK;
}

/* The smallest 2 MiB-aligned gap of n bytes in chunk c (the lowest of
 * equal ones), at its start, or 0. */
static uint64_t gap_in(const sim_t *s, const chunk_t *c, uint64_t n) {
  uint64_t at = c->addr, end = c->addr + c->size, best = 0, best_size = 0;
  for (size_t i = find(s, at);; i++) {
    uint64_t next = i < s->n && s->r[i].addr < end ? s->r[i].addr : end;
    if (next >= at + n && (!best || next - at < best_size)) best = at, best_size = next - at;
    if (next == end) break;
    at = up(s->r[i].addr + s->r[i].size, SIM_ALIGN);
  }
  return best;
}

/* A 2 MiB-aligned gap of n bytes inside a chunk in use, or 0: in the
 * chunk carved last among those that have one, the smallest such gap (the
 * lowest of equal ones), at its start. The room index gives the chunks
 * with free bytes enough, latest carved first. */
static uint64_t gap_fit(const sim_t *s, uint64_t n) {
  for (uint64_t k = room_last(s, n + 1, s->tcap); k; k = room_last(s, n + 1, k)) {
    const chunk_t *c = carved_chunk(s, k);
    uint64_t at = c ? gap_in(s, c, n) : 0;
    if (at) return at;
  }
  return 0;
}

/* gap_fit by a walk of every chunk, for gm_sim_check. */
static uint64_t gap_scan(const sim_t *s, uint64_t n) {
  uint64_t found = 0, when = 0;
  for (size_t k = 0; k < s->nc; k++) {
    const chunk_t *c = &s->c[k];
    if (c->released || c->size < n || c->size - n < c->used || c->carved < when) continue;
    uint64_t best = gap_in(s, c, n);
    if (best) found = best, when = c->carved;
  }
  return found;
}

/* The highest aligned gap of `size` bytes below SIM_TOP, or 0: the last
 * resort when the frontier runs into something. */
static uint64_t top_fit(const sim_t *s, uint64_t size, uint64_t align) {
  if (size > SIM_TOP - SIM_FLOOR) return 0;
  uint64_t at = (SIM_TOP - size) / align * align;
  for (size_t i = s->n; i-- > 0;) {
    const range_t *r = &s->r[i];
    if (r->addr >= at + size) continue;
    if (r->addr + r->size <= at) break;
    if (r->addr < SIM_FLOOR + size) return 0;
    at = (r->addr - size) / align * align;
  }
  return at >= SIM_FLOOR ? at : 0;
}

/* Where a new chunk of cs bytes goes, or 0: at the top of the highest run
 * of given-back chunks below the ceiling that is larger than cs (the driver
 * never fills such room exactly), else below the lowest chunk (the
 * frontier; a run of given-back chunks there is its top). Room the model
 * never saw given back may hold mappings the trace does not show: it is
 * not used, except below the lowest chunk: there the frontier moves back
 * up over room the recording passed over, as recordings show it reused
 * (oom_survive_resnet predicts 55 of 154 segments so, 48 with a frontier
 * that stays down). */
static uint64_t hole_fit(const sim_t *s, uint64_t cs) {
  /* the walk visits the given-back chunks only, from the highest below
   * the ceiling down, and of those only the ones the hole index holds
   * above cs (the runs of one chunk it passes over hold no new chunk);
   * chunks in use only end runs */
  size_t j = given_from(s, s->ceiling);
  uint64_t top = s->nc && s->c[0].addr < s->ceiling ? s->c[0].addr : s->ceiling;
  while (j > 0) {
    uint64_t next = holes_last(&s->holes, s->holes.root, s->g[j - 1].addr + 1, cs);
    if (!next) { /* none left but the lowest, a run of its own */
      if (s->c[0].released) top = s->g[0].addr + s->g[0].size;
      break;
    }
    j = given_from(s, next) + 1;
    uint64_t run_top = s->g[j - 1].addr + s->g[j - 1].size, run_low = s->g[j - 1].addr;
    /* the run goes on over a given-back neighbour next in the chunks */
    for (j--; j > 0 && s->g[j - 1].addr + s->g[j - 1].size == run_low &&
               given_index(s, s->g[j - 1].addr) + 1 == given_index(s, run_low);
         j--)
      run_low = s->g[j - 1].addr;
    if (j == 0 && s->c[0].released) { /* the lowest chunk's run: the frontier's top */
      top = run_top;
      break;
    }
    /* bounded below; a reservation may have been made in given-back room */
    if (run_top - run_low > cs && !overlaps(s, run_top - cs, cs)) return run_top - cs;
  }
  if (top < SIM_FLOOR + cs || overlaps(s, top - cs, cs)) return 0;
  return top - cs;
}

/* hole_fit by a walk of every chunk, for gm_sim_check. */
static uint64_t hole_scan(const sim_t *s, uint64_t cs) {
  uint64_t run_top = 0, run_low = 0, low = s->ceiling;
  for (size_t i = s->nc; i-- > 0;) {
    const chunk_t *c = &s->c[i];
    if (c->addr >= s->ceiling) continue; /* the start-up mappings' */
    if (c->released && run_top && c->addr + c->size == run_low) {
      run_low = c->addr; /* the run goes on */
    } else {
      /* bounded below; a reservation may have been made in given-back room */
      if (run_top && run_top - run_low > cs && !overlaps(s, run_top - cs, cs)) return run_top - cs;
      run_top = c->released ? c->addr + c->size : 0;
      run_low = c->addr;
    }
    low = c->addr;
  }
  uint64_t top = run_top ? run_top : low;
  if (top < SIM_FLOOR + cs || overlaps(s, top - cs, cs)) return 0;
  return top - cs;
}

/* Where the driver puts a cudaMalloc of size bytes. */
static uint64_t model(sim_t *s, uint64_t size) {
  uint64_t n = up(size, SIM_ALIGN);
  uint64_t at = gap_fit(s, n);
  if (at) return at;
  uint64_t cs = up(n, SIM_CHUNK);
  if (s->ceiling && (at = hole_fit(s, cs))) return at;
  return top_fit(s, cs, SIM_CHUNK);
}

static int sim_malloc(void *ctx, uint64_t size, uint64_t hint, uint64_t *addr) {
  sim_t *s = ctx;
  if (s->capacity && s->used + size > s->capacity) return GM_ENOMEM;
  size_t hi = hint ? find(s, hint) : 0; /* the ranges stay as they are until the insert */
  int usable = hint && hint % 512 == 0 && !(hi < s->n && s->r[hi].addr < hint + size);
  if (!s->started) {
    int rc = start(s, usable ? hint : SIM_TOP - 64 * SIM_CHUNK, size);
    if (rc != GM_OK) return rc;
  } else if (!usable || s->ignore) {
    s->diverged = 1;
  }
  if (!usable) s->diverged = 1;
  uint64_t at;
  if (s->diverged) {
    at = model(s, size);
  } else {
    at = hint;
    /* where the model would have put it, given the layout so far */
    uint64_t want = s->st.mallocs > 0 ? model(s, size) : hint;
    if (s->st.mallocs > 0 && want == hint) s->st.predicted++;
    /* a gap the recording passed over is taken in this process (by
     * mappings the trace does not show): the chunk ends there */
    chunk_t *c = want != hint ? chunk_at(s, want) : NULL;
    uint64_t cs = up(up(size, SIM_ALIGN), SIM_CHUNK);
    if (c && c->released) {
      /* given-back room the recording passed over: taken by mappings the
       * trace does not show */
      if ((hint + size <= want || hint >= want + cs) && forget(s, want, want + cs) != GM_OK) return GM_ENOMEM;
    } else if (c && !(hint >= c->addr && hint < c->addr + c->size)) {
      size_t i = find(s, want);
      if (i >= s->n || s->r[i].addr >= c->addr + c->size) { /* nothing live above */
        if (want == c->addr) drop_chunk(s, c);
        else {
          c->size = want - c->addr;
          room_sync(s, c);
        }
      }
    }
  }
  if (!at) return GM_ENOMEM; /* no address space left */
  int rc = insert_at(s, at == hint ? hi : find(s, at), at, size);
  if (rc != GM_OK) return rc;
  if ((rc = note(s, at, size)) != GM_OK) {
    erase(s, at); /* the call fails: leave no range behind */
    return rc;
  }
  *addr = at;
  s->used += size;
  if (s->diverged && s->st.modelled_from < 0) s->st.modelled_from = (int64_t)s->st.mallocs;
  s->st.mallocs++;
  if (hint) {
    s->st.hinted++;
    if (at == hint) s->st.matched++;
  }
  return GM_OK;
}

static int sim_free(void *ctx, uint64_t addr, uint64_t size) {
  sim_t *s = ctx;
  int rc = erase(s, addr);
  if (rc != GM_OK) return rc;
  s->used -= size;
  chunk_t *c = chunk_at(s, addr);
  if (!c || c->live == 0) return GM_OK;
  c->used -= size < c->used ? size : c->used;
  c->released = --c->live == 0 && !c->permanent;
  room_sync(s, c); /* once, for both */
  if (!c->released) return GM_OK;
  /* one entry per run of given-back room: merge with released neighbours */
  size_t i = (size_t)(c - s->c); /* by index: a drop moves pointers */
  if (!s->overlap && i > 0 && s->c[i - 1].released && s->c[i - 1].addr + s->c[i - 1].size == c->addr) {
    /* it joins the one below, and so does the one above if given back:
     * c itself never enters the given-back list */
    uint64_t grow = c->size;
    if (i + 1 < s->nc && s->c[i + 1].released && c->addr + c->size == s->c[i + 1].addr) {
      grow += s->c[i + 1].size;
      drop_chunk(s, &s->c[i + 1]);
    }
    s->c[i].released = 0; /* not in the given-back list: drop_chunk leaves it */
    drop_chunk(s, &s->c[i]);
    s->c[i - 1].size += grow;
    given_grew(s, &s->c[i - 1]);
    return GM_OK;
  }
  if (give(s, c) != GM_OK) return GM_ENOMEM;
  if (i + 1 < s->nc && s->c[i + 1].released && s->c[i].addr + s->c[i].size == s->c[i + 1].addr) {
    s->c[i].size += s->c[i + 1].size;
    drop_chunk(s, &s->c[i + 1]);
    given_grew(s, &s->c[i]);
  }
  if (i > 0 && s->c[i - 1].released && s->c[i - 1].addr + s->c[i - 1].size == s->c[i].addr) {
    s->c[i - 1].size += s->c[i].size;
    drop_chunk(s, &s->c[i]);
    given_grew(s, &s->c[i - 1]);
  }
  return GM_OK;
}

static int sim_va_reserve(void *ctx, uint64_t size, uint64_t page, uint64_t *addr) {
  sim_t *s = ctx;
  uint64_t align = page > SIM_CHUNK ? up(page, SIM_CHUNK) : SIM_CHUNK;
  uint64_t at = up(SIM_LOW, align);
  for (size_t i = find(s, at); i < s->n && s->r[i].addr < at + size; i = find(s, at))
    at = up(s->r[i].addr + s->r[i].size, align);
  if (at + size > SIM_TOP || overlaps(s, at, size)) return GM_ENOMEM;
  int rc = insert(s, at, size);
  if (rc == GM_OK) *addr = at;
  return rc;
}

static int sim_va_release(void *ctx, uint64_t addr, uint64_t size) {
  (void)size;
  return erase(ctx, addr);
}

static int sim_map(void *ctx, uint64_t addr, uint64_t size, uint64_t page) {
  sim_t *s = ctx;
  (void)addr;
  (void)page;
  if (s->capacity && s->used + size > s->capacity) return GM_ENOMEM;
  s->used += size;
  return GM_OK;
}

static int sim_unmap(void *ctx, uint64_t addr, uint64_t size, uint64_t page) {
  sim_t *s = ctx;
  (void)addr;
  (void)page;
  s->used -= size;
  return GM_OK;
}

static int sim_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total) {
  sim_t *s = ctx;
  uint64_t cap = s->capacity ? s->capacity : SIM_UNLIMITED;
  *total = cap;
  *free_bytes = cap > s->used ? cap - s->used : 0;
  return GM_OK;
}

static void sim_destroy(void *ctx) {
  sim_t *s = ctx;
  free(s->rbuf);
  free(s->cbuf);
  free(s->gbuf);
  free(s->room);
  free(s->cat);
  free(s->holes.n);
  free(s);
}

int gm_sim_backend_opts(uint64_t capacity, int flags, gm_backend_t *b) {
  sim_t *s = calloc(1, sizeof *s);
  if (!s) return GM_ENOMEM;
  s->capacity = capacity;
  s->ignore = (flags & GM_SIM_IGNORE_HINTS) != 0;
  s->no_kernels = (flags & GM_SIM_NO_KERNELS) != 0;
  s->on_signal = (flags & GM_SIM_KERNEL_SIGNAL) != 0;
  s->st.modelled_from = -1;
  b->ctx = s;
  b->malloc = sim_malloc;
  b->free = sim_free;
  b->va_reserve = sim_va_reserve;
  b->va_release = sim_va_release;
  b->map = sim_map;
  b->unmap = sim_unmap;
  b->mem_info = sim_mem_info;
  b->destroy = sim_destroy;
  b->error = NULL;
  return GM_OK;
}

int gm_sim_backend(uint64_t capacity, gm_backend_t *b) { return gm_sim_backend_opts(capacity, 0, b); }

int gm_sim_addressing(const gm_alloc_t *a, gm_sim_addressing_t *out) {
  const gm_backend_t *be = gm_devlog_inner(a); /* the simulator under a device log */
  if (be->malloc != sim_malloc) return GM_EINVAL;
  *out = ((const sim_t *)be->ctx)->st;
  return GM_OK;
}

int gm_sim_backend_kernels_started(const gm_backend_t *be) {
  if (be->malloc != sim_malloc) return GM_EINVAL;
  sim_t *s = be->ctx;
  if (!s->on_signal || !s->range) return GM_OK;
  return open_range(s);
}

int gm_sim_kernels_started(gm_alloc_t *a) { return gm_sim_backend_kernels_started(gm_devlog_inner(a)); }

int gm_sim_backend_tenant(const gm_backend_t *be, uint64_t size) {
  if (be->malloc != sim_malloc) return GM_EINVAL;
  sim_t *s = be->ctx;
  if (!s->started || !size) return GM_OK; /* no layout to place it in yet */
  uint64_t at = model(s, size);
  if (!at) return GM_OK; /* no address space left: the next malloc will say so */
  int rc = insert(s, at, size);
  if (rc != GM_OK) return rc;
  if ((rc = note(s, at, size)) != GM_OK) erase(s, at);
  return rc;
}

/* whether the hole index's k-th node (addr, key) is given-back chunk k's */
static int hole_ok(const void *ctx, size_t k, uint64_t addr, uint64_t key) {
  const sim_t *s = ctx;
  return k < s->ng && addr == s->g[k].addr && key == given_key_of(s, k);
}

int gm_sim_check(const gm_backend_t *be, char *msg, size_t len) {
  if (be->malloc != sim_malloc) return GM_OK;
  const sim_t *s = be->ctx;
  size_t in_use = 0, leaves = 0, given = 0;
  for (size_t i = 0; i < s->nc; i++) {
    const chunk_t *c = &s->c[i];
    if (!s->overlap && i > 0 && s->c[i - 1].addr + s->c[i - 1].size > c->addr) {
      snprintf(msg, len, "I7: the chunk at 0x%llx overlaps one below, not noted", (unsigned long long)c->addr);
      return GM_ECORRUPT;
    }
    if (c->carved == 0 || c->carved > s->carved || c->carved >= s->tcap ||
        s->room[s->tcap + c->carved] != room_of(c) || s->cat[c->carved] != c->addr || carved_chunk(s, c->carved) != c) {
      snprintf(msg, len, "I7: the room index is wrong for the chunk at 0x%llx", (unsigned long long)c->addr);
      return GM_ECORRUPT;
    }
    in_use += room_of(c) != 0;
    size_t j = given_from(s, c->addr);
    if (c->released && (j >= s->ng || s->g[j].addr != c->addr || s->g[j].size != c->size)) {
      snprintf(msg, len, "I7: the given-back chunk at 0x%llx is not in the given-back list", (unsigned long long)c->addr);
      return GM_ECORRUPT;
    }
    given += c->released;
  }
  for (size_t j = 1; j < s->tcap; j++) {
    uint64_t m = s->room[2 * j] > s->room[2 * j + 1] ? s->room[2 * j] : s->room[2 * j + 1];
    if (s->room[j] != m) {
      snprintf(msg, len, "I7: node %zu of the room index is not the larger of its children", j);
      return GM_ECORRUPT;
    }
    leaves += s->room[s->tcap + j] != 0;
  }
  if (s->tcap && s->room[s->tcap]) leaves++;
  if (leaves != in_use) {
    snprintf(msg, len, "I7: the room index has %zu leaves for %zu chunks with room", leaves, in_use);
    return GM_ECORRUPT;
  }
  if (given != s->ng) {
    snprintf(msg, len, "I7: the given-back list holds %zu chunks, %zu are given back", s->ng, given);
    return GM_ECORRUPT;
  }
  size_t k = 0;
  if (!holes_ok(&s->holes, s->holes.root, UINT32_MAX, &k, hole_ok, s) || k != s->ng) {
    snprintf(msg, len, "I7: the hole index does not hold the given-back chunks as it should (%zu of %zu in order)", k, s->ng);
    return GM_ECORRUPT;
  }
  for (uint64_t cs = SIM_CHUNK; s->ceiling && cs <= 32 * SIM_CHUNK; cs *= 2) {
    if (hole_fit(s, cs) != hole_scan(s, cs)) {
      snprintf(msg, len, "I7: the given-back list finds another place for %llu bytes than the walk", (unsigned long long)cs);
      return GM_ECORRUPT;
    }
  }
  for (uint64_t n = SIM_ALIGN; n <= 16 * SIM_CHUNK; n *= 2) {
    if (gap_fit(s, n) != gap_scan(s, n)) {
      snprintf(msg, len, "I7: the room index finds another gap of %llu bytes than the walk", (unsigned long long)n);
      return GM_ECORRUPT;
    }
  }
  return GM_OK;
}

int gm_sim_tenant(gm_alloc_t *a, uint64_t size) { return gm_sim_backend_tenant(gm_devlog_inner(a), size); }
