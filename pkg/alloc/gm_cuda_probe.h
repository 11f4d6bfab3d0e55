/* gm_cuda_probe.h — what the Go tests of the CUDA backend (cuda_test.go,
 * through cuda_probe.go) look at inside it. Not part of the public API. */
#ifndef GM_CUDA_PROBE_H
#define GM_CUDA_PROBE_H

#include "gm_alloc.h"

/* The backend context's bookkeeping and last error. */
typedef struct gm_cuda_probe {
  uint64_t gran;              /* cuMemCreate granularity; 0 = no VMM */
  size_t segs, resv, pages;   /* live segments, reservations, mapped pages */
  const char *err;            /* the last failure's message */
} gm_cuda_probe_t;

void gm_cuda_probe(const void *ctx, gm_cuda_probe_t *out);

/* The device address behind addr, an address the backend handed out (the
 * simulated device's model; see gm_cuda.c, Placement); addr itself if it is
 * none of them. */
uint64_t gm_cuda_probe_device_addr(const void *ctx, uint64_t addr);

/* Fill [p, p+n) with v on the device and read back the first and last byte
 * of every `stride` bytes: 1 if all read v, 0 if not, -1 if the driver
 * lacks cuMemsetD8_v2/cuMemcpyDtoH_v2/cuCtxSynchronize. */
int gm_cuda_probe_touch(uint64_t p, uint64_t n, uint64_t stride, unsigned char v);

/* malloc and free `size` bytes from a new OS thread, which has no current
 * CUDA context; the first failing call's result, or GM_OK. */
int gm_cuda_probe_other_thread(const gm_backend_t *b, uint64_t size);

/* The backend's address table, alone: new, put (pre: key absent, != 0),
 * get (1 if present, its first word to *val), del (1 if it was present),
 * size, free. */
void *gm_cuda_probe_table_new(void);
int gm_cuda_probe_table_put(void *t, uint64_t key, uint64_t val);
int gm_cuda_probe_table_get(void *t, uint64_t key, uint64_t *val);
int gm_cuda_probe_table_del(void *t, uint64_t key);
size_t gm_cuda_probe_table_len(void *t);
void gm_cuda_probe_table_free(void *t);

#endif
