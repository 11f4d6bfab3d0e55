/* gm_cuda.c — the CUDA driver backend (gm_cuda_backend).
 *
 * libcuda.so.1 is loaded at run time with dlopen, and the few driver types
 * and prototypes used are declared here, so the package builds, vets and
 * fails cleanly on machines without the CUDA toolkit or driver. The layouts
 * below are those of the public cuda.h (CUDA 11.2 and later).
 *
 * The only global state is the function table, filled once under
 * pthread_once. A backend context is not thread-safe (the allocator above
 * serialises calls), but any call may come from any OS thread: goroutines
 * migrate, and a CUDA context is current per thread, so every entry point
 * makes the device's primary context current before touching the driver.
 *
 * Ownership: the backend remembers every segment it handed out, every
 * reservation, and the physical handle behind every mapped page, so that
 * unmap can release each page and destroy can return all of it.
 *
 * Placement: best fit breaks ties between equal free blocks by address, so
 * the allocator must see the addresses the simulated device would give, or
 * a replay on the GPU decides differently from the same replay simulated
 * (and from the recording). The backend therefore runs the simulated
 * device's address model (gm_sim_backend, uncapped) beside the driver and
 * hands the allocator the model's addresses; the driver supplies the
 * memory. With virtual memory management each segment is a reservation
 * asked for at the model's address (the driver grants a free fixed address
 * when it can, so the GPU's addresses then equal the simulation's) with
 * physical pages mapped into it; where the driver places it elsewhere, or
 * has no virtual memory management (cuMemAlloc), the backend translates.
 * The card's capacity is the driver's: a segment the driver refuses is an
 * out-of-memory, and the model forgets it.
 */
#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "gm_alloc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- driver types, as cuda.h declares them ---------------------------- */

typedef int gm__CUresult;
typedef int gm__CUdevice;
typedef struct gm__CUctx_st *gm__CUcontext;
typedef unsigned long long gm__CUdeviceptr;
typedef unsigned long long gm__CUmemGenericAllocationHandle;

enum {
  GM__CUDA_SUCCESS = 0,
  GM__CUDA_ERROR_OUT_OF_MEMORY = 2,
  GM__CUDA_ERROR_NO_DEVICE = 100
};
enum { GM__CU_MEM_ALLOCATION_TYPE_PINNED = 0x1 };
enum { GM__CU_MEM_HANDLE_TYPE_NONE = 0x0 };
enum { GM__CU_MEM_LOCATION_TYPE_DEVICE = 0x1 };
enum { GM__CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3 };
enum { GM__CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0 };

/* The enums of cuda.h are int-sized; plain ints keep the layout exact. */
typedef struct {
  int type; /* CUmemLocationType */
  int id;
} gm__CUmemLocation;

typedef struct {
  int type;                 /* CUmemAllocationType */
  int requestedHandleTypes; /* CUmemAllocationHandleType */
  gm__CUmemLocation location;
  void *win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} gm__CUmemAllocationProp;

typedef struct {
  gm__CUmemLocation location;
  int flags; /* CUmemAccess_flags */
} gm__CUmemAccessDesc;

_Static_assert(sizeof(gm__CUmemAllocationProp) == 32, "CUmemAllocationProp layout");
_Static_assert(sizeof(gm__CUmemAccessDesc) == 12, "CUmemAccessDesc layout");

/* ---- the function table ------------------------------------------------ */

typedef struct {
  gm__CUresult (*Init)(unsigned int);
  gm__CUresult (*DeviceGetCount)(int *);
  gm__CUresult (*DeviceGet)(gm__CUdevice *, int);
  gm__CUresult (*DeviceTotalMem)(size_t *, gm__CUdevice);
  gm__CUresult (*DevicePrimaryCtxRetain)(gm__CUcontext *, gm__CUdevice);
  gm__CUresult (*DevicePrimaryCtxRelease)(gm__CUdevice);
  gm__CUresult (*CtxSetCurrent)(gm__CUcontext);
  gm__CUresult (*MemAlloc)(gm__CUdeviceptr *, size_t);
  gm__CUresult (*MemFree)(gm__CUdeviceptr);
  gm__CUresult (*MemGetInfo)(size_t *, size_t *);
  gm__CUresult (*MemAddressReserve)(gm__CUdeviceptr *, size_t, size_t,
                                    gm__CUdeviceptr, unsigned long long);
  gm__CUresult (*MemAddressFree)(gm__CUdeviceptr, size_t);
  gm__CUresult (*MemCreate)(gm__CUmemGenericAllocationHandle *, size_t,
                            const gm__CUmemAllocationProp *, unsigned long long);
  gm__CUresult (*MemRelease)(gm__CUmemGenericAllocationHandle);
  gm__CUresult (*MemMap)(gm__CUdeviceptr, size_t, size_t,
                         gm__CUmemGenericAllocationHandle, unsigned long long);
  gm__CUresult (*MemUnmap)(gm__CUdeviceptr, size_t);
  gm__CUresult (*MemSetAccess)(gm__CUdeviceptr, size_t,
                               const gm__CUmemAccessDesc *, size_t);
  gm__CUresult (*MemGetAllocationGranularity)(size_t *,
                                              const gm__CUmemAllocationProp *, int);
  gm__CUresult (*GetErrorString)(gm__CUresult, const char **);
} gm__cu_fns_t;

