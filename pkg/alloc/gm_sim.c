/* gm_sim.c — the simulated device: deterministic, pure C, no GPU.
 *
 * It counts the bytes in use against an optional capacity and hands out
 * addresses. Addresses matter because best fit breaks ties between
 * equal-size free blocks by address, so the simulator models them:
 *
 *   - while a replay follows its recording, every cudaMalloc comes with a
 *     hint (the address the recording got at that point) and the hint is
 *     used: the replay sees the real addresses;
 *   - once a cudaMalloc comes without a hint, or with one that is taken, the
 *     replay has left the recording and hints are ignored from then on;
 *   - otherwise addresses come top down, the highest free 2 MiB-aligned
 *     range below SIM_TOP, as the CUDA driver's allocations tend to. This
 *     model reproduced PyTorch's peaks on every shared fixture replayed
 *     under settings other than the recorded ones, where a bottom-up model
 *     did not. */
#include <stdlib.h>
#include <string.h>

#include "gm_internal.h"

#define SIM_TOP 0x7fff00000000ull
#define SIM_FLOOR 0x100000000ull /* the address space is [SIM_FLOOR, SIM_TOP) */
#define SIM_ALIGN 2097152ull
#define SIM_UNLIMITED (1ull << 40) /* what an unlimited device reports: 1 TiB */

typedef struct range {
  uint64_t addr, size;
} range_t;

typedef struct sim {
  uint64_t capacity, used;
  range_t *r; /* live address ranges, sorted by address */
  size_t n, cap;
  int diverged; /* hints no longer describe this run */
} sim_t;

/* index of the first range whose end is above addr */
static size_t find(const sim_t *s, uint64_t addr) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->r[mid].addr + s->r[mid].size <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int overlaps(const sim_t *s, uint64_t addr, uint64_t size) {
  size_t i = find(s, addr);
  return i < s->n && s->r[i].addr < addr + size;
}

static int insert(sim_t *s, uint64_t addr, uint64_t size) {
  if (s->n == s->cap) {
    size_t c = s->cap ? s->cap * 2 : 64;
    range_t *r = realloc(s->r, c * sizeof *r);
    if (!r) return GM_ENOMEM;
    s->r = r;
    s->cap = c;
  }
  size_t i = find(s, addr);
  memmove(s->r + i + 1, s->r + i, (s->n - i) * sizeof *s->r);
  s->r[i].addr = addr;
  s->r[i].size = size;
  s->n++;
  return GM_OK;
}

static int erase(sim_t *s, uint64_t addr) {
  size_t i = find(s, addr);
  if (i >= s->n || s->r[i].addr != addr) return GM_EBACKEND;
  memmove(s->r + i, s->r + i + 1, (s->n - i - 1) * sizeof *s->r);
  s->n--;
  return GM_OK;
}

/* the highest aligned gap of `size` bytes below SIM_TOP, or 0 when the
 * address space has none */
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

static int place(sim_t *s, uint64_t size, uint64_t hint, uint64_t align, uint64_t *addr) {
  if (!hint || hint % 512 || overlaps(s, hint, size)) s->diverged = 1;
  uint64_t at = s->diverged ? top_fit(s, size, align) : hint;
  if (!at) return GM_ENOMEM; /* no address space left */
  int rc = insert(s, at, size);
  if (rc == GM_OK) *addr = at;
  return rc;
}

static int sim_malloc(void *ctx, uint64_t size, uint64_t hint, uint64_t *addr) {
  sim_t *s = ctx;
  if (s->capacity && s->used + size > s->capacity) return GM_ENOMEM;
  int rc = place(s, size, hint, SIM_ALIGN, addr);
  if (rc == GM_OK) s->used += size;
  return rc;
}

static int sim_free(void *ctx, uint64_t addr, uint64_t size) {
  sim_t *s = ctx;
  int rc = erase(s, addr);
  if (rc == GM_OK) s->used -= size;
  return rc;
}

static int sim_va_reserve(void *ctx, uint64_t size, uint64_t page, uint64_t *addr) {
  sim_t *s = ctx;
  uint64_t align = page > SIM_ALIGN ? page : SIM_ALIGN;
  uint64_t at = top_fit(s, size, align);
  if (!at) return GM_ENOMEM;
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
  free(s->r);
  free(s);
}

int gm_sim_backend(uint64_t capacity, gm_backend_t *b) {
  sim_t *s = calloc(1, sizeof *s);
  if (!s) return GM_ENOMEM;
  s->capacity = capacity;
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
