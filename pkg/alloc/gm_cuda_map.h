/* gm_cuda_map.h — the CUDA backend's address table (gm_cuda.c only): a
 * small open-addressing hash map from a device address to two words. */
#ifndef GM_CUDA_MAP_H
#define GM_CUDA_MAP_H

#include <stdint.h>
#include <stdlib.h>

/* Open addressing with linear probing and backward-shift deletion; key 0
 * marks an empty slot (the driver never hands out address 0). */
typedef struct {
  uint64_t key, a, b;
} gm__cu_ent_t;

typedef struct {
  gm__cu_ent_t *e;
  size_t cap, n; /* cap is 0 or a power of two */
} gm__cu_map_t;

static inline size_t gm__cu_slot(const gm__cu_map_t *m, uint64_t key) {
  return (size_t)(((key >> 9) * 0x9e3779b97f4a7c15ull) >> 17) & (m->cap - 1);
}

static inline gm__cu_ent_t *gm__cu_find(const gm__cu_map_t *m, uint64_t key) {
  if (m->cap == 0) return NULL;
  for (size_t i = gm__cu_slot(m, key);; i = (i + 1) & (m->cap - 1)) {
    if (m->e[i].key == key) return &m->e[i];
    if (m->e[i].key == 0) return NULL;
  }
}

static inline int gm__cu_grow(gm__cu_map_t *m) {
  size_t ncap = m->cap ? m->cap * 2 : 64;
  gm__cu_ent_t *ne = calloc(ncap, sizeof *ne);
  if (ne == NULL) return -1;
  gm__cu_map_t nm = {ne, ncap, 0};
  for (size_t i = 0; i < m->cap; i++) {
    if (m->e[i].key == 0) continue;
    size_t j = gm__cu_slot(&nm, m->e[i].key);
    while (ne[j].key != 0) j = (j + 1) & (ncap - 1);
    ne[j] = m->e[i];
    nm.n++;
  }
  free(m->e);
  *m = nm;
  return 0;
}

/* pre: key absent, key != 0. Returns -1 when out of host memory. */
static inline int gm__cu_put(gm__cu_map_t *m, uint64_t key, uint64_t a, uint64_t b) {
  if ((m->n + 1) * 2 > m->cap && gm__cu_grow(m) != 0) return -1;
  size_t i = gm__cu_slot(m, key);
  while (m->e[i].key != 0) i = (i + 1) & (m->cap - 1);
  m->e[i] = (gm__cu_ent_t){key, a, b};
  m->n++;
  return 0;
}

static inline void gm__cu_del(gm__cu_map_t *m, gm__cu_ent_t *ent) {
  size_t mask = m->cap - 1, i = (size_t)(ent - m->e);
  /* Shift later members of the probe run back so lookups need no tombstones. */
  for (size_t j = (i + 1) & mask; m->e[j].key != 0; j = (j + 1) & mask) {
    size_t home = gm__cu_slot(m, m->e[j].key);
    /* Move e[j] into the hole at i unless its home lies cyclically in (i, j]. */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      m->e[i] = m->e[j];
      i = j;
    }
  }
  m->e[i].key = 0;
  m->n--;
}

#endif
