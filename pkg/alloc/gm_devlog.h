/* gm_devlog.h — a log of what an allocator asked of its device.
 *
 * gm_devlog_start wraps an allocator's backend in a decorator that records
 * every successful cudaMalloc, cudaFree, map and unmap (the calls a PyTorch
 * trace records as segment_alloc, segment_free, segment_map and
 * segment_unmap) with the operation it happened in, so that a replay can be
 * compared with its recording. Address-space reservations are not logged:
 * PyTorch records none. The allocator's decisions do not change. */
#ifndef GM_DEVLOG_H
#define GM_DEVLOG_H

#include "gm_alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  GM_DEV_MALLOC = 1, /* segment_alloc */
  GM_DEV_FREE = 2,   /* segment_free */
  GM_DEV_MAP = 3,    /* segment_map */
  GM_DEV_UNMAP = 4   /* segment_unmap */
};

typedef struct gm_devlog_event {
  uint64_t op; /* the op it happened in (see gm_devlog_at) */
  uint64_t addr, size;
  uint32_t kind; /* GM_DEV_* */
} gm_devlog_event_t;

/* gm_devlog_start starts logging a's device calls; the log lives until
 * gm_free. Starting it twice is a no-op. Returns GM_ENOMEM. */
int gm_devlog_start(gm_alloc_t *a);

/* gm_devlog_at says that the next op to run is op number `op` of the
 * caller's stream: gm_run calls give it their first op's index, so events
 * carry stream indexes whatever ops ran or failed before. Until it is
 * called, ops count from the log's start. No-op without a log. */
void gm_devlog_at(gm_alloc_t *a, uint64_t op);

/* gm_devlog_events points *ev at the events logged so far (valid until the
 * next operation) and returns their number; 0 when no log was started. */
size_t gm_devlog_events(const gm_alloc_t *a, const gm_devlog_event_t **ev);

/* gm_devlog_clear empties the log (it goes on logging): a caller that has
 * read the events keeps the log as small as what one run logs. No-op
 * without a log. */
void gm_devlog_clear(gm_alloc_t *a);

#ifdef __cplusplus
}
#endif
/* gm_devlog_inner is the backend the log decorates, or a's own backend
 * when no log is on, and under a placement watch (gm_placement_watch) the
 * device the watch decorates: for code that must know which device it
 * runs on. */
const gm_backend_t *gm_devlog_inner(const gm_alloc_t *a);

#endif /* GM_DEVLOG_H */