static gm__cu_fns_t gm__cu;
static gm__CUresult gm__cu_init_rc;   /* cuInit's result */
static char gm__cu_load_err[256];     /* empty when the table is complete */
static pthread_once_t gm__cu_once = PTHREAD_ONCE_INIT;

static void gm__cu_load(void) {
  /* The handle stays open for the life of the process: the table points
   * into it, and drivers are not meant to be unloaded. */
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *why = dlerror();
    snprintf(gm__cu_load_err, sizeof gm__cu_load_err,
             "libcuda.so.1 not found: no nvidia driver (%s)", why ? why : "dlopen failed");
    return;
  }
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
#define GM__SYM(field, name) {name, offsetof(gm__cu_fns_t, field)}
      GM__SYM(Init, "cuInit"),
      GM__SYM(DeviceGetCount, "cuDeviceGetCount"),
      GM__SYM(DeviceGet, "cuDeviceGet"),
      GM__SYM(DeviceTotalMem, "cuDeviceTotalMem_v2"),
      GM__SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
      GM__SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
      GM__SYM(CtxSetCurrent, "cuCtxSetCurrent"),
      GM__SYM(MemAlloc, "cuMemAlloc_v2"),
      GM__SYM(MemFree, "cuMemFree_v2"),
      GM__SYM(MemGetInfo, "cuMemGetInfo_v2"),
      GM__SYM(MemAddressReserve, "cuMemAddressReserve"),
      GM__SYM(MemAddressFree, "cuMemAddressFree"),
      GM__SYM(MemCreate, "cuMemCreate"),
      GM__SYM(MemRelease, "cuMemRelease"),
      GM__SYM(MemMap, "cuMemMap"),
      GM__SYM(MemUnmap, "cuMemUnmap"),
      GM__SYM(MemSetAccess, "cuMemSetAccess"),
      GM__SYM(MemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
      GM__SYM(GetErrorString, "cuGetErrorString"),
#undef GM__SYM
  };
  gm__cu_fns_t t;
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *p = dlsym(h, syms[i].name);
    if (p == NULL) {
      snprintf(gm__cu_load_err, sizeof gm__cu_load_err,
               "libcuda.so.1 lacks %s: nvidia driver too old", syms[i].name);
      return;
    }
    /* Object to function pointer: POSIX guarantees the representation. */
    memcpy((char *)&t + syms[i].off, &p, sizeof p);
  }
  gm__cu = t;
  gm__cu_init_rc = gm__cu.Init(0);
}

#include "gm_cuda_map.h"

/* ---- the backend ------------------------------------------------------- */

#if defined(__GNUC__) || defined(__clang__)
#define GM__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define GM__PRINTF(f, a)
#endif

typedef struct {
  int ordinal;
  gm__CUdevice dev;
  gm__CUcontext ctx;
  size_t gran;        /* cuMemCreate granularity; 0 = no virtual memory management */
  gm_backend_t model; /* the simulated device's address model (see Placement) */
  gm__cu_map_t segs;  /* model address of a malloc'd segment → a: device address, b: size */
  gm__cu_map_t resv;  /* model address of a reservation → a: device address, b: size */
  gm__cu_map_t pages; /* mapped device page → a: handle, b: page size */
  uint64_t placed, exact; /* reservations made, and those the driver put at the model's address */
  char err[256];      /* the last failure, for diagnostics */
} gm__cuda_t;

