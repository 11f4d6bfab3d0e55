/* gm_alloc.c — the engine every allocation policy plugs into: allocation
 * ids, pending frees, gm_run and its timeline and peaks, statistics,
 * seeding, the checker after every op, and the bookkeeping helpers of
 * gm_policy.h. Where blocks go is the policy's business: the engine calls
 * it only through its gm_policy_t, found in the table of gm_policies.h. */
#include <stdlib.h>
#include <string.h>

#include "gm_pack.h"
#include "gm_policy.h"

/* ------------------------------------------------------------------ */
/* the policy table                                                    */

#define GM_POLICY_ROW(id, sym) &sym,
static const gm_policy_t *const policies[] = {GM_POLICIES(GM_POLICY_ROW)};
#undef GM_POLICY_ROW
_Static_assert(sizeof policies / sizeof policies[0] == GM_POLICY_COUNT,
               "the policy table and the GM_POLICY_* enum disagree");

/* The policy numbered p, or NULL if there is none or its row is unusable. */
static const gm_policy_t *policy(int p) {
  if (p < 0 || p >= GM_POLICY_COUNT) return NULL;
  const gm_policy_t *pol = policies[p];
  if (!pol || !pol->info.name || !pol->malloc || !pol->free || !pol->empty_cache) return NULL;
  return pol;
}

int gm_policy_info(int p, gm_policy_info_t *out) {
  const gm_policy_t *pol = policy(p);
  if (!pol) return GM_EINVAL;
  *out = pol->info;
  return GM_OK;
}

/* ------------------------------------------------------------------ */
/* configuration and sizes (§2, §3 of docs/pytorch-allocator.md) */

void gm_config_default(gm_config_t *c) {
  memset(c, 0, sizeof *c);
  c->policy = GM_POLICY_PYTORCH;
  c->max_split_size = UINT64_MAX;
  c->large_segment_size = 20ull << 20;
  c->max_non_split_rounding_size = 20ull << 20;
}

uint64_t gm_round_size(const gm_config_t *c, uint64_t size) { return gm_round(c, size); }

/* ------------------------------------------------------------------ */
/* blocks and segments                                                 */

gm_seg_t *gm_seg_new(gm_alloc_t *a, uint64_t base, uint64_t size, uint64_t stream,
                     gm_pool_t *pool, int expandable, uint64_t page) {
  gm_seg_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->base = base;
  s->size = size;
  s->stream = stream;
  s->pool = pool;
  s->expandable = expandable;
  s->page = page;
  s->owner = a;
  a->seg_gen++;
  s->next_seg = a->segs;
  if (a->segs) a->segs->prev_seg = s;
  a->segs = s;
  gm_pool_seg_added(s); /* a private pool's cudaMalloc_count */
  return s;
}

gm_block_t *gm_seg_new_whole(gm_alloc_t *a, uint64_t base, uint64_t size, uint64_t stream,
                             gm_pool_t *pool, int expandable, uint64_t page) {
  gm_seg_t *s = gm_seg_new(a, base, size, stream, pool, expandable, page);
  gm_block_t *b = s ? gm_block_new(a) : NULL;
  if (!b) {
    if (s) gm_seg_delete(a, s);
    return NULL;
  }
  b->ptr = base;
  b->size = size;
  b->stream = stream;
  b->pool = pool;
  b->seg = s;
  b->mapped = !expandable; /* an expandable segment's pages are mapped later */
  s->head = b;
  return b;
}

void gm_seg_delete(gm_alloc_t *a, gm_seg_t *s) {
  gm_pool_seg_removed(s);
  a->seg_gen++;
  if (s->touch) gm_untouch_seg(a, s); /* off gm_flat_step's list */
  if (s->prev_seg) s->prev_seg->next_seg = s->next_seg;
  else a->segs = s->next_seg;
  if (s->next_seg) s->next_seg->prev_seg = s->prev_seg;
  free(s);
}

void gm_seg_count(gm_alloc_t *a, const gm_seg_t *s) {
  a->total_allocated += s->size;
  GM_INC(a, segment, s->pool, 1);
  GM_INC(a, reserved_bytes, s->pool, (int64_t)s->size);
  if (s->size >= a->cfg.max_split_size) gm_st_inc(&a->st.oversize_segments, 1);
}

