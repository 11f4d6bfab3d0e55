/* gm_treap.c — the ordered sets of free and unmapped blocks.
 *
 * PyTorch keeps them in std::set; what matters for exact replay is the
 * order and lower_bound, so any balanced search tree does. A treap is the
 * shortest one to get right: a binary search tree by key that is also a
 * heap by a random priority. Nodes are the blocks themselves (intrusive),
 * so inserting or erasing never allocates. Each node also points at its
 * parent: a member the caller already holds (a neighbour being merged, the
 * block a search found) is erased without a descent from the root. And the
 * members are threaded in order (snext, sprev: a doubly linked list): the
 * member after or before one is one load away, not a walk up and down the
 * tree (best fit and the placement watch walk runs of equal blocks; a free
 * looks at its merged neighbour's successor). Insert finds both neighbours
 * on its way down, erase unlinks; a caller that knows a member near the
 * new one inserts from there instead (gm_treap_insert_after/_before). Everything here is static inline
 * so that every use is compiled with its comparator inlined: these run on
 * every alloc and free. */
#ifndef GM_TREAP_H
#define GM_TREAP_H

#include "gm_internal.h"

_Static_assert(offsetof(gm_block_t, right) == offsetof(gm_block_t, left) + sizeof(gm_block_t *),
               "gm_treap_insert finds right one pointer after left");

typedef int (*gm_less_fn)(const gm_block_t *a, const gm_block_t *b);

/* a < b in (stream, size, ptr): PyTorch's BlockComparatorSize. Size and
 * address compare as one 128-bit number, a borrow with no branch; streams
 * rarely differ, so their test predicts well. Every descent asks only
 * "less than", never a three-way comparison. */
static inline int gm_less_size(const gm_block_t *a, const gm_block_t *b) {
  if (a->stream != b->stream) return a->stream < b->stream;
  unsigned __int128 x = ((unsigned __int128)a->size << 64) | a->ptr;
  unsigned __int128 y = ((unsigned __int128)b->size << 64) | b->ptr;
  return x < y;
}

/* a < b in (stream, ptr): PyTorch's BlockComparatorAddress. */
static inline int gm_less_addr(const gm_block_t *a, const gm_block_t *b) {
  if (a->stream != b->stream) return a->stream < b->stream;
  return a->ptr < b->ptr;
}

/* split t into keys < n (l) and keys > n (r); the roots of both pieces
 * get parent `up`, n itself when it is being inserted above them. *lo and
 * *hi become the largest key < n and the smallest > n in t, when t has
 * them, and are left as they were otherwise: the last node put on each
 * side (a node put on the left lies in the right subtree of the one put
 * there before it, so after it in the order; the reverse on the right). */
static inline void split(gm_block_t *t, const gm_block_t *n, gm_less_fn less, gm_block_t *up,
                         gm_block_t **l, gm_block_t **r, gm_block_t **lo, gm_block_t **hi) {
  gm_block_t *lp = up, *rp = up;
  while (t) {
    if (less(t, n)) {
      *l = t;
      t->parent = lp;
      lp = t;
      l = &t->right;
      t = t->right;
    } else {
      *r = t;
      t->parent = rp;
      rp = t;
      r = &t->left;
      t = t->left;
    }
  }
  *l = *r = NULL;
  if (lp != up) *lo = lp;
  if (rp != up) *hi = rp;
}

/* The link of x's left (d == 0) or right (d == 1) child. */
static inline gm_block_t **gm_treap_child(gm_block_t *x, size_t d) { return &x->left + d; }

/* merge l and r, all keys of l below all keys of r, under parent up. */
static inline gm_block_t *merge(gm_block_t *l, gm_block_t *r, gm_block_t *up) {
  gm_block_t *root = NULL, **link = &root;
  while (l && r) {
    if (l->prio > r->prio) {
      *link = l;
      l->parent = up;
      up = l;
      link = &l->right;
      l = l->right;
    } else {
      *link = r;
      r->parent = up;
      up = r;
      link = &r->left;
      r = r->left;
    }
  }
  gm_block_t *rest = l ? l : r;
  *link = rest;
  if (rest) rest->parent = up;
  return root;
}

/* Thread n between lo and hi (either NULL at an end). */
static inline void gm_treap_thread(gm_block_t *n, gm_block_t *lo, gm_block_t *hi) {
  n->sprev = lo;
  n->snext = hi;
  if (lo) lo->snext = n;
  if (hi) hi->sprev = n;
}

static inline void gm_treap_insert(gm_block_t **root, gm_block_t *n, gm_less_fn less) {
  gm_block_t **link = root, *up = NULL;
  /* the nearest ancestors above and below n (near[0], near[1]): its
   * neighbours in the order unless the subtree split below holds nearer
   * ones */
  gm_block_t *near[2] = {NULL, NULL};
  while (*link && (*link)->prio > n->prio) {
    up = *link;
    /* left or right by arithmetic, not a branch (a select gcc made a
     * branch at some inlined sites and a move at others) */
    size_t right = (size_t)!less(n, up);
    link = (gm_block_t **)((char *)up + offsetof(gm_block_t, left) + right * sizeof(gm_block_t *));
    near[right] = up;
  }
  gm_block_t *lo = near[1], *hi = near[0];
  split(*link, n, less, n, &n->left, &n->right, &lo, &hi);
  n->parent = up;
  *link = n;
  gm_treap_thread(n, lo, hi);
}