/* Writes "what: driver text (cuda error N)" to buf. */
static void gm__cu_vdescribe(char *buf, size_t len, gm__CUresult rc, const char *fmt, va_list ap) {
  if (buf == NULL || len == 0) return;
  char what[160];
  vsnprintf(what, sizeof what, fmt, ap);
  const char *s = NULL;
  if (gm__cu.GetErrorString == NULL || gm__cu.GetErrorString(rc, &s) != GM__CUDA_SUCCESS || s == NULL)
    s = "unknown error";
  snprintf(buf, len, "%s: %s (cuda error %d)", what, s, rc);
}

GM__PRINTF(4, 5)
static void gm__cu_describe(char *buf, size_t len, gm__CUresult rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gm__cu_vdescribe(buf, len, rc, fmt, ap);
  va_end(ap);
}

/* Records a driver failure and maps it to a GM_E* code. */
GM__PRINTF(3, 4)
static int gm__cu_fail(gm__cuda_t *c, gm__CUresult rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gm__cu_vdescribe(c->err, sizeof c->err, rc, fmt, ap);
  va_end(ap);
  return rc == GM__CUDA_ERROR_OUT_OF_MEMORY ? GM_ENOMEM : GM_EBACKEND;
}

GM__PRINTF(2, 3)
static int gm__cu_misuse(gm__cuda_t *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return GM_EBACKEND;
}

/* Every entry point starts here: the calling thread may have no context. */
static int gm__cu_enter(gm__cuda_t *c) {
  gm__CUresult rc = gm__cu.CtxSetCurrent(c->ctx);
  if (rc != GM__CUDA_SUCCESS) {
    gm__cu_describe(c->err, sizeof c->err, rc, "cuCtxSetCurrent(device %d)", c->ordinal);
    return GM_EBACKEND;
  }
  return GM_OK;
}

static gm__CUresult gm__cu_drop_page(gm__cuda_t *c, gm__cu_ent_t *e);

/* Reserves `size` bytes of address space, at `want` if the driver grants
 * it. A driver may refuse a fixed address it cannot give (out of memory
 * rather than elsewhere); the range is then taken wherever it lands. */
static gm__CUresult gm__cu_reserve_at(gm__cuda_t *c, uint64_t size, uint64_t want, gm__CUdeviceptr *p) {
  gm__CUresult rc = gm__cu.MemAddressReserve(p, (size_t)size, 0, want, 0);
  if (rc != GM__CUDA_SUCCESS && want != 0) rc = gm__cu.MemAddressReserve(p, (size_t)size, 0, 0, 0);
  if (rc == GM__CUDA_SUCCESS) {
    c->placed++;
    if (*p == want) c->exact++;
  }
  return rc;
}

/* Backs [p, p+size) with one physical allocation, readable and writable.
 * pre: size is a multiple of the granularity. */
static gm__CUresult gm__cu_back(gm__cuda_t *c, gm__CUdeviceptr p, uint64_t size, const char **what) {
  gm__CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = GM__CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = GM__CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = GM__CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = c->dev;
  gm__CUmemGenericAllocationHandle h = 0;
  gm__CUresult rc = gm__cu.MemCreate(&h, (size_t)size, &prop, 0);
  if (rc != GM__CUDA_SUCCESS) {
    *what = "cuMemCreate";
    return rc;
  }
  if ((rc = gm__cu.MemMap(p, (size_t)size, 0, h, 0)) != GM__CUDA_SUCCESS) {
    gm__cu.MemRelease(h);
    *what = "cuMemMap";
    return rc;
  }
  gm__CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = GM__CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = c->dev;
  acc.flags = GM__CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if ((rc = gm__cu.MemSetAccess(p, (size_t)size, &acc, 1)) != GM__CUDA_SUCCESS ||
      gm__cu_put(&c->pages, p, h, size) != 0) {
    gm__cu.MemUnmap(p, (size_t)size);
    gm__cu.MemRelease(h);
    *what = rc != GM__CUDA_SUCCESS ? "cuMemSetAccess" : NULL;
    return rc != GM__CUDA_SUCCESS ? rc : GM__CUDA_ERROR_OUT_OF_MEMORY;
  }
  return GM__CUDA_SUCCESS;
}

/* One segment's device memory: a placed reservation with its pages, or
 * cuMemAlloc without virtual memory management. */
