/* cuda_backend_test.c — checks gm_cuda.c against a real driver.
 *
 *   gcc -Wall -Wextra -O2 -o /tmp/cbt scripts/cuda_backend_test.c -ldl -lpthread && /tmp/cbt [device]
 *
 * Without a driver or device it checks that the backend refuses cleanly
 * (GM_EBACKEND, a NUL-terminated message, truncation honoured) and reports
 * the rest as skipped. With one it exercises every backend entry point and
 * checks the device's own accounting (cuMemGetInfo) and the memory's
 * contents. Ends with "N passed, N failed"; exit status 1 on any failure.
 */
#define _GNU_SOURCE
#include "../pkg/alloc/gm_alloc.h"
#include "../pkg/alloc/gm_cuda.c"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int passed, failed;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (cond) {                                            \
      passed++;                                            \
    } else {                                               \
      failed++;                                            \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                 \
      printf("\n");                                        \
    }                                                      \
  } while (0)

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)
/* What cuMemGetInfo may show beyond our own memory after everything is
 * returned (driver page tables, rounding): less than one leaked 2 MiB page
 * would be missed, any larger leak is caught. */
#define SLACK (4 * MiB)

/* Extra driver calls the backend does not need, to touch the memory. */
static gm__CUresult (*cuMemsetD8)(gm__CUdeviceptr, unsigned char, size_t);
static gm__CUresult (*cuMemcpyDtoH)(void *, gm__CUdeviceptr, size_t);
static gm__CUresult (*cuCtxSynchronize)(void);

static const char *lasterr(const gm_backend_t *b) { return ((const gm__cuda_t *)b->ctx)->err; }

static uint64_t used(const gm_backend_t *b) {
  uint64_t f = 0, t = 0;
  int rc = b->mem_info(b->ctx, &f, &t);
  CHECK(rc == GM_OK && t > 0 && f <= t, "mem_info rc=%d free=%llu total=%llu (%s)", rc,
        (unsigned long long)f, (unsigned long long)t, lasterr(b));
  return t - f;
}

static uint64_t total(const gm_backend_t *b) {
  uint64_t f = 0, t = 0;
  b->mem_info(b->ctx, &f, &t);
  return t;
}

/* Fills [p, p+n) with v and reads back the first and last byte of every
 * `stride` bytes: proves the range is mapped read/write for the device. */