int gm_seg_alloc(gm_alloc_t *a, gm_pool_t *pool, uint64_t size, uint64_t stream, uint64_t hint,
                 gm_block_t **out) {
  if (gm_over_cap(a, size)) return GM_ENOMEM;
  uint64_t ptr = 0;
  int rc = a->be.malloc(a->be.ctx, size, hint, &ptr);
  if (rc != GM_OK) return rc;
  gm_block_t *b = gm_seg_new_whole(a, ptr, size, stream, pool, 0, 0);
  if (!b) {
    a->be.free(a->be.ctx, ptr, size);
    return GM_EBACKEND;
  }
  gm_seg_count(a, b->seg);
  a->st.num_device_alloc++;
  *out = b;
  return GM_OK;
}

void gm_pages_mapped(gm_alloc_t *a, gm_pool_t *pool, uint64_t n) {
  a->total_allocated += n;
  GM_INC(a, reserved_bytes, pool, (int64_t)n);
  a->st.num_device_alloc++;
}

void gm_pages_unmapped(gm_alloc_t *a, gm_pool_t *pool, uint64_t n) {
  a->total_allocated -= n;
  GM_DEC(a, reserved_bytes, pool, (int64_t)n);
  a->st.num_device_free++;
}

uint64_t gm_device_total(gm_alloc_t *a) {
  if (a->cfg.device_total) return a->cfg.device_total;
  if (!a->device_total) {
    uint64_t f = 0, t = 0;
    if (a->be.mem_info(a->be.ctx, &f, &t) == GM_OK && t) a->device_total = t;
    else a->device_total = 1ull << 40;
  }
  return a->device_total;
}

/* release_block (§6.4 of pytorch-allocator.md). */
void gm_release_block(gm_alloc_t *a, gm_block_t *b) {
  a->st.num_device_free++;
  a->be.free(a->be.ctx, b->ptr, b->size);
  a->total_allocated -= b->size;
  GM_DEC(a, segment, b->pool, 1);
  GM_DEC(a, reserved_bytes, b->pool, (int64_t)b->size);
  if (b->size >= a->cfg.max_split_size) gm_st_dec(&a->st.oversize_segments, 1);
  if (b->in_set == GM_SET_FREE) gm_free_erase(b);
  gm_seg_delete(a, b->seg);
  gm_block_delete(a, b);
}

/* ------------------------------------------------------------------ */
/* bookkeeping of allocations                                          */

void gm_oom_record(gm_alloc_t *a, uint64_t orig, uint64_t rounded, uint64_t alloc_size,
                   uint64_t stream, gm_oom_t *oom) {
  if (!oom) return;
  memset(oom, 0, sizeof *oom);
  oom->size = orig;
  oom->rounded = rounded;
  oom->alloc_size = alloc_size;
  oom->stream = stream;
  a->be.mem_info(a->be.ctx, &oom->device_free, &oom->device_total);
  /* the card's total, as cudaMemGetInfo gives it, where the device is only
     its usable part (a simulated card less its CUDA context) */
  if (a->cfg.device_total) oom->device_total = a->cfg.device_total;
  oom->allowed = a->cfg.allowed_memory_maximum;
  oom->allocated = a->st.allocated_bytes[GM_STAT_ALL].current;
  oom->reserved = a->st.reserved_bytes[GM_STAT_ALL].current;
  oom->private_free = gm_pools_free_bytes(a);
}

int gm_oom(gm_alloc_t *a, uint64_t orig, uint64_t rounded, uint64_t alloc_size, uint64_t stream,
           gm_oom_t *oom) {
  a->st.num_ooms++;
  gm_oom_record(a, orig, rounded, alloc_size, stream, oom);
  return GM_ENOMEM;
}

void gm_live_add(gm_alloc_t *a, uint64_t requested) {
  a->ex.live_bytes += (int64_t)gm_up(requested, GM_MIN_BLOCK);
  if (a->ex.live_bytes > a->ex.live_bytes_peak) a->ex.live_bytes_peak = a->ex.live_bytes;
}

/* The allocation statistics of a block that stops being allocated. */
static void uncount_allocation(gm_alloc_t *a, gm_block_t *b) {
  gm_touch(b);
  b->allocated = 0;
  GM_DEC(a, allocation, b->pool, 1);
  GM_DEC(a, allocated_bytes, b->pool, (int64_t)b->size);
  if (b->size >= a->cfg.max_split_size) gm_st_dec(&a->st.oversize_allocations, 1);
}