static int gm__cu_segment(gm__cuda_t *c, uint64_t at, uint64_t size, gm__CUdeviceptr *out) {
  gm__CUresult rc;
  const char *what = NULL;
  if (c->gran == 0) {
    if ((rc = gm__cu.MemAlloc(out, (size_t)size)) != GM__CUDA_SUCCESS)
      return gm__cu_fail(c, rc, "cuMemAlloc(%llu bytes)", (unsigned long long)size);
    return GM_OK;
  }
  uint64_t span = (size + c->gran - 1) / c->gran * c->gran;
  gm__CUdeviceptr p = 0;
  if ((rc = gm__cu_reserve_at(c, span, at, &p)) != GM__CUDA_SUCCESS)
    return gm__cu_fail(c, rc, "cuMemAddressReserve(%llu bytes)", (unsigned long long)span);
  if ((rc = gm__cu_back(c, p, span, &what)) != GM__CUDA_SUCCESS) {
    gm__cu.MemAddressFree(p, (size_t)span);
    if (what == NULL) return gm__cu_misuse(c, "cuda backend: out of host memory");
    return gm__cu_fail(c, rc, "%s(%llu bytes)", what, (unsigned long long)span);
  }
  *out = p;
  return GM_OK;
}

/* Returns what gm__cu_segment obtained. */
static gm__CUresult gm__cu_segment_free(gm__cuda_t *c, gm__CUdeviceptr p) {
  gm__cu_ent_t *pg = gm__cu_find(&c->pages, p);
  if (pg == NULL) return gm__cu.MemFree(p);
  uint64_t span = pg->b;
  gm__CUresult rc = gm__cu_drop_page(c, pg);
  gm__CUresult rc2 = gm__cu.MemAddressFree(p, (size_t)span);
  return rc != GM__CUDA_SUCCESS ? rc : rc2;
}

static int gm__cu_malloc(void *ctx, uint64_t size, uint64_t hint, uint64_t *addr) {
  gm__cuda_t *c = ctx;
  int st = gm__cu_enter(c);
  if (st != GM_OK) return st;
  uint64_t at = 0;
  if ((st = c->model.malloc(c->model.ctx, size, hint, &at)) != GM_OK) {
    /* more than the card holds (a hostile trace asks for a petabyte):
     * out of memory, as cuMemAlloc answers, not a misuse */
    size_t f = 0, t = 0;
    if (gm__cu.MemGetInfo(&f, &t) == GM__CUDA_SUCCESS && size > t) return GM_ENOMEM;
    return gm__cu_misuse(c, "cuda backend: the address model has no room for %llu bytes",
                         (unsigned long long)size);
  }
  gm__CUdeviceptr p = 0;
  if ((st = gm__cu_segment(c, at, size, &p)) != GM_OK) {
    c->model.free(c->model.ctx, at, size);
    return st;
  }
  if (gm__cu_put(&c->segs, at, p, size) != 0) {
    gm__cu_segment_free(c, p);
    c->model.free(c->model.ctx, at, size);
    return gm__cu_misuse(c, "cuda backend: out of host memory");
  }
  *addr = at;
  return GM_OK;
}

/* Finds *e, the entry of m made for [addr, addr+size) by `maker`, and
 * enters the context; a range no call made is a misuse, named by `op`. */
static int gm__cu_begin(gm__cuda_t *c, gm__cu_map_t *m, uint64_t addr, uint64_t size, const char *op,
                        const char *maker, gm__cu_ent_t **e) {
  *e = gm__cu_find(m, addr);
  if (*e == NULL || (*e)->b != size)
    return gm__cu_misuse(c, "cuda backend: %s of 0x%llx (%llu bytes) that %s did not return", op,
                         (unsigned long long)addr, (unsigned long long)size, maker);
  return gm__cu_enter(c);
}

static int gm__cu_free(void *ctx, uint64_t addr, uint64_t size) {
  gm__cuda_t *c = ctx;
  gm__cu_ent_t *e;
  int st = gm__cu_begin(c, &c->segs, addr, size, "free", "malloc", &e);
  if (st != GM_OK) return st;
  gm__CUresult rc = gm__cu_segment_free(c, e->a);
  if (rc != GM__CUDA_SUCCESS) return gm__cu_fail(c, rc, "freeing segment 0x%llx", (unsigned long long)e->a);
  gm__cu_del(&c->segs, e);
  c->model.free(c->model.ctx, addr, size);
  return GM_OK;
}

static int gm__cu_check_page(gm__cuda_t *c, uint64_t page) {
  if (c->gran == 0)
    return gm__cu_misuse(c, "cuda device %d has no virtual memory management", c->ordinal);
  if (page == 0 || page % c->gran != 0)
    return gm__cu_misuse(c, "cuda backend: page size %llu is not a multiple of the granularity %llu",
                         (unsigned long long)page, (unsigned long long)c->gran);
  return GM_OK;
}

