/* gm_treap.c — the ordered sets of free and unmapped blocks.
 *
 * PyTorch keeps them in std::set; what matters for exact replay is the
 * order and lower_bound, so any balanced search tree does. A treap is the
 * shortest one to get right: a binary search tree by key that is also a
 * heap by a random priority. Nodes are the blocks themselves (intrusive),
 * so inserting or erasing never allocates. Everything here is static inline
 * so that every use is compiled with its comparator inlined: these run on
 * every alloc and free. */
#ifndef GM_TREAP_H
#define GM_TREAP_H

#include "gm_internal.h"

typedef int (*gm_cmp_fn)(const gm_block_t *a, const gm_block_t *b);

/* (stream, size, ptr): PyTorch's BlockComparatorSize. Size and address
 * compare as one 128-bit number: fewer branches on the hottest path. */
static inline int gm_cmp_size(const gm_block_t *a, const gm_block_t *b) {
  if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
  unsigned __int128 x = ((unsigned __int128)a->size << 64) | a->ptr;
  unsigned __int128 y = ((unsigned __int128)b->size << 64) | b->ptr;
  return (x > y) - (x < y);
}

/* (stream, ptr): PyTorch's BlockComparatorAddress. */
static inline int gm_cmp_addr(const gm_block_t *a, const gm_block_t *b) {
  if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
  if (a->ptr != b->ptr) return a->ptr < b->ptr ? -1 : 1;
  return 0;
}

/* split t into keys < n (l) and keys > n (r). */
static inline void split(gm_block_t *t, const gm_block_t *n, gm_cmp_fn cmp, gm_block_t **l,
                  gm_block_t **r) {
  while (t) {
    if (cmp(t, n) < 0) {
      *l = t;
      l = &t->right;
      t = t->right;
    } else {
      *r = t;
      r = &t->left;
      t = t->left;
    }
  }
  *l = *r = NULL;
}

/* merge l and r, all keys of l below all keys of r. */
static inline gm_block_t *merge(gm_block_t *l, gm_block_t *r) {
  gm_block_t *root = NULL, **link = &root;
  while (l && r) {
    if (l->prio > r->prio) {
      *link = l;
      link = &l->right;
      l = l->right;
    } else {
      *link = r;
      link = &r->left;
      r = r->left;
    }
  }
  *link = l ? l : r;
  return root;
}

static inline void gm_treap_insert(gm_block_t **root, gm_block_t *n, gm_cmp_fn cmp) {
  gm_block_t **link = root;
  while (*link && (*link)->prio > n->prio)
    link = cmp(n, *link) < 0 ? &(*link)->left : &(*link)->right;
  split(*link, n, cmp, &n->left, &n->right);
  *link = n;
}

static inline void gm_treap_erase(gm_block_t **root, gm_block_t *n, gm_cmp_fn cmp) {
  gm_block_t **link = root;
  while (*link && *link != n)
    link = cmp(n, *link) < 0 ? &(*link)->left : &(*link)->right;
  if (*link) *link = merge(n->left, n->right);
  n->left = n->right = NULL;
}

static inline gm_block_t *gm_treap_lower_bound(gm_block_t *t, const gm_block_t *key, gm_cmp_fn cmp) {
  gm_block_t *best = NULL;
  while (t) {
    if (cmp(t, key) >= 0) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  return best;
}

/* The link (pointer to the child pointer) of the smallest element >= key,
 * or NULL: erasing through it needs no second descent. *pred gets the
 * largest element < key (or NULL), found on the same path: the last node
 * the descent turned right at. */
static inline gm_block_t **gm_treap_lower_bound_link(gm_block_t **link, const gm_block_t *key,
                                                     gm_cmp_fn cmp, gm_block_t **pred) {
  gm_block_t **best = NULL;
  *pred = NULL;
  while (*link) {
    if (cmp(*link, key) >= 0) {
      best = link;
      link = &(*link)->left;
    } else {
      *pred = *link;
      link = &(*link)->right;
    }
  }
  return best;
}

/* The link that points at n and n's successor (or NULL): the last node
 * the descent turned left at, or the leftmost node under n. NULL if n is
 * not a member. */
static inline gm_block_t **gm_treap_find_link(gm_block_t **link, const gm_block_t *n, gm_cmp_fn cmp,
                                              gm_block_t **succ) {
  *succ = NULL;
  while (*link != n) {
    if (!*link) return NULL;
    if (cmp(n, *link) < 0) {
      *succ = *link;
      link = &(*link)->left;
    } else {
      link = &(*link)->right;
    }
  }
  for (gm_block_t *t = n->right; t; t = t->left) *succ = t;
  return link;
}

/* Put n where old is, with old's children and priority. The caller makes
 * sure n's key lies strictly between old's neighbours in the order, so the
 * tree stays ordered, and the heap order holds as n takes old's priority
 * (priorities only need to be random and independent of the keys). Saves
 * an erase and an insert when a block's key changes but not its rank. */
static inline void gm_treap_replace_at(gm_block_t **link, gm_block_t *old, gm_block_t *n) {
  n->left = old->left;
  n->right = old->right;
  n->prio = old->prio;
  old->left = old->right = NULL;
  *link = n;
}

/* Erase the element a link points at. */
static inline void gm_treap_erase_at(gm_block_t **link) {
  gm_block_t *n = *link;
  *link = merge(n->left, n->right);
  n->left = n->right = NULL;
}

static inline gm_block_t *gm_treap_before(gm_block_t *t, const gm_block_t *key, gm_cmp_fn cmp) {
  gm_block_t *best = NULL;
  while (t) {
    if (cmp(t, key) < 0) {
      best = t;
      t = t->right;
    } else {
      t = t->left;
    }
  }
  return best;
}

static inline gm_block_t *gm_treap_after(gm_block_t *t, const gm_block_t *n, gm_cmp_fn cmp) {
  gm_block_t *best = NULL;
  while (t) {
    if (cmp(t, n) > 0) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  return best;
}

static inline size_t gm_treap_count(const gm_block_t *t) {
  return t ? 1 + gm_treap_count(t->left) + gm_treap_count(t->right) : 0;
}

static inline size_t list_into(gm_block_t *t, gm_block_t **out, size_t cap, size_t k) {
  if (!t) return k;
  k = list_into(t->left, out, cap, k);
  if (k < cap) out[k] = t;
  k++;
  return list_into(t->right, out, cap, k);
}

static inline size_t gm_treap_list(gm_block_t *t, gm_block_t **out, size_t cap) {
  size_t k = list_into(t, out, cap, 0);
  return k < cap ? k : cap;
}

#endif