/* ------------------------------------------------------------------ */
/* malloc and free (§7 of pytorch-allocator.md)                        */

static void finish_pending(gm_alloc_t *a, gm_block_t *b);

void gm_pend_push(gm_alloc_t *a, gm_block_t *b) {
  gm_touch(b);
  b->pending = 1;
  b->pend_next = NULL;
  if (a->pend_tail) a->pend_tail->pend_next = b;
  else a->pend_head = b;
  a->pend_tail = b;
}

/* synchronize_and_free_events: every pending free completes. */
void gm_synchronize_and_free_events(gm_alloc_t *a) {
  a->st.num_sync_all_streams++;
  gm_block_t *b = a->pend_head;
  a->pend_head = a->pend_tail = NULL;
  while (b) {
    gm_block_t *next = b->pend_next;
    finish_pending(a, b);
    b = next;
  }
}

static int do_malloc(gm_alloc_t *a, const gm_request_t *rq, gm_block_t **out, gm_oom_t *oom) {
  if (rq->size >= (1ull << 60)) { /* "more than 1EB": no stats move */
    gm_oom_record(a, rq->size, rq->size, rq->size, rq->stream, oom);
    return GM_ENOMEM;
  }
  return a->pol->malloc(a, rq, out, oom);
}

/* free (§7.1): the user's request. pending forces the block to wait for a
 * later GM_OP_FREE_COMPLETE, as a block with recorded streams does.
 * always_inline, as apply, its one caller: half the ops are frees. */
__attribute__((always_inline)) static inline void do_free(gm_alloc_t *a, gm_block_t *b, int pending) {
  uncount_allocation(a, b);
  if (pending || b->uses) {
    b->uses = 0;
    gm_pend_push(a, b);
    return;
  }
  finish_pending(a, b);
}

static void complete_pending(gm_alloc_t *a, gm_block_t *b) {
  gm_block_t **link = &a->pend_head, *prev = NULL;
  while (*link && *link != b) {
    prev = *link;
    link = &(*link)->pend_next;
  }
  if (*link) {
    *link = b->pend_next;
    if (a->pend_tail == b) a->pend_tail = prev;
  }
  finish_pending(a, b);
}

/* A freed block's last use is over: its memory becomes reusable. */
static void finish_pending(gm_alloc_t *a, gm_block_t *b) {
  gm_touch(b);
  b->pend_next = NULL;
  b->pending = 0;
  if (b->id < a->nids && a->ids[b->id] == b) a->ids[b->id] = NULL;
  b->id = GM_NO_ID;
  a->pol->free(a, b);
}

/* ------------------------------------------------------------------ */
/* public API                                                          */

int gm_new(const gm_config_t *c, const gm_backend_t *b, gm_alloc_t **out) {
  const gm_policy_t *pol = policy(c->policy);
  if (!pol) return GM_EINVAL;
  gm_alloc_t *a = calloc(1, sizeof *a);
  if (!a) return GM_ENOMEM;
  a->pol = pol;
  a->cfg = *c;
  a->be = *b;
  a->small.is_small = 1;
  a->rng = 0x9e3779b9u;
  a->placement_ties = c->policy != GM_POLICY_PYTORCH; /* only pytorch watches */
  a->ex.peak_op = 0;
  a->st.max_split_size = c->max_split_size == UINT64_MAX ? -1 : (int64_t)c->max_split_size;
  if (!(pol->info.traits & GM_TRAIT_PYTORCH_KNOBS)) {
    a->cfg.expandable_segments = 0;
    a->cfg.max_split_size = UINT64_MAX;
    a->st.max_split_size = -1;
  }
  if (pol->init) {
    int rc = pol->init(a);
    if (rc != GM_OK) {
      free(a);
      return rc;
    }
  }
  *out = a;
  return GM_OK;
}