static int gm__cu_va_reserve(void *ctx, uint64_t size, uint64_t page, uint64_t *addr) {
  gm__cuda_t *c = ctx;
  int st = gm__cu_check_page(c, page);
  if (st != GM_OK) return st;
  if (size == 0 || size % page != 0)
    return gm__cu_misuse(c, "cuda backend: reservation of %llu bytes is not a whole number of %llu-byte pages",
                         (unsigned long long)size, (unsigned long long)page);
  if ((st = gm__cu_enter(c)) != GM_OK) return st;
  uint64_t at = 0;
  if (c->model.va_reserve(c->model.ctx, size, page, &at) != GM_OK)
    return gm__cu_misuse(c, "cuda backend: the address model has no room for %llu bytes",
                         (unsigned long long)size);
  gm__CUdeviceptr p = 0;
  /* alignment 0: the granularity, as PyTorch asks; a 20 MiB page is no valid alignment */
  gm__CUresult rc = gm__cu_reserve_at(c, size, at, &p);
  if (rc != GM__CUDA_SUCCESS) {
    c->model.va_release(c->model.ctx, at, size);
    return gm__cu_fail(c, rc, "cuMemAddressReserve(%llu bytes)", (unsigned long long)size);
  }
  if (gm__cu_put(&c->resv, at, p, size) != 0) {
    gm__cu.MemAddressFree(p, (size_t)size);
    c->model.va_release(c->model.ctx, at, size);
    return gm__cu_misuse(c, "cuda backend: out of host memory");
  }
  *addr = at;
  return GM_OK;
}

/* Unmaps one page and releases its memory. Returns 0 or the driver error. */
static gm__CUresult gm__cu_drop_page(gm__cuda_t *c, gm__cu_ent_t *e) {
  gm__CUresult rc = gm__cu.MemUnmap(e->key, (size_t)e->b);
  gm__CUresult rc2 = gm__cu.MemRelease(e->a);
  gm__cu_del(&c->pages, e);
  return rc != GM__CUDA_SUCCESS ? rc : rc2;
}

/* Drops every mapped page inside [addr, addr+size). */
static gm__CUresult gm__cu_drop_range(gm__cuda_t *c, uint64_t addr, uint64_t size) {
  gm__CUresult first = GM__CUDA_SUCCESS;
  for (size_t i = 0; i < c->pages.cap;) {
    gm__cu_ent_t *e = &c->pages.e[i];
    if (e->key != 0 && e->key >= addr && e->key - addr < size) {
      gm__CUresult rc = gm__cu_drop_page(c, e);
      if (first == GM__CUDA_SUCCESS) first = rc;
      continue; /* deletion shifted another entry into slot i */
    }
    i++;
  }
  return first;
}

static int gm__cu_va_release(void *ctx, uint64_t addr, uint64_t size) {
  gm__cuda_t *c = ctx;
  gm__cu_ent_t *r;
  int st = gm__cu_begin(c, &c->resv, addr, size, "release", "va_reserve", &r);
  if (st != GM_OK) return st;
  uint64_t dev = r->a;
  /* Pages still mapped would make cuMemAddressFree fail; return them first. */
  gm__CUresult rc = c->pages.n ? gm__cu_drop_range(c, dev, size) : GM__CUDA_SUCCESS;
  if (rc != GM__CUDA_SUCCESS) return gm__cu_fail(c, rc, "cuMemUnmap(0x%llx)", (unsigned long long)dev);
  rc = gm__cu.MemAddressFree(dev, (size_t)size);
  if (rc != GM__CUDA_SUCCESS) return gm__cu_fail(c, rc, "cuMemAddressFree(0x%llx)", (unsigned long long)dev);
  gm__cu_del(&c->resv, r);
  c->model.va_release(c->model.ctx, addr, size);
  return GM_OK;
}

/* Checks that [addr, addr+size) (model addresses) is page-aligned and
 * inside one reservation; *dev is where it lies on the device. */