static int touch(uint64_t p, uint64_t n, uint64_t stride, unsigned char v) {
  if (cuMemsetD8((gm__CUdeviceptr)p, v, (size_t)n) != 0 || cuCtxSynchronize() != 0) return 0;
  for (uint64_t off = 0; off < n; off += stride) {
    unsigned char a = 0, z = 0;
    if (cuMemcpyDtoH(&a, (gm__CUdeviceptr)(p + off), 1) != 0) return 0;
    if (cuMemcpyDtoH(&z, (gm__CUdeviceptr)(p + off + stride - 1), 1) != 0) return 0;
    if (a != v || z != v) return 0;
  }
  return 1;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The address table against a plain array, through growth and the
 * backward-shift deletions; needs no driver. */
static void test_map(void) {
  enum { N = 5000 };
  static uint64_t ref[N]; /* ref[i]: 1 + value of key (i+1)<<21, or 0 */
  gm__cu_map_t m = {0};
  uint64_t seed = 42, ops = 0;
  int bad = 0;
  for (int round = 0; round < 200000; round++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    size_t i = (size_t)((seed >> 33) % N);
    uint64_t key = (uint64_t)(i + 1) << 21;
    gm__cu_ent_t *e = gm__cu_find(&m, key);
    if ((e != NULL) != (ref[i] != 0) || (e != NULL && e->a != ref[i] - 1)) bad++;
    if (e != NULL && (seed >> 20) % 3 != 0) {
      gm__cu_del(&m, e);
      ref[i] = 0;
    } else if (e == NULL) {
      if (gm__cu_put(&m, key, seed, 0) != 0) bad++;
      ref[i] = seed + 1;
    }
    ops++;
  }
  size_t live = 0;
  for (int i = 0; i < N; i++) live += ref[i] != 0;
  CHECK(bad == 0 && m.n == live, "%d mismatches, n=%zu live=%zu", bad, m.n, live);
  free(m.e);
  printf("address table: %llu random operations agree with the reference\n", (unsigned long long)ops);
}

static void test_unavailable(void) {
  gm_backend_t b;
  char err[256], small[8];
  int rc = gm_cuda_backend(0, &b, err, sizeof err);
  printf("cuda backend unavailable: %s\n", err);
  CHECK(rc == GM_EBACKEND, "rc=%d", rc);
  CHECK(err[0] != '\0' && strlen(err) < sizeof err, "empty message");
  memset(small, 'x', sizeof small);
  rc = gm_cuda_backend(0, &b, small, sizeof small);
  CHECK(rc == GM_EBACKEND && memchr(small, '\0', sizeof small) != NULL,
        "truncated message not NUL terminated");
  CHECK(strncmp(small, err, strlen(small)) == 0, "truncated message differs: %s", small);
  rc = gm_cuda_backend(0, &b, NULL, 0);
  CHECK(rc == GM_EBACKEND, "rc=%d with no message buffer", rc);
}

static void test_malloc_free(gm_backend_t *b) {
  static const uint64_t sizes[] = {512, MiB, 2 * MiB + 512, 20 * MiB, GiB};
  enum { N = sizeof sizes / sizeof sizes[0] };
  uint64_t addr[N] = {0}, sum = 0;
  uint64_t u0 = used(b);
  for (int i = 0; i < N; i++) {
    /* The hint is ignored: any value must work. */
    int rc = b->malloc(b->ctx, sizes[i], i ? 0x7f0000000000ull : 0, &addr[i]);
    CHECK(rc == GM_OK && addr[i] != 0, "malloc(%llu) rc=%d (%s)", (unsigned long long)sizes[i], rc,
          lasterr(b));
    sum += sizes[i];
  }
  for (int i = 0; i < N; i++)
    for (int j = 0; j < i; j++)
      CHECK(addr[i] + sizes[i] <= addr[j] || addr[j] + sizes[j] <= addr[i], "segments %d and %d overlap", i, j);
  uint64_t u1 = used(b);
  CHECK(u1 >= u0 + sum, "used grew by %llu, want >= %llu", (unsigned long long)(u1 - u0),
        (unsigned long long)sum);
  for (int i = 0; i < N; i++)
    CHECK(touch(addr[i], sizes[i], sizes[i], (unsigned char)(0x11 * (i + 1))), "segment %d not usable", i);
  for (int i = 0; i < N; i++) {
    int rc = b->free(b->ctx, addr[i], sizes[i]);
    CHECK(rc == GM_OK, "free(%d) rc=%d (%s)", i, rc, lasterr(b));
  }
  uint64_t u2 = used(b);
  CHECK(u2 <= u0 + SLACK, "after free used=%llu, before=%llu", (unsigned long long)u2,
        (unsigned long long)u0);
  int rc = b->free(b->ctx, addr[0], sizes[0]);
  CHECK(rc == GM_EBACKEND && strstr(lasterr(b), "did not return") != NULL, "double free rc=%d (%s)", rc,
        lasterr(b));
  rc = b->free(b->ctx, 0x1000, 512);
  CHECK(rc == GM_EBACKEND, "free of unknown address rc=%d", rc);
  printf("malloc/free: 5 sizes (%llu bytes) used +%llu, back to +%lld\n", (unsigned long long)sum,
         (unsigned long long)(u1 - u0), (long long)(u2 - u0));
}

static void test_vmm(gm_backend_t *b) {
  const gm__cuda_t *c = b->ctx;
  uint64_t page = c->gran;
  CHECK(page > 0 && page % 512 == 0, "granularity %llu", (unsigned long long)page);
  if (page == 0) return;
  printf("granularity: %llu bytes\n", (unsigned long long)page);
  uint64_t u0 = used(b), va = 0;
  int rc = b->va_reserve(b->ctx, 8 * page, page, &va);
  CHECK(rc == GM_OK && va % page == 0, "va_reserve rc=%d va=0x%llx (%s)", rc, (unsigned long long)va,
        lasterr(b));
  if (rc != GM_OK) return;
  CHECK(used(b) <= u0 + SLACK, "a reservation uses memory");
  if (page >= 1024) {
    rc = b->map(b->ctx, va, page, page / 2);
    CHECK(rc == GM_EBACKEND && strstr(lasterr(b), "granularity") != NULL, "half-granularity page rc=%d (%s)",
          rc, lasterr(b));
  }
  rc = b->map(b->ctx, va + 512, page, page);
  CHECK(rc == GM_EBACKEND, "misaligned map rc=%d", rc);
  rc = b->map(b->ctx, va + 6 * page, 4 * page, page);
  CHECK(rc == GM_EBACKEND && strstr(lasterr(b), "outside") != NULL, "map past the reservation rc=%d (%s)", rc,
        lasterr(b));

  uint64_t at = va + 2 * page;
  rc = b->map(b->ctx, at, 3 * page, page);
  CHECK(rc == GM_OK, "map 3 pages rc=%d (%s)", rc, lasterr(b));
  CHECK(c->pages.n == 3, "page table holds %zu", c->pages.n);
  uint64_t u1 = used(b);
  CHECK(u1 >= u0 + 3 * page, "map: used grew by %llu", (unsigned long long)(u1 - u0));
  CHECK(touch(at, 3 * page, page, 0xab), "mapped pages not read/write");
  rc = b->map(b->ctx, va + 3 * page, page, page);
  CHECK(rc == GM_EBACKEND && strstr(lasterr(b), "already mapped") != NULL, "double map rc=%d", rc);
  CHECK(c->pages.n == 3 && touch(at, 3 * page, page, 0xcd), "failed map disturbed the mapping");

  /* Unmap the middle page alone, then the rest. */
  rc = b->unmap(b->ctx, at + page, page, page);
  CHECK(rc == GM_OK && c->pages.n == 2, "unmap middle rc=%d (%s)", rc, lasterr(b));
  CHECK(touch(at, page, page, 0x5a) && touch(at + 2 * page, page, page, 0x5b), "neighbours lost");
  rc = b->unmap(b->ctx, at, 3 * page, page);
  CHECK(rc == GM_EBACKEND && strstr(lasterr(b), "not mapped") != NULL && c->pages.n == 2,
        "unmap over a hole rc=%d (%s)", rc, lasterr(b));
  CHECK(b->unmap(b->ctx, at, page, page) == GM_OK, "unmap first (%s)", lasterr(b));
  CHECK(b->unmap(b->ctx, at + 2 * page, page, page) == GM_OK, "unmap last (%s)", lasterr(b));
  CHECK(c->pages.n == 0, "page table holds %zu", c->pages.n);
  uint64_t u2 = used(b);
  CHECK(u2 <= u0 + SLACK, "unmap: used %llu over baseline", (unsigned long long)(u2 - u0));
  rc = b->va_release(b->ctx, va, 8 * page);
  CHECK(rc == GM_OK && c->resv.n == 0, "va_release rc=%d (%s)", rc, lasterr(b));
  rc = b->va_release(b->ctx, va, 8 * page);
  CHECK(rc == GM_EBACKEND, "double va_release rc=%d", rc);

  /* Pages of several granules; release with pages still mapped. */
  uint64_t big = 4 * page;
  rc = b->va_reserve(b->ctx, 4 * big, big, &va);
  CHECK(rc == GM_OK, "va_reserve big rc=%d (%s)", rc, lasterr(b));
  if (rc == GM_OK) {
    rc = b->map(b->ctx, va + big, 2 * big, big);
    CHECK(rc == GM_OK && touch(va + big, 2 * big, big, 0x77), "map big pages rc=%d (%s)", rc, lasterr(b));
    CHECK(used(b) >= u0 + 2 * big, "big pages not counted");
    rc = b->va_release(b->ctx, va, 4 * big);
    CHECK(rc == GM_OK && c->pages.n == 0, "va_release with mapped pages rc=%d (%s)", rc, lasterr(b));
    uint64_t u3 = used(b);
    CHECK(u3 <= u0 + SLACK, "va_release left %llu bytes", (unsigned long long)(u3 - u0));
  }
  printf("vmm: 3 pages used +%llu, after unmap +%lld\n", (unsigned long long)(u1 - u0),
         (long long)(u2 - u0));
}

static void test_oom(gm_backend_t *b) {
  const gm__cuda_t *c = b->ctx;
  uint64_t u0 = used(b), t = total(b), a = 0;
  int rc = b->malloc(b->ctx, t + 2 * MiB, 0, &a);
  CHECK(rc == GM_ENOMEM, "malloc over total rc=%d (%s)", rc, lasterr(b));
  printf("oom malloc: %s\n", lasterr(b));
  CHECK(c->segs.n == 0, "failed malloc recorded a segment");
  rc = b->malloc(b->ctx, MiB, 0, &a);
  CHECK(rc == GM_OK, "malloc after oom rc=%d (%s)", rc, lasterr(b));
  if (rc == GM_OK) CHECK(b->free(b->ctx, a, MiB) == GM_OK, "free after oom");

  /* Map more than the card holds, in 1 GiB pages: the map must fail with
   * GM_ENOMEM and leave nothing mapped. */
  if (c->gran == 0 || GiB % c->gran != 0) return;
  uint64_t n = t / GiB + 2, va = 0;
  rc = b->va_reserve(b->ctx, n * GiB, GiB, &va);
  CHECK(rc == GM_OK, "va_reserve %llu GiB rc=%d (%s)", (unsigned long long)n, rc, lasterr(b));
  if (rc != GM_OK) return;
  double t0 = now_ns();
  rc = b->map(b->ctx, va, n * GiB, GiB);
  double dt = now_ns() - t0;
  CHECK(rc == GM_ENOMEM, "map over total rc=%d (%s)", rc, lasterr(b));
  printf("oom map: %s (%.0f ms)\n", lasterr(b), dt / 1e6);
  CHECK(c->pages.n == 0, "failed map left %zu pages", c->pages.n);
  uint64_t u1 = used(b);
  CHECK(u1 <= u0 + SLACK, "failed map left %llu bytes in use", (unsigned long long)(u1 - u0));
  CHECK(b->map(b->ctx, va, GiB, GiB) == GM_OK, "map after oom (%s)", lasterr(b));
  CHECK(b->va_release(b->ctx, va, n * GiB) == GM_OK, "va_release (%s)", lasterr(b));
}

/* A fresh OS thread has no current context: the backend must set it. */
static void *thread_body(void *arg) {
  gm_backend_t *b = arg;
  uint64_t a = 0;
  int rc = b->malloc(b->ctx, 4 * MiB, 0, &a);
  CHECK(rc == GM_OK, "malloc from another thread rc=%d (%s)", rc, lasterr(b));
  if (rc == GM_OK) CHECK(b->free(b->ctx, a, 4 * MiB) == GM_OK, "free from another thread (%s)", lasterr(b));
  used(b);
  return NULL;
}

static void test_threads(gm_backend_t *b) {
  pthread_t th;
  CHECK(pthread_create(&th, NULL, thread_body, b) == 0, "pthread_create");
  pthread_join(th, NULL);
}

static void test_destroy(int dev, uint64_t base) {
  gm_backend_t b1, b2;
  char err[256];
  CHECK(gm_cuda_backend(dev, &b1, err, sizeof err) == GM_OK, "%s", err);
  /* b2 keeps the primary context alive, so what b1 leaves behind would show. */
  CHECK(gm_cuda_backend(dev, &b2, err, sizeof err) == GM_OK, "%s", err);
  uint64_t u0 = used(&b2), a = 0, va = 0, page = ((gm__cuda_t *)b1.ctx)->gran;
  CHECK(b1.malloc(b1.ctx, 4 * GiB, 0, &a) == GM_OK, "malloc 4 GiB (%s)", lasterr(&b1));
  CHECK(b1.malloc(b1.ctx, 512, 0, &a) == GM_OK, "malloc 512 (%s)", lasterr(&b1));
  CHECK(b1.va_reserve(b1.ctx, 64 * page, page, &va) == GM_OK, "va_reserve (%s)", lasterr(&b1));
  CHECK(b1.map(b1.ctx, va + 10 * page, 5 * page, page) == GM_OK, "map (%s)", lasterr(&b1));
  CHECK(b1.va_reserve(b1.ctx, 64 * page, page, &va) == GM_OK, "va_reserve (%s)", lasterr(&b1));
  uint64_t u1 = used(&b2);
  CHECK(u1 >= u0 + 4 * GiB + 5 * page, "live memory not visible: +%llu", (unsigned long long)(u1 - u0));
  b1.destroy(b1.ctx);
  uint64_t u2 = used(&b2);
  CHECK(u2 <= u0 + SLACK, "destroy left %llu bytes", (unsigned long long)(u2 - u0));
  b2.destroy(b2.ctx);
  /* A fresh backend (and a fresh primary context) sees the first baseline. */
  gm_backend_t b3;
  CHECK(gm_cuda_backend(dev, &b3, err, sizeof err) == GM_OK, "%s", err);
  uint64_t u3 = used(&b3);
  CHECK(u3 <= base + 4 * SLACK, "fresh backend sees %llu bytes over the baseline",
        (unsigned long long)(u3 - base));
  printf("destroy: live +%llu, after destroy +%lld, fresh backend %+lld vs baseline\n",
         (unsigned long long)(u1 - u0), (long long)(u2 - u0), (long long)(u3 - base));
  b3.destroy(b3.ctx);
}

static void bench(gm_backend_t *b) {
  enum { N = 2000 };
  static uint64_t a[N];
  static const uint64_t sizes[] = {2 * MiB, 20 * MiB};
  for (size_t s = 0; s < 2; s++) {
    double t0 = now_ns();
    for (int i = 0; i < N; i++) b->malloc(b->ctx, sizes[s], 0, &a[i]);
    double t1 = now_ns();
    for (int i = 0; i < N; i++) b->free(b->ctx, a[i], sizes[s]);
    double t2 = now_ns();
    printf("bench: malloc %llu MiB %.0f ns, free %.0f ns\n", (unsigned long long)(sizes[s] / MiB),
           (t1 - t0) / N, (t2 - t1) / N);
  }
  const gm__cuda_t *c = b->ctx;
  uint64_t page = c->gran ? c->gran : 2 * MiB, va = 0;
  if (c->gran && b->va_reserve(b->ctx, N * page, page, &va) == GM_OK) {
    double t0 = now_ns();
    int rc = b->map(b->ctx, va, N * page, page);
    double t1 = now_ns();
    if (rc == GM_OK) b->unmap(b->ctx, va, N * page, page);
    double t2 = now_ns();
    printf("bench: map %d pages %.0f ns/page, unmap %.0f ns/page (rc=%d)\n", N, (t1 - t0) / N,
           (t2 - t1) / N, rc);
    b->va_release(b->ctx, va, N * page);
  }
}

int main(int argc, char **argv) {
  int dev = argc > 1 ? atoi(argv[1]) : 0;
  gm_backend_t b;
  char err[256];
  test_map();
  int rc = gm_cuda_backend(dev, &b, err, sizeof err);
  if (rc != GM_OK) {
    test_unavailable();
    printf("%d passed, %d failed (no usable driver: device tests skipped)\n", passed, failed);
    return failed ? 1 : 0;
  }
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  void *p1 = h ? dlsym(h, "cuMemsetD8_v2") : NULL, *p2 = h ? dlsym(h, "cuMemcpyDtoH_v2") : NULL,
       *p3 = h ? dlsym(h, "cuCtxSynchronize") : NULL;
  memcpy(&cuMemsetD8, &p1, sizeof p1);
  memcpy(&cuMemcpyDtoH, &p2, sizeof p2);
  memcpy(&cuCtxSynchronize, &p3, sizeof p3);
  if (!cuMemsetD8 || !cuMemcpyDtoH || !cuCtxSynchronize) {
    printf("libcuda.so.1 lacks cuMemsetD8_v2/cuMemcpyDtoH_v2/cuCtxSynchronize\n");
    return 1;
  }
  gm_backend_t bad;
  rc = gm_cuda_backend(999, &bad, err, sizeof err);
  CHECK(rc == GM_EBACKEND && strstr(err, "not found") != NULL, "device 999 rc=%d (%s)", rc, err);
  printf("device 999: %s\n", err);
  rc = gm_cuda_backend(-1, &bad, err, sizeof err);
  CHECK(rc == GM_EBACKEND, "device -1 rc=%d", rc);

  uint64_t base = used(&b);
  printf("device %d: total %llu bytes, used at start %llu\n", dev, (unsigned long long)total(&b),
         (unsigned long long)base);
  test_malloc_free(&b);
  test_vmm(&b);
  test_oom(&b);
  test_threads(&b);
  bench(&b);
  b.destroy(b.ctx);
  test_destroy(dev, base);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