void gm_free(gm_alloc_t *a) {
  if (!a) return;
  if (a->pol->destroy) a->pol->destroy(a);
  while (a->segs) {
    gm_seg_t *s = a->segs;
    gm_block_t *b = s->head;
    if (s->expandable) {
      for (gm_block_t *x = b; x; x = x->next)
        if (x->mapped) a->be.unmap(a->be.ctx, x->ptr, x->size, s->page);
      a->be.va_release(a->be.ctx, s->base, s->size);
    } else {
      a->be.free(a->be.ctx, s->base, s->size);
    }
    while (b) {
      gm_block_t *n = b->next;
      free(b);
      b = n;
    }
    gm_seg_delete(a, s);
  }
  while (a->spare) {
    gm_block_t *n = a->spare->next;
    free(a->spare);
    a->spare = n;
  }
  free(a->ids);
  free(a->oomev);
  free(a->touched);
  free(a->tblocks);
  free(a->gone);
  gm_pools_destroy(a);
  if (a->be.destroy) a->be.destroy(a->be.ctx);
  free(a);
}

static int ensure_id(gm_alloc_t *a, uint32_t id) {
  if (id == GM_NO_ID) return GM_EINVAL;
  if (id < a->nids) return GM_OK;
  uint32_t n = a->nids ? a->nids : 1024;
  while (n <= id) n = n * 2 > n ? n * 2 : GM_NO_ID;
  gm_block_t **v = realloc(a->ids, (size_t)n * sizeof *v);
  if (!v) return GM_ENOMEM;
  memset(v + a->nids, 0, (size_t)(n - a->nids) * sizeof *v);
  a->ids = v;
  a->nids = n;
  return GM_OK;
}

/* A zero-byte allocation gets no block (PyTorch returns nullptr); the id
 * maps to this marker so that its free is accepted. */
static gm_block_t zero_block;

static void track_peak(gm_alloc_t *a) {
  gm_extra_t *e = &a->ex;
  const gm_stat_t *r = &a->st.reserved_bytes[GM_STAT_ALL];
  int64_t alloc = a->st.allocated_bytes[GM_STAT_ALL].current;
  if (r->current != r->peak) return;
  if (r->peak > a->peak_seen) {
    e->peak_op = e->ops - 1;
    e->allocated_at_peak = alloc;
    a->peak_seen = r->peak;
  } else if (alloc > e->allocated_at_peak) {
    e->allocated_at_peak = alloc;
  }
}

void gm_set_follows_recording(gm_alloc_t *a, int on) { a->follows_recording = on != 0; }

/* An out-of-memory the recording had and gm_run goes past, listed for
 * gm_oom_events. */
static void oom_event_add(gm_alloc_t *a, const gm_oom_t *o) {
  if (a->noomev == a->capoomev) {
    size_t n = a->capoomev ? 2 * a->capoomev : 16;
    gm_oom_event_t *v = realloc(a->oomev, n * sizeof *v);
    if (!v) return; /* the event goes unlisted; the counters still hold it */
    a->oomev = v;
    a->capoomev = n;
  }
  a->oomev[a->noomev].op = a->ex.ops;
  a->oomev[a->noomev].oom = *o;
  a->noomev++;
}

size_t gm_oom_events(const gm_alloc_t *a, size_t from, gm_oom_event_t *out, size_t n) {
  for (size_t i = from, k = 0; i < a->noomev && k < n; i++, k++) out[k] = a->oomev[i];
  return a->noomev;
}

/* apply applies op; addr (NULL: none) receives the address of the block an
 * allocation got. A free or free request sets a->freed to the size of the
 * block it freed (0 for one that held nothing: of 0 bytes, or a recorded
 * out-of-memory's). always_inline: gm_run and gm_run_packed each want it
 * in their loop (with two callers the compiler no longer inlines it, nor
 * do_free and sample in it: some 15M more instructions at 1M ops). */