static int gm__cu_check_range(gm__cuda_t *c, uint64_t addr, uint64_t size, uint64_t page, uint64_t *dev) {
  int st = gm__cu_check_page(c, page);
  if (st != GM_OK) return st;
  /* Pages are counted from the reservation's base, which is only
   * granularity-aligned: a 20 MiB page is no power of two. */
  if (size == 0 || size % page != 0 || addr % c->gran != 0)
    return gm__cu_misuse(c, "cuda backend: range 0x%llx+%llu is not aligned to %llu-byte pages",
                         (unsigned long long)addr, (unsigned long long)size, (unsigned long long)page);
  for (size_t i = 0; i < c->resv.cap; i++) {
    const gm__cu_ent_t *r = &c->resv.e[i];
    if (r->key != 0 && addr >= r->key && addr - r->key <= r->b && size <= r->b - (addr - r->key)) {
      if ((addr - r->key) % page != 0) break;
      *dev = r->a + (addr - r->key);
      return GM_OK;
    }
  }
  return gm__cu_misuse(c, "cuda backend: range 0x%llx+%llu lies outside every reservation",
                       (unsigned long long)addr, (unsigned long long)size);
}

/* Checks the range as gm__cu_check_range does, and that every one of its
 * pages is mapped (with that page size) when `mapped`, or none is when
 * not, and enters the context; *dev is where the range lies on the
 * device, *n its number of pages. */
static int gm__cu_pages(gm__cuda_t *c, uint64_t addr, uint64_t size, uint64_t page, int mapped,
                        uint64_t *dev, uint64_t *n) {
  int st = gm__cu_check_range(c, addr, size, page, dev);
  if (st != GM_OK) return st;
  *n = size / page;
  for (uint64_t i = 0; i < *n; i++) {
    const gm__cu_ent_t *e = gm__cu_find(&c->pages, *dev + i * page);
    if (mapped ? e == NULL || e->b != page : e != NULL)
      return gm__cu_misuse(c, "cuda backend: page 0x%llx (%llu bytes) is %s", (unsigned long long)(addr + i * page),
                           (unsigned long long)page, mapped ? "not mapped" : "already mapped");
  }
  return gm__cu_enter(c);
}

static int gm__cu_map(void *ctx, uint64_t addr, uint64_t size, uint64_t page) {
  gm__cuda_t *c = ctx;
  uint64_t dev = 0, n = 0;
  int st = gm__cu_pages(c, addr, size, page, 0, &dev, &n);
  if (st != GM_OK) return st;
  /* One physical handle per page, as PyTorch's expandable segments do, so
   * each page can later be returned on its own. */
  uint64_t done = 0;
  gm__CUresult rc = GM__CUDA_SUCCESS;
  const char *what = NULL;
  for (; done < n; done++)
    if ((rc = gm__cu_back(c, dev + done * page, page, &what)) != GM__CUDA_SUCCESS) break;
  if (done == n) return GM_OK;
  /* Undo: nothing stays mapped on failure. */
  for (uint64_t i = 0; i < done; i++) {
    gm__cu_ent_t *e = gm__cu_find(&c->pages, dev + i * page);
    if (e != NULL) gm__cu_drop_page(c, e);
  }
  if (what == NULL) return gm__cu_misuse(c, "cuda backend: out of host memory");
  return gm__cu_fail(c, rc, "%s(0x%llx)", what, (unsigned long long)(addr + done * page));
}

static int gm__cu_unmap(void *ctx, uint64_t addr, uint64_t size, uint64_t page) {
  gm__cuda_t *c = ctx;
  uint64_t dev = 0, n = 0;
  int st = gm__cu_pages(c, addr, size, page, 1, &dev, &n);
  if (st != GM_OK) return st;
  gm__CUresult first = GM__CUDA_SUCCESS;
  for (uint64_t i = 0; i < n; i++) {
    gm__CUresult rc = gm__cu_drop_page(c, gm__cu_find(&c->pages, dev + i * page));
    if (first == GM__CUDA_SUCCESS) first = rc;
  }
  /* The pages are forgotten either way: a handle the driver refused to
   * release cannot be retried usefully. */
  return first == GM__CUDA_SUCCESS ? GM_OK : gm__cu_fail(c, first, "cuMemUnmap(0x%llx)", (unsigned long long)addr);
}

static int gm__cu_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
  gm__cuda_t *c = ctx;
  int st = gm__cu_enter(c);
  if (st != GM_OK) return st;
  size_t f = 0, t = 0;
  gm__CUresult rc = gm__cu.MemGetInfo(&f, &t);
  if (rc != GM__CUDA_SUCCESS) return gm__cu_fail(c, rc, "cuMemGetInfo");
  *free_bytes = f;
  *total_bytes = t;
  return GM_OK;
}

