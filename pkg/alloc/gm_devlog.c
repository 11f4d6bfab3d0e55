/* gm_devlog.c — the device-call log (see gm_devlog.h).
 *
 * The decorator takes the allocator's backend's place and forwards every
 * call to it. The op an event belongs to is counted from the last
 * gm_devlog_at: gm_run stops at the first op that fails, so while it runs
 * the op in progress is `at` plus the ops applied since (ex.ops), and the
 * release steps of a failing allocation land on that allocation. */
#include <stdlib.h>

#include "gm_devlog.h"
#include "gm_internal.h"

typedef struct devlog {
  gm_backend_t inner;
  const gm_alloc_t *a;
  uint64_t at;  /* the op index given by the last gm_devlog_at */
  uint64_t ops0; /* ex.ops then */
  gm_devlog_event_t *ev;
  size_t n, cap;
} devlog_t;

static uint64_t op_now(const devlog_t *l) { return l->at + (l->a->ex.ops - l->ops0); }

/* record drops the event when memory runs out: the log is a diagnosis and
 * must not turn a replay into a failure. */
static void record(devlog_t *l, uint32_t kind, uint64_t addr, uint64_t size) {
  if (l->n == l->cap) {
    size_t c = l->cap ? l->cap * 2 : 256;
    gm_devlog_event_t *ev = realloc(l->ev, c * sizeof *ev);
    if (!ev) return;
    l->ev = ev;
    l->cap = c;
  }
  l->ev[l->n++] = (gm_devlog_event_t){.op = op_now(l), .addr = addr, .size = size, .kind = kind};
}

static int dl_malloc(void *ctx, uint64_t size, uint64_t hint, uint64_t *addr) {
  devlog_t *l = ctx;
  int rc = l->inner.malloc(l->inner.ctx, size, hint, addr);
  if (rc == GM_OK) record(l, GM_DEV_MALLOC, *addr, size);
  return rc;
}

static int dl_free(void *ctx, uint64_t addr, uint64_t size) {
  devlog_t *l = ctx;
  int rc = l->inner.free(l->inner.ctx, addr, size);
  if (rc == GM_OK) record(l, GM_DEV_FREE, addr, size);
  return rc;
}

static int dl_va_reserve(void *ctx, uint64_t size, uint64_t page, uint64_t *addr) {
  devlog_t *l = ctx;
  return l->inner.va_reserve(l->inner.ctx, size, page, addr);
}

static int dl_va_release(void *ctx, uint64_t addr, uint64_t size) {
  devlog_t *l = ctx;
  return l->inner.va_release(l->inner.ctx, addr, size);
}

static int dl_map(void *ctx, uint64_t addr, uint64_t size, uint64_t page) {
  devlog_t *l = ctx;
  int rc = l->inner.map(l->inner.ctx, addr, size, page);
  if (rc == GM_OK) record(l, GM_DEV_MAP, addr, size);
  return rc;
}

static int dl_unmap(void *ctx, uint64_t addr, uint64_t size, uint64_t page) {
  devlog_t *l = ctx;
  int rc = l->inner.unmap(l->inner.ctx, addr, size, page);
  if (rc == GM_OK) record(l, GM_DEV_UNMAP, addr, size);
  return rc;
}

static int dl_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
  devlog_t *l = ctx;
  return l->inner.mem_info(l->inner.ctx, free_bytes, total_bytes);
}

static void dl_destroy(void *ctx) {
  devlog_t *l = ctx;
  if (l->inner.destroy) l->inner.destroy(l->inner.ctx);
  free(l->ev);
  free(l);
}

static const char *dl_error(void *ctx) {
  devlog_t *l = ctx;
  return l->inner.error ? l->inner.error(l->inner.ctx) : NULL;
}

int gm_devlog_start(gm_alloc_t *a) {
  if (a->be.malloc == dl_malloc) return GM_OK;
  devlog_t *l = calloc(1, sizeof *l);
  if (!l) return GM_ENOMEM;
  l->inner = a->be;
  l->a = a;
  l->ops0 = a->ex.ops;
  a->be = (gm_backend_t){.ctx = l, .malloc = dl_malloc, .free = dl_free,
                         .va_reserve = dl_va_reserve, .va_release = dl_va_release,
                         .map = dl_map, .unmap = dl_unmap, .mem_info = dl_mem_info,
                         .destroy = dl_destroy, .error = dl_error};
  /* keep the inner backend's optional entries optional */
  if (!l->inner.va_reserve) a->be.va_reserve = NULL;
  if (!l->inner.va_release) a->be.va_release = NULL;
  if (!l->inner.map) a->be.map = NULL;
  if (!l->inner.unmap) a->be.unmap = NULL;
  if (!l->inner.mem_info) a->be.mem_info = NULL;
  return GM_OK;
}

size_t gm_devlog_events(const gm_alloc_t *a, const gm_devlog_event_t **ev) {
  if (a->be.malloc != dl_malloc) {
    *ev = NULL;
    return 0;
  }
  const devlog_t *l = a->be.ctx;
  *ev = l->ev;
  return l->n;
}

void gm_devlog_at(gm_alloc_t *a, uint64_t op) {
  if (a->be.malloc != dl_malloc) return;
  devlog_t *l = a->be.ctx;
  l->at = op;
  l->ops0 = a->ex.ops;
}

const gm_backend_t *gm_devlog_under(const gm_alloc_t *a) {
  if (a->be.malloc != dl_malloc) return &a->be;
  return &((const devlog_t *)a->be.ctx)->inner;
}

const gm_backend_t *gm_devlog_inner(const gm_alloc_t *a) { return gm_watch_inner(gm_devlog_under(a)); }

void gm_devlog_clear(gm_alloc_t *a) {
  if (a->be.malloc != dl_malloc) return;
  devlog_t *l = a->be.ctx;
  l->n = 0;
}