__attribute__((always_inline)) static inline int apply(gm_alloc_t *a, const gm_op_t *op, gm_oom_t *oom,
                                                       uint64_t *addr) {
  gm_block_t *b;
  int rc;
  switch (op->kind) {
  case GM_OP_ALLOC:
    if ((rc = ensure_id(a, op->id)) != GM_OK) return rc;
    if (a->ids[op->id]) return GM_EINVAL;
    if (op->size == 0) {
      a->ids[op->id] = &zero_block;
      return GM_OK;
    }
    b = NULL;
    const gm_request_t rq = {.size = op->size, .stream = op->stream, .hint = op->hint,
                             .pool = op->pool, .claim = (op->flags & GM_OPF_CLAIM) != 0};
    if ((op->flags & GM_OPF_RELEASED_BEFORE) && a->follows_recording && a->pol->releases &&
        !a->pol->releases(a, &rq))
      a->pol->empty_cache(a);
    gm_oom_t o = {0};
    rc = do_malloc(a, &rq, &b, &o);
    if (rc == GM_ENOMEM && (op->flags & GM_OPF_RECORDED_OOM)) {
      /* the program caught it and went on: nothing is held */
      oom_event_add(a, &o);
      a->ids[op->id] = &zero_block;
      return GM_OK;
    }
    if (rc == GM_ENOMEM && oom) *oom = o;
    if (rc != GM_OK) return rc;
    b->id = op->id;
    a->ids[op->id] = b;
    a->ex.live_bytes += (int64_t)((op->size + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK * GM_MIN_BLOCK);
    if (a->ex.live_bytes > a->ex.live_bytes_peak) a->ex.live_bytes_peak = a->ex.live_bytes;
    if (addr) *addr = b->ptr;
    return GM_OK;
  case GM_OP_FREE:
  case GM_OP_FREE_REQUEST:
    if (op->id >= a->nids || !(b = a->ids[op->id])) return GM_EINVAL;
    if (b == &zero_block) {
      a->ids[op->id] = NULL;
      a->freed = 0;
      return GM_OK;
    }
    if (!b->allocated) return GM_EINVAL; /* double free */
    a->freed = b->size; /* before the free merges it away */
    a->ex.live_bytes -= (int64_t)((b->requested + GM_MIN_BLOCK - 1) / GM_MIN_BLOCK * GM_MIN_BLOCK);
    do_free(a, b, op->kind == GM_OP_FREE_REQUEST);
    return GM_OK;
  case GM_OP_FREE_COMPLETE:
    /* A sync (empty_cache, the OOM path) may have completed it already. */
    if (op->id >= a->nids || !(b = a->ids[op->id])) return GM_OK;
    if (b == &zero_block || b->allocated) return GM_EINVAL;
    complete_pending(a, b);
    return GM_OK;
  case GM_OP_RECORD_STREAM:
    if (op->id >= a->nids || !(b = a->ids[op->id])) return GM_EINVAL;
    if (b == &zero_block) return GM_OK; /* recordStream of nullptr: nothing to do */
    if (b->allocated && op->stream != b->stream) b->uses = 1;
    return GM_OK;
  case GM_OP_EMPTY_CACHE:
    a->pol->empty_cache(a);
    return GM_OK;
  case GM_OP_POOL_RELEASE: /* a policy without private pools has none to release */
    return a->pol->release_pool_blocks ? gm_pool_release(a, op->pool) : GM_OK;
  case GM_OP_POOL_EMPTY:
    return a->pol->release_pool_blocks ? gm_pool_empty(a, op->pool) : GM_OK;
  }
  return GM_EINVAL;
}

/* sample folds the state after op tl->base + i into bucket k, the op's
 * (tl->base + i) / tl->stride, which a run steps along without a division
 * per op (run_tl_t); inline in each run's loop, as apply. */
__attribute__((always_inline)) static inline void sample(gm_alloc_t *a, gm_timeline_t *tl, size_t i,
                                                        uint64_t k) {
  if (k >= tl->nbuckets) return;
  int64_t al = a->st.allocated_bytes[GM_STAT_ALL].current;
  int64_t re = a->st.reserved_bytes[GM_STAT_ALL].current;
  int64_t ac = a->st.active_bytes[GM_STAT_ALL].current;
  if (tl->allocated_op) {
    if (tl->allocated_op[k] < 0 || al > tl->allocated[k]) {
      tl->allocated[k] = al;
      tl->allocated_op[k] = (int64_t)(tl->base + i);
    }
  } else if (al > tl->allocated[k]) {
    tl->allocated[k] = al;
  }
  if (re > tl->reserved[k]) tl->reserved[k] = re;
  if (ac > tl->active[k]) tl->active[k] = ac;
}

/* A run's place in its timeline: the bucket k of op tl->base + i and the
 * op's place r in it (tl NULL: no timeline), which a run steps along
 * without a division per op. */
typedef struct run_tl {
  gm_timeline_t *tl;
  uint64_t k, r;
} run_tl_t;

static run_tl_t run_tl(gm_timeline_t *tl) {
  run_tl_t t = {0};
  if (tl && tl->allocated && tl->stride) {
    t.tl = tl;
    t.k = tl->base / tl->stride;
    t.r = tl->base % tl->stride;
  }
  return t;
}

/* ran is what a run does after it applied op i of kind kind (gm_run and
 * gm_run_packed alike): it counts the op, tracks the peak, samples the
 * timeline and checks the allocator when asked to, returning gm_check's
 * status. */
__attribute__((always_inline)) static inline int ran(gm_alloc_t *a, run_tl_t *t, size_t i, unsigned kind) {
  a->ex.ops++;
  /* Only an allocation raises the allocated, reserved or active bytes or
   * the reserved peak (the other ops free, complete, record or
   * release): after any other op they are at most what the op before it
   * left. When this call applied that op, track_peak would change
   * nothing, nor would sample unless this op begins a bucket: half the
   * ops (the frees) skip them. TestRunBatchesAgree holds every policy
   * to it: a run in batches ends as a run of one op a call does. */
  const int seen = i > 0 && kind != GM_OP_ALLOC;
  if (!seen) track_peak(a);
  if (t->tl) {
    if (!seen || t->r == 0) sample(a, t->tl, i, t->k);
    if (++t->r == t->tl->stride) {
      t->r = 0;
      t->k++;
    }
  }
  return a->cfg.check ? gm_check(a, NULL, 0) : GM_OK;
}

int gm_run(gm_alloc_t *a, const gm_op_t *ops, size_t n, size_t *done, gm_oom_t *oom,
           gm_timeline_t *tl, uint64_t *addr, uint64_t *sizes) {
  size_t i;
  int rc = GM_OK;
  run_tl_t t = run_tl(tl);
  for (i = 0; i < n; i++) {
    rc = apply(a, &ops[i], oom, addr);
    if (rc != GM_OK) break;
    if (sizes) sizes[i] = a->freed; /* read for frees alone */
    if ((rc = ran(a, &t, i, ops[i].kind)) != GM_OK) {
      i++;
      break;
    }
  }
  *done = i;
  return rc;
}

/* run_packed is gm_run_packed, made twice: sized says whether sizes is
 * NULL, so that the loop without it has a register more (it keeps many
 * across the policy's calls). */
__attribute__((always_inline)) static inline int run_packed(gm_alloc_t *a, gm_unpack_t *u, const uint8_t *b,
                                                            size_t len, size_t n, size_t *done, size_t *used,
                                                            gm_oom_t *oom, gm_timeline_t *tl, gm_op_t *ops,
                                                            int32_t *event, uint64_t *sizes, const int sized) {
  const uint8_t *p = b, *end = b + len;
  uint32_t ev = (uint32_t)u->event; /* uint32: the Event's deltas wrap */
  int32_t st = u->stack;
  size_t i;
  int rc = GM_OK;
  run_tl_t t = run_tl(tl);
  for (i = 0; i < n && p < end; i++) {
    const uint8_t *q = gm_pk_read(u->sizes, p, &ops[i], &ev, &st);
    event[i] = (int32_t)ev;
    if (q > end) { /* a log cut short or garbled: the op is not whole */
      p = q;       /* *used > len says so */
      rc = GM_EINVAL;
      break;
    }
    rc = apply(a, &ops[i], oom, NULL);
    if (rc != GM_OK) break;
    p = q;
    if (sized) sizes[i] = a->freed; /* read for frees alone */
    if ((rc = ran(a, &t, i, ops[i].kind)) != GM_OK) {
      i++;
      break;
    }
  }
  *done = i;
  *used = (size_t)(p - b);
  u->event = (int32_t)ev;
  u->stack = st;
  return rc;
}

/* gm_run_packed is gm_run reading each op from the packed log as it
 * goes, into the array the caller wants the ops in: no pass of gm_unpack
 * writes the array first for this loop to read back, 40 bytes an op, from
 * beyond the core's first cache. */
int gm_run_packed(gm_alloc_t *a, gm_unpack_t *u, const uint8_t *b, size_t len, size_t n,
                  size_t *done, size_t *used, gm_oom_t *oom, gm_timeline_t *tl, gm_op_t *ops,
                  int32_t *event, uint64_t *sizes) {
  if (sizes) return run_packed(a, u, b, len, n, done, used, oom, tl, ops, event, sizes, 1);
  return run_packed(a, u, b, len, n, done, used, oom, tl, ops, event, NULL, 0);
}

/* each_stat calls f on each of s's stats: the nine kept per pool kind
 * (n = 3: all, small, large) and the two oversize ones (n = 1). */
static void each_stat(gm_stats_t *s, void (*f)(gm_stat_t *, int n)) {
  f(s->allocation, 3);
  f(s->segment, 3);
  f(s->active, 3);
  f(s->inactive_split, 3);
  f(s->allocated_bytes, 3);
  f(s->reserved_bytes, 3);
  f(s->active_bytes, 3);
  f(s->inactive_split_bytes, 3);
  f(s->requested_bytes, 3);
  f(&s->oversize_allocations, 1);
  f(&s->oversize_segments, 1);
}

/* The totals a->st leaves out (gm_policy.h, "statistics"), filled in. */
static void fill_totals(gm_stat_t *s, int n) {
  if (n == 3) s[GM_STAT_ALL].allocated = s[GM_STAT_LARGE].allocated + s[GM_STAT_SMALL].allocated;
  for (int i = 0; i < n; i++) s[i].freed = s[i].allocated - s[i].current;
}

void gm_get_stats(const gm_alloc_t *a, gm_stats_t *s) {
  *s = a->st;
  each_stat(s, fill_totals);
}

const char *gm_backend_error(const gm_alloc_t *a) {
  const char *m = a->be.error ? a->be.error(a->be.ctx) : NULL;
  return m ? m : "";
}

int gm_mem_info(const gm_alloc_t *a, uint64_t *free_bytes, uint64_t *total_bytes) {
  return a->be.mem_info(a->be.ctx, free_bytes, total_bytes);
}

void gm_get_extra(const gm_alloc_t *a, gm_extra_t *e) {
  *e = a->ex;
}

static void reset_arr(gm_stat_t *s, int n) {
  for (int i = 0; i < n; i++) s[i].peak = s[i].current;
}

void gm_reset_peak(gm_alloc_t *a) {
  each_stat(&a->st, reset_arr);
}

uint64_t gm_largest_free(const gm_alloc_t *a) {
  uint64_t best = 0;
  for (const gm_seg_t *s = a->segs; s; s = s->next_seg)
    for (const gm_block_t *b = s->head; b; b = b->next)
      if (b->mapped && gm_idle_free(b) && b->size > best) best = b->size;
  return best;
}

int gm_placement_ties(const gm_alloc_t *a) { return a->placement_ties; }

/* ------------------------------------------------------------------ */
/* seeding a truncated trace's starting state                          */

/* A policy without a seed hook did not lay memory out as the recording
 * did: it gets each live block by its own malloc, as it would have when the
 * block was allocated (nocache: one device allocation per block, so freeing
 * one block never touches another's memory). Pending blocks are then freed
 * without completing. */
static int seed_by_malloc(gm_alloc_t *a, uint64_t stream, const gm_seed_block_t *blocks, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const gm_seed_block_t *sb = &blocks[i];
    uint64_t want = sb->requested ? sb->requested : sb->size;
    if (!want) want = GM_MIN_BLOCK;
    gm_block_t *b = NULL;
    const gm_request_t rq = {.size = want, .stream = stream};
    int rc = do_malloc(a, &rq, &b, NULL);
    if (rc != GM_OK) return rc;
    b->id = sb->id;
    a->ids[sb->id] = b;
    if (sb->pending) {
      uncount_allocation(a, b);
      gm_pend_push(a, b);
    } else {
      gm_live_add(a, want);
    }
  }
  return GM_OK;
}

int gm_seed_segment(gm_alloc_t *a, uint64_t hint, uint64_t size, uint64_t stream, int small,
                    const gm_seed_block_t *blocks, size_t n) {
  if (size == 0 || size % GM_MIN_BLOCK) return GM_EINVAL;
  for (size_t i = 0; i < n; i++) {
    if (blocks[i].offset % GM_MIN_BLOCK || blocks[i].offset >= size) return GM_EINVAL;
    if (i && blocks[i].offset <= blocks[i - 1].offset) return GM_EINVAL;
    if (ensure_id(a, blocks[i].id) != GM_OK || a->ids[blocks[i].id]) return GM_EINVAL;
  }
  if (a->pol->seed) return a->pol->seed(a, hint, size, stream, small, blocks, n);
  return seed_by_malloc(a, stream, blocks, n);
}