static void gm__cu_destroy(void *ctx) {
  gm__cuda_t *c = ctx;
  if (c == NULL) return;
  /* Without a current context nothing can be returned; the primary
   * context's release below still frees it all with the context. */
  if (gm__cu.CtxSetCurrent(c->ctx) == GM__CUDA_SUCCESS) {
    for (size_t i = 0; i < c->segs.cap;) {
      gm__cu_ent_t *e = &c->segs.e[i];
      if (e->key == 0) {
        i++;
        continue;
      }
      gm__cu_segment_free(c, e->a);
      gm__cu_del(&c->segs, e); /* shifts another entry into slot i */
    }
    for (size_t i = 0; i < c->pages.cap; i++)
      if (c->pages.e[i].key != 0) {
        gm__cu.MemUnmap(c->pages.e[i].key, (size_t)c->pages.e[i].b);
        gm__cu.MemRelease(c->pages.e[i].a);
      }
    for (size_t i = 0; i < c->resv.cap; i++)
      if (c->resv.e[i].key != 0) gm__cu.MemAddressFree(c->resv.e[i].a, (size_t)c->resv.e[i].b);
  }
  if (c->model.destroy) c->model.destroy(c->model.ctx);
  gm__cu.DevicePrimaryCtxRelease(c->dev);
  free(c->pages.e);
  free(c->resv.e);
  free(c->segs.e);
  free(c);
}

GM__PRINTF(3, 4)
static void gm__cu_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static const char *gm__cu_error(void *ctx) {
  gm__cuda_t *c = ctx;
  return c->err[0] ? c->err : NULL;
}