/* Insert n between lo and hi, members next to each other in the order
 * (lo->snext == hi; either NULL at an end) with lo < n < hi, without a
 * descent from the root: n goes in as a leaf where an in-order walk puts
 * it (lo's empty right child, or else hi's left one, which is then empty:
 * hi is the leftmost node of lo's right subtree), then rotates up while
 * its parent's priority is lower. A caller that knows a near neighbour
 * (a block just merged, the block a search found) gets n's place by a
 * short walk along the threads; the rotations are fewer than two on
 * average and touch only nodes around n, where a descent waits on a load
 * at every level. The tree's shape may differ from gm_treap_insert's
 * where priorities tie; order and heap order are the same. */
static inline void gm_treap_insert_between(gm_block_t **root, gm_block_t *n, gm_block_t *lo,
                                           gm_block_t *hi) {
  n->left = n->right = NULL;
  /* lo's right or hi's left, picked by arithmetic: a coin toss */
  size_t under_lo = lo && !lo->right;
  gm_block_t *p = under_lo ? lo : hi;
  *(p ? gm_treap_child(p, under_lo) : root) = n;
  gm_treap_thread(n, lo, hi);
  /* Each rotation picks its side by arithmetic, not a branch: which child
   * n is of p, and p of g, is a coin toss the predictor misses half the
   * time. child(x, d) is x's left (d = 0) or right (d = 1) link. */
  gm_block_t sink; /* takes the parent store of an absent subtree */
  while (p && p->prio < n->prio) {
    gm_block_t *g = p->parent;
    size_t d = p->right == n;           /* n is p's child on side d */
    gm_block_t *c = *gm_treap_child(n, !d); /* n's inner subtree goes to p */
    *gm_treap_child(p, d) = c;
    *gm_treap_child(n, !d) = p;
    (c ? c : &sink)->parent = p;
    p->parent = n;
    *(g ? gm_treap_child(g, g->right == p) : root) = n;
    p = g;
  }
  n->parent = p;
}

/* Insert n, found to rank right after member lo (lo < n), when its place
 * is at most `steps` members further on: the walk along the threads and
 * gm_treap_insert_between. 0, with nothing changed, when it is further:
 * the caller inserts from the root. */
static inline int gm_treap_insert_after(gm_block_t **root, gm_block_t *n, gm_block_t *lo,
                                        gm_less_fn less, int steps) {
  gm_block_t *hi = lo->snext;
  while (hi && less(hi, n)) {
    if (--steps < 0) return 0;
    lo = hi;
    hi = hi->snext;
  }
  gm_treap_insert_between(root, n, lo, hi);
  return 1;
}

/* The same from member hi with n < hi, walking back. */
static inline int gm_treap_insert_before(gm_block_t **root, gm_block_t *n, gm_block_t *hi,
                                         gm_less_fn less, int steps) {
  gm_block_t *lo = hi->sprev;
  while (lo && less(n, lo)) {
    if (--steps < 0) return 0;
    hi = lo;
    lo = lo->sprev;
  }
  gm_treap_insert_between(root, n, lo, hi);
  return 1;
}

/* The link (pointer to the child pointer) that points at member n: found
 * through its parent, with no descent from the root. */
static inline gm_block_t **gm_treap_link(gm_block_t **root, gm_block_t *n) {
  gm_block_t *up = n->parent;
  if (!up) return root;
  return gm_treap_child(up, up->right == n); /* a coin toss: no branch */
}

/* Erase the element a link points at. */
static inline void gm_treap_erase_at(gm_block_t **link) {
  gm_block_t *n = *link;
  *link = merge(n->left, n->right, n->parent);
  if (n->sprev) n->sprev->snext = n->snext;
  if (n->snext) n->snext->sprev = n->sprev;
  n->left = n->right = n->parent = n->snext = n->sprev = NULL;
}

/* Erase member n. */
static inline void gm_treap_erase(gm_block_t **root, gm_block_t *n) {
  gm_treap_erase_at(gm_treap_link(root, n));
}

/* The members right after and right before member n, or NULL: its
 * threads. */
static inline gm_block_t *gm_treap_next(const gm_block_t *n) { return n->snext; }

static inline gm_block_t *gm_treap_prev(const gm_block_t *n) { return n->sprev; }

static inline gm_block_t *gm_treap_lower_bound(gm_block_t *t, const gm_block_t *key, gm_less_fn less) {
  gm_block_t *best = NULL;
  while (t) {
    if (!less(t, key)) {
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
                                                     gm_less_fn less, gm_block_t **pred) {
  gm_block_t **best = NULL;
  *pred = NULL;
  while (*link) {
    if (!less(*link, key)) {
      best = link;
      link = &(*link)->left;
    } else {
      *pred = *link;
      link = &(*link)->right;
    }
  }
  return best;
}

/* Put n where old is, with old's children and priority. The caller makes
 * sure n's key lies strictly between old's neighbours in the order, so the
 * tree stays ordered, and the heap order holds as n takes old's priority
 * (priorities only need to be random and independent of the keys). Saves
 * an erase and an insert when a block's key changes but not its rank. */
static inline void gm_treap_replace_at(gm_block_t **link, gm_block_t *old, gm_block_t *n) {
  n->left = old->left;
  n->right = old->right;
  n->parent = old->parent;
  n->prio = old->prio;
  if (n->left) n->left->parent = n;
  if (n->right) n->right->parent = n;
  gm_treap_thread(n, old->sprev, old->snext);
  old->left = old->right = old->parent = old->snext = old->sprev = NULL;
  *link = n;
}

static inline gm_block_t *gm_treap_before(gm_block_t *t, const gm_block_t *key, gm_less_fn less) {
  gm_block_t *best = NULL;
  while (t) {
    if (less(t, key)) {
      best = t;
      t = t->right;
    } else {
      t = t->left;
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