int gm_cuda_backend(int device, gm_backend_t *b, char *err, size_t errlen) {
  if (err != NULL && errlen > 0) err[0] = '\0';
  pthread_once(&gm__cu_once, gm__cu_load);
  if (gm__cu_load_err[0] != '\0') {
    gm__cu_seterr(err, errlen, "%s", gm__cu_load_err);
    return GM_EBACKEND;
  }
  if (gm__cu_init_rc == GM__CUDA_ERROR_NO_DEVICE) {
    gm__cu_seterr(err, errlen, "no cuda device found");
    return GM_EBACKEND;
  }
  if (gm__cu_init_rc != GM__CUDA_SUCCESS) {
    gm__cu_describe(err, errlen, gm__cu_init_rc, "cuInit");
    return GM_EBACKEND;
  }
  int count = 0;
  gm__CUresult rc = gm__cu.DeviceGetCount(&count);
  if (rc != GM__CUDA_SUCCESS) {
    gm__cu_describe(err, errlen, rc, "cuDeviceGetCount");
    return GM_EBACKEND;
  }
  if (device < 0 || device >= count) {
    gm__cu_seterr(err, errlen, "cuda device %d not found (%d device%s)", device, count,
                  count == 1 ? "" : "s");
    return GM_EBACKEND;
  }
  gm__cuda_t *c = calloc(1, sizeof *c);
  if (c == NULL) {
    gm__cu_seterr(err, errlen, "cuda backend: out of host memory");
    return GM_EBACKEND;
  }
  c->ordinal = device;
  if ((rc = gm__cu.DeviceGet(&c->dev, device)) != GM__CUDA_SUCCESS) {
    gm__cu_describe(err, errlen, rc, "cuDeviceGet(%d)", device);
    free(c);
    return GM_EBACKEND;
  }
  if ((rc = gm__cu.DevicePrimaryCtxRetain(&c->ctx, c->dev)) != GM__CUDA_SUCCESS) {
    gm__cu_describe(err, errlen, rc, "cuDevicePrimaryCtxRetain(device %d)", device);
    free(c);
    return GM_EBACKEND;
  }
  if ((rc = gm__cu.CtxSetCurrent(c->ctx)) != GM__CUDA_SUCCESS) {
    gm__cu_describe(err, errlen, rc, "cuCtxSetCurrent(device %d)", device);
    gm__cu.DevicePrimaryCtxRelease(c->dev);
    free(c);
    return GM_EBACKEND;
  }
  /* Devices without virtual memory management still serve malloc/free;
   * va_reserve and map then fail with a message. */
  gm__CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = GM__CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = GM__CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = c->dev;
  size_t g = 0;
  if (gm__cu.MemGetAllocationGranularity(&g, &prop, GM__CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
      GM__CUDA_SUCCESS)
    c->gran = g;
  if (gm_sim_backend(0, &c->model) != GM_OK) {
    gm__cu_seterr(err, errlen, "cuda backend: out of host memory");
    gm__cu.DevicePrimaryCtxRelease(c->dev);
    free(c);
    return GM_EBACKEND;
  }

  *b = (gm_backend_t){
      .ctx = c,
      .malloc = gm__cu_malloc,
      .free = gm__cu_free,
      .va_reserve = gm__cu_va_reserve,
      .error = gm__cu_error,
      .va_release = gm__cu_va_release,
      .map = gm__cu_map,
      .unmap = gm__cu_unmap,
      .mem_info = gm__cu_mem_info,
      .destroy = gm__cu_destroy,
  };
  return GM_OK;
}

/* ---- probes for the Go tests (gm_cuda_probe.h) ------------------------- */

#include "gm_cuda_probe.h"

void gm_cuda_probe(const void *ctx, gm_cuda_probe_t *out) {
  const gm__cuda_t *c = ctx;
  *out = (gm_cuda_probe_t){c->gran, c->segs.n, c->resv.n, c->pages.n, c->err};
}

uint64_t gm_cuda_probe_device_addr(const void *ctx, uint64_t addr) {
  const gm__cuda_t *c = ctx;
  const gm__cu_ent_t *e = gm__cu_find(&c->segs, addr);
  if (e != NULL) return e->a;
  for (size_t i = 0; i < c->resv.cap; i++) {
    const gm__cu_ent_t *r = &c->resv.e[i];
    if (r->key != 0 && addr >= r->key && addr - r->key < r->b) return r->a + (addr - r->key);
  }
  return addr;
}

int gm_cuda_probe_touch(uint64_t p, uint64_t n, uint64_t stride, unsigned char v) {
  gm__CUresult (*memset8)(gm__CUdeviceptr, unsigned char, size_t);
  gm__CUresult (*dtoh)(void *, gm__CUdeviceptr, size_t);
  gm__CUresult (*sync)(void);
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void *p1 = h ? dlsym(h, "cuMemsetD8_v2") : NULL, *p2 = h ? dlsym(h, "cuMemcpyDtoH_v2") : NULL,
       *p3 = h ? dlsym(h, "cuCtxSynchronize") : NULL;
  if (!p1 || !p2 || !p3) return -1;
  memcpy(&memset8, &p1, sizeof p1);
  memcpy(&dtoh, &p2, sizeof p2);
  memcpy(&sync, &p3, sizeof p3);
  if (memset8((gm__CUdeviceptr)p, v, (size_t)n) != 0 || sync() != 0) return 0;
  for (uint64_t off = 0; off < n; off += stride) {
    unsigned char a = 0, z = 0;
    if (dtoh(&a, (gm__CUdeviceptr)(p + off), 1) != 0) return 0;
    if (dtoh(&z, (gm__CUdeviceptr)(p + off + stride - 1), 1) != 0) return 0;
    if (a != v || z != v) return 0;
  }
  return 1;
}

typedef struct {
  const gm_backend_t *b;
  uint64_t size;
  int rc;
} gm__cu_thread_arg_t;

static void *gm__cu_thread_body(void *arg) {
  gm__cu_thread_arg_t *t = arg;
  uint64_t a = 0;
  t->rc = t->b->malloc(t->b->ctx, t->size, 0, &a);
  if (t->rc == GM_OK) t->rc = t->b->free(t->b->ctx, a, t->size);
  return NULL;
}

int gm_cuda_probe_other_thread(const gm_backend_t *b, uint64_t size) {
  gm__cu_thread_arg_t t = {b, size, GM_EBACKEND};
  pthread_t th;
  if (pthread_create(&th, NULL, gm__cu_thread_body, &t) != 0) return GM_EBACKEND;
  pthread_join(th, NULL);
  return t.rc;
}

void *gm_cuda_probe_table_new(void) { return calloc(1, sizeof(gm__cu_map_t)); }

int gm_cuda_probe_table_put(void *t, uint64_t key, uint64_t val) { return gm__cu_put(t, key, val, 0); }

int gm_cuda_probe_table_get(void *t, uint64_t key, uint64_t *val) {
  gm__cu_ent_t *e = gm__cu_find(t, key);
  if (e) *val = e->a;
  return e != NULL;
}

int gm_cuda_probe_table_del(void *t, uint64_t key) {
  gm__cu_ent_t *e = gm__cu_find(t, key);
  if (e) gm__cu_del(t, e);
  return e != NULL;
}

size_t gm_cuda_probe_table_len(void *t) { return ((gm__cu_map_t *)t)->n; }

void gm_cuda_probe_table_free(void *t) {
  free(((gm__cu_map_t *)t)->e);
  free(t);
}
