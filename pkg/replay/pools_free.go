package replay

import "math"

// This file holds the free blocks of pool inference's block model: for
// each stream and size class, a set ordered as best fit searches them
// (size, then address; among blocks of equal size and address, the last
// added first, which is the one a free takes back). A set of many blocks
// is a treap whose nodes sum up their subtrees, so that what a request
// passed over is asked of a range in time logarithmic in the blocks, not
// linear:
//
//   - how many blocks lie there, and how many of them belong to segments
//     of no class (enumerated one by one where each matters);
//   - of the blocks of classed segments (a class: the pool the snapshot
//     names for a segment alive at the end, or a label), the lowest
//     segment and the set of classes.
//
// Most sets hold a handful of blocks (a program frees and splits the same
// few), where a treap's descent, splits and sums cost more than the
// blocks: a set is a sorted list of its nodes while it holds listMax
// blocks or fewer, searched by halving, shifted in place and summed block
// by block, and becomes a treap, for good, when it outgrows that. A set is
// named by an int32: > 0 a treap's root node, < 0 the list ^set of
// freeTree.lists, 0 an empty set that is neither.

// listMax is the most blocks a set holds as a list.
const listMax = 32

// freeList is a set of listMax blocks or fewer, in key order: each
// block's size and address beside its node, so that a search reads the
// list alone (a node's seq is read only between blocks of one size and
// address, which only segments that share addresses make). Its room
// grows with it: a walk for claims keeps a set per pool and stream, of
// a few blocks most.
type freeList struct {
	ents []listEnt
}

type listEnt struct {
	size, addr uint64
	node       int32
}

// freeNode is one free block, and the sums of its subtree.
type freeNode struct {
	size, addr, seq uint64 // seq: the order blocks were added
	seg             int32
	class           int32 // -1: none
	l, r            int32
	prio            uint32
	n, open         int32  // blocks, and blocks of no class, in the subtree
	minSeg          int32  // the lowest segment of a classed block in the subtree
	mask            uint64 // the classes in the subtree, when they fit a word
}

// freeTree is the node store of the treaps of one walk; node 0 is none.
type freeTree struct {
	nodes []freeNode
	masks []uint64 // words per node: the classes in its subtree, when more than a word
	words int
	spare []int32
	path  []int32 // a scratch stack of the nodes above one
	// lists: the sets that are lists; free the indexes of those that
	// became treaps, for the next new set
	lists   []freeList
	free    []int32
	listMax int // the most blocks of a list: listMax, or fewer (0: every set is a treap)
	seq     uint64
	rng     uint32
	// sums: the nodes keep their subtrees' sums, which sum reads; a walk
	// that only asks any and takes blocks back keeps none
	sums bool
}

// newFreeTree is the node store of a walk whose blocks are of classes
// classes, keeping the sums sum reads when sums is set. Where no block
// has a class every block sum counts is handed to freeSum.each one by one
// anyway: the sums would save nothing, and are not kept.
func newFreeTree(classes int, sums bool) *freeTree {
	w := (classes + 63) / 64
	t := &freeTree{nodes: make([]freeNode, 1, 64), words: w, rng: 0x9e3779b9, sums: sums && classes > 0, listMax: listMax}
	if w > 1 {
		t.masks = make([]uint64, w, 64*w)
	}
	return t
}

// key order: size, address, then seq descending.
func keyLess(s1, a1, q1, s2, a2, q2 uint64) bool {
	if s1 != s2 {
		return s1 < s2
	}
	if a1 != a2 {
		return a1 < a2
	}
	return q1 > q2
}

// orMask adds the classes in node x's subtree to m.
func (t *freeTree) orMask(m []uint64, x int32) {
	if t.words == 1 {
		m[0] |= t.nodes[x].mask
		return
	}
	for i, w := range t.masks[int(x)*t.words : int(x+1)*t.words] {
		m[i] |= w
	}
}

// pull recomputes node x's sums from its children.
func (t *freeTree) pull(x int32) {
	if !t.sums {
		return
	}
	nodes := t.nodes
	nd := &nodes[x]
	n, open, minSeg, m := int32(1), int32(0), int32(math.MaxInt32), uint64(0)
	if nd.class < 0 {
		open = 1
	} else {
		minSeg = nd.seg
		m = 1 << (uint32(nd.class) % 64)
	}
	if c := nd.l; c != 0 {
		cn := &nodes[c]
		n, open, minSeg, m = n+cn.n, open+cn.open, min(minSeg, cn.minSeg), m|cn.mask
	}
	if c := nd.r; c != 0 {
		cn := &nodes[c]
		n, open, minSeg, m = n+cn.n, open+cn.open, min(minSeg, cn.minSeg), m|cn.mask
	}
	nd.n, nd.open, nd.minSeg = n, open, minSeg
	if t.words == 1 {
		nd.mask = m
		return
	}
	w := t.masks[int(x)*t.words : int(x+1)*t.words]
	clear(w)
	if nd.class >= 0 {
		w[uint32(nd.class)/64] |= 1 << (uint32(nd.class) % 64)
	}
	for _, c := range [2]int32{nd.l, nd.r} {
		if c != 0 {
			t.orMask(w, c)
		}
	}
}

// gainedMask adds class to the classes of node p's subtree, of more than
// a word.
func (t *freeTree) gainedMask(p, class int32) {
	t.masks[int(p)*t.words+int(uint32(class)/64)] |= 1 << (uint32(class) % 64)
}

// split splits the treap x into the blocks before the key and the rest.
func (t *freeTree) split(x int32, size, addr, seq uint64) (int32, int32) {
	if x == 0 {
		return 0, 0
	}
	nd := &t.nodes[x]
	if keyLess(nd.size, nd.addr, nd.seq, size, addr, seq) {
		l, r := t.split(nd.r, size, addr, seq)
		t.nodes[x].r = l
		t.pull(x)
		return x, r
	}
	l, r := t.split(nd.l, size, addr, seq)
	t.nodes[x].l = r
	t.pull(x)
	return l, x
}

func (t *freeTree) merge(a, b int32) int32 {
	if a == 0 {
		return b
	}
	if b == 0 {
		return a
	}
	if t.nodes[a].prio > t.nodes[b].prio {
		t.nodes[a].r = t.merge(t.nodes[a].r, b)
		t.pull(a)
		return a
	}
	t.nodes[b].l = t.merge(a, t.nodes[b].l)
	t.pull(b)
	return b
}

// add adds a block of segment seg (of class, -1 for none) to the set
// and returns the set's new name and the block's node.
func (t *freeTree) add(set int32, size, addr uint64, seg, class int32) (int32, int32) {
	t.seq++
	return t.addKey(set, size, addr, t.seq, seg, class)
}

// addKey is add with the block's seq given (a copy of a block in another
// set).
func (t *freeTree) addKey(set int32, size, addr, seq uint64, seg, class int32) (int32, int32) {
	x := t.newNode(size, addr, seq, seg, class)
	if set > 0 || t.listMax == 0 {
		return t.insert(set, x), x
	}
	if set == 0 { // a new list, in the place of one that became a treap if any
		if n := len(t.free); n > 0 {
			set, t.free = ^t.free[n-1], t.free[:n-1]
		} else {
			set = ^int32(len(t.lists))
			if n := len(t.lists); n < cap(t.lists) { // an earlier walk's list (passedClaims): its array reused
				t.lists = t.lists[:n+1]
				t.lists[n].ents = t.lists[n].ents[:0]
			} else {
				t.lists = append(t.lists, freeList{})
			}
		}
	}
	fl := &t.lists[^set]
	if n := len(fl.ents); n < t.listMax {
		// from the end, moving up the blocks after it: the moves a list
		// makes anyway, with no search before them
		if n < cap(fl.ents) {
			fl.ents = fl.ents[:n+1] // its length alone written
		} else {
			fl.ents = append(fl.ents, listEnt{})
		}
		l, j := fl.ents, n
		for ; j > 0 && !t.entLess(&l[j-1], size, addr, seq); j-- {
			l[j] = l[j-1]
		}
		l[j] = listEnt{size, addr, x}
		return set, x
	}
	// the same treap as if every block had gone into one (its priorities
	// decide its shape)
	root := t.insert(0, x)
	for _, y := range fl.ents {
		t.nodes[y.node].l, t.nodes[y.node].r = 0, 0
		root = t.insert(root, y.node)
	}
	fl.ents = fl.ents[:0]
	t.free = append(t.free, ^set)
	return root, x
}

// list is the blocks of list set, in key order.
func (t *freeTree) list(set int32) []listEnt { return t.lists[^set].ents }

// insertAt and deleteAt are slices.Insert and slices.Delete of one
// element, without Delete's clearing of the element let go (for the
// collector: these hold no pointer). The walk makes a few a segment.
func insertAt[E int32 | uint64](l []E, i int, x E) []E {
	l = append(l, x)
	copy(l[i+1:], l[i:])
	l[i] = x
	return l
}

func deleteAt[E int32 | uint64](l []E, i int) []E {
	copy(l[i:], l[i+1:])
	return l[:len(l)-1]
}

// entLess says whether list entry e is before the key (size, addr, seq).
func (t *freeTree) entLess(e *listEnt, size, addr, seq uint64) bool {
	return e.size < size || e.size == size && (e.addr < addr || e.addr == addr && t.nodes[e.node].seq > seq)
}

// lowerBound is the index in list l of its first block not before the
// key (size, addr, seq).
func (t *freeTree) lowerBound(l []listEnt, size, addr, seq uint64) int {
	lo, hi := 0, len(l)
	for lo < hi {
		if m := int(uint(lo+hi) >> 1); t.entLess(&l[m], size, addr, seq) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// insert puts node x, a block with no children, into the treap root and
// returns the new root.
func (t *freeTree) insert(root, x int32) int32 {
	nx := &t.nodes[x]
	size, addr, seq, prio, seg, class := nx.size, nx.addr, nx.seq, nx.prio, nx.seg, nx.class
	// down to where x goes (the treap of distinct priorities is one, however
	// built), adding x's block to the sums of the nodes on the way, then
	// split what is there into x's children
	var parent int32
	right := false
	nodes := t.nodes // once: a store through t would reload it
	for cur := root; ; {
		nd := &nodes[cur]
		if cur == 0 || nd.prio <= prio {
			l, r := t.split(cur, size, addr, seq)
			nodes[x].l, nodes[x].r = l, r
			break
		}
		if t.sums {
			if nd.n++; class < 0 {
				nd.open++
			} else if nd.minSeg = min(nd.minSeg, seg); t.words == 1 {
				nd.mask |= 1 << (uint32(class) % 64)
			} else {
				t.gainedMask(cur, class)
			}
		}
		parent, right = cur, keyLess(nd.size, nd.addr, nd.seq, size, addr, seq)
		if right {
			cur = nd.r
		} else {
			cur = nd.l
		}
	}
	t.pull(x)
	switch {
	case parent == 0:
		return x
	case right:
		nodes[parent].r = x
	default:
		nodes[parent].l = x
	}
	return root
}

// newNode takes a spare node (or a new one) for a block, with the next
// random priority, its children none and its sums not yet pulled.
func (t *freeTree) newNode(size, addr, seq uint64, seg, class int32) int32 {
	var x int32
	if k := len(t.spare); k > 0 {
		x, t.spare = t.spare[k-1], t.spare[:k-1]
	} else {
		x = int32(len(t.nodes))
		t.nodes = append(t.nodes, freeNode{})
		if t.words > 1 {
			t.masks = append(t.masks, make([]uint64, t.words)...)
		}
	}
	t.renew(x, size, addr, seq, seg, class)
	return x
}

// renew makes node x a block's, with the next random priority, its
// children none and its sums not yet pulled.
func (t *freeTree) renew(x int32, size, addr, seq uint64, seg, class int32) {
	t.rng ^= t.rng << 13
	t.rng ^= t.rng >> 17
	t.rng ^= t.rng << 5
	// field by field: its sums are pulled when it goes into a treap, and
	// a list reads none of them (the whole node written costs twice as
	// many stores)
	nd := &t.nodes[x]
	nd.size, nd.addr, nd.seq, nd.seg, nd.class, nd.prio = size, addr, seq, seg, class, t.rng
	nd.l, nd.r = 0, 0
}

// rekey is take of the block of size at addr added last, then, when that
// block is of segment seg, add of a block of nsize at naddr of seg (of
// class) in the node take let go, the one add would have taken: the set
// holds the blocks it would after the two (a treap's shape may differ:
// rekeyTreap), and moved says the node holds the new block. A list is
// searched once and shifted between the two places only (a split's or a
// merge's block moves a few places at most).
func (t *freeTree) rekey(set int32, size, addr, nsize, naddr uint64, seg, class int32) (int32, int32, bool) {
	if set > 0 {
		return t.rekeyTreap(set, size, addr, nsize, naddr, seg, class)
	}
	if set == 0 { // empty: no block to take
		return set, 0, false
	}
	l := t.lists[^set].ents
	i := 0 // from the start, as drop
	for i < len(l) && t.entLess(&l[i], size, addr, math.MaxUint64) {
		i++
	}
	if i == len(l) || l[i].size != size || l[i].addr != addr {
		return set, 0, false
	}
	x := l[i].node
	if t.nodes[x].seg != seg {
		set, x = t.take(set, size, addr)
		return set, x, false
	}
	t.seq++
	seq := t.seq
	t.renew(x, nsize, naddr, seq, seg, class)
	// the new block's place among the others: before it those before
	// its key, as add puts it
	j := i
	for ; j > 0 && !t.entLess(&l[j-1], nsize, naddr, seq); j-- {
		l[j] = l[j-1]
	}
	for ; j+1 < len(l) && t.entLess(&l[j+1], nsize, naddr, seq); j++ {
		l[j] = l[j+1]
	}
	l[j] = listEnt{nsize, naddr, x}
	return set, x, true
}

// pullLost recomputes the sums of the nodes of path, deepest first,
// which lost a classed block alone (of a word of classes): above a node
// whose lowest segment and classes stay as they were, those of the nodes
// above stay too, and only their counts fall.
func (t *freeTree) pullLost(path []int32) {
	i := len(path) - 1
	for ; i >= 0; i-- {
		nd := &t.nodes[path[i]]
		minSeg, mask := nd.minSeg, nd.mask
		t.pull(path[i])
		if nd.minSeg == minSeg && nd.mask == mask {
			break
		}
	}
	for nodes := t.nodes; i > 0; {
		i--
		nodes[path[i]].n--
	}
}

// pullPath recomputes the sums of the nodes of path, deepest first.
func (t *freeTree) pullPath(path []int32) {
	for i := len(path) - 1; i >= 0; i-- {
		t.pull(path[i])
	}
}

// drop removes from the set its first block not before the key (size,
// addr, seq), when there is one and, with same, it is of size at addr;
// it returns the set's new name and the node removed (0: none).
func (t *freeTree) drop(set int32, size, addr, seq uint64, same bool) (int32, int32) {
	if set >= 0 {
		return t.dropTreap(set, size, addr, seq, same)
	}
	fl := &t.lists[^set]
	l := fl.ents
	i := 0 // from the start: a list's few blocks, then as many moves
	for i < len(l) && t.entLess(&l[i], size, addr, seq) {
		i++
	}
	if i == len(l) {
		return set, 0
	}
	x := l[i].node
	if same && (l[i].size != size || l[i].addr != addr) {
		return set, 0
	}
	for ; i+1 < len(l); i++ {
		l[i] = l[i+1]
	}
	fl.ents = fl.ents[:len(l)-1]
	t.spare = append(t.spare, x)
	return set, x
}

// dropTreap is drop for the treap root.
func (t *freeTree) dropTreap(root int32, size, addr, seq uint64, same bool) (int32, int32) {
	at := t.lowerPath(root, size, addr, seq)
	if at < 0 {
		return root, 0
	}
	x := t.path[at]
	if nd := &t.nodes[x]; same && (nd.size != size || nd.addr != addr) {
		return root, 0
	}
	return t.unlinkAt(root, at), x
}

// lowerPath descends treap root to its first block not before the key
// (size, addr, seq), leaving the nodes on the way in t.path, and returns
// that block's index in it (-1: none). The blocks either side of it are
// asked of the path after (neighbours): kept in the loop they would take
// registers that its comparisons need.
func (t *freeTree) lowerPath(root int32, size, addr, seq uint64) (at int) {
	// a path holds distinct nodes, no more than the store's: with room for
	// them all the loop appends with no call to grow, whose spills and
	// reloads of the descent's state would cost a level more than its
	// comparisons
	nodes, path := t.nodes, t.path
	if cap(path) < len(nodes) {
		path = make([]int32, len(nodes)+len(nodes)/4)
	}
	path = path[:cap(path)]
	n := 0
	at = -1
	for cur := root; cur != 0; n++ {
		path[n] = cur
		nd := &nodes[cur]
		if nd.size < size || nd.size == size && (nd.addr < addr || nd.addr == addr && nd.seq > seq) {
			cur = nd.r
		} else {
			at, cur = n, nd.l
		}
	}
	t.path = path[:n]
	return at
}

// pred is the block before lowerPath's block t.path[at] (0: none).
// Below that block the descent went right only (its left subtree is all
// before the key): the path's last node when deeper, else the nearest
// node above it that the descent went right of.
func (t *freeTree) pred(at int) int32 {
	path := t.path
	if at < len(path)-1 {
		return path[len(path)-1]
	}
	for i := at - 1; i >= 0; i-- {
		if t.nodes[path[i]].r == path[i+1] {
			return path[i]
		}
	}
	return 0
}

// succ is the block after lowerPath's block t.path[at] (0: none): the
// leftmost of its right subtree, else the nearest node above it that the
// descent went left of.
func (t *freeTree) succ(at int) int32 {
	path := t.path
	if c := t.nodes[path[at]].r; c != 0 {
		for ; t.nodes[c].l != 0; c = t.nodes[c].l {
		}
		return c
	}
	for i := at - 1; i >= 0; i-- {
		if t.nodes[path[i]].l == path[i+1] {
			return path[i]
		}
	}
	return 0
}

// unlinkAt removes node t.path[at] (lowerPath's) from treap root, letting
// the node go, and returns the treap's new root.
func (t *freeTree) unlinkAt(root int32, at int) int32 {
	path := t.path
	x := path[at]
	nd := &t.nodes[x]
	m := t.merge(nd.l, nd.r)
	t.spare = append(t.spare, x)
	if at == 0 {
		return m
	}
	if p := &t.nodes[path[at-1]]; p.l == x {
		p.l = m
	} else {
		p.r = m
	}
	switch {
	case !t.sums:
	case nd.class < 0: // the nodes above lost a block of no class alone
		nodes := t.nodes // once: a store through t would reload it
		for _, p := range path[:at] {
			pn := &nodes[p]
			pn.n--
			pn.open--
		}
	case t.words == 1:
		t.pullLost(path[:at])
	default:
		t.pullPath(path[:at])
	}
	return root
}

// rekeyTreap is rekey for treap root. Where the block taken is of seg and
// class and its new key falls between the blocks either side of it, its
// node keeps its place and priority: the treap stays one, its sums
// unchanged (they count the same segment's block). A split's remainder
// or a merge's block keeps its place among its stream's blocks often,
// and the take and insert it saves (a merge, a split, a second descent,
// each pulling sums) cost many times the one descent.
func (t *freeTree) rekeyTreap(root int32, size, addr, nsize, naddr uint64, seg, class int32) (int32, int32, bool) {
	at := t.lowerPath(root, size, addr, math.MaxUint64)
	if at < 0 {
		return root, 0, false
	}
	x := t.path[at]
	xn := &t.nodes[x]
	if xn.size != size || xn.addr != addr {
		return root, 0, false
	}
	if xn.seg == seg && xn.class == class {
		// the new key on one side of the old one lies beyond x's neighbour
		// on the other: only the neighbour on its side is asked
		seq := t.seq + 1
		var stays bool
		if keyLess(nsize, naddr, seq, size, addr, xn.seq) {
			pred := t.pred(at)
			p := &t.nodes[pred]
			stays = pred == 0 || keyLess(p.size, p.addr, p.seq, nsize, naddr, seq)
		} else {
			succ := t.succ(at)
			s := &t.nodes[succ]
			stays = succ == 0 || keyLess(nsize, naddr, seq, s.size, s.addr, s.seq)
		}
		if stays {
			t.seq = seq
			xn.size, xn.addr, xn.seq = nsize, naddr, seq
			return root, x, true
		}
	}
	// take, then add in the node let go when it is seg's
	root = t.unlinkAt(root, at)
	if t.nodes[x].seg != seg {
		return root, x, false
	}
	t.spare = t.spare[:len(t.spare)-1] // x, let go last
	t.seq++
	t.renew(x, nsize, naddr, t.seq, seg, class)
	return t.insert(root, x), x, true
}

// take removes the block of size at addr added last from the set; it
// returns the set's new name and the node removed (0: none), whose fields
// stay readable until the next add.
func (t *freeTree) take(set int32, size, addr uint64) (int32, int32) {
	return t.drop(set, size, addr, math.MaxUint64, true)
}

// remove removes the block of key (size, addr, seq) from the set, which
// holds it, and returns the set's new name.
func (t *freeTree) remove(set int32, size, addr, seq uint64) int32 {
	set, _ = t.drop(set, size, addr, seq, false)
	return set
}

// freeRange is a range of blocks: sizes from lo on, before the block of
// size hiSize at hiAddr (hiInf: no end).
type freeRange struct {
	lo, hiSize, hiAddr uint64
	hiInf              bool
}

func (q *freeRange) below(nd *freeNode) bool { return q.belowKey(nd.size, nd.addr) }

// belowKey says whether a block of size at addr lies before the range's end.
func (q *freeRange) belowKey(size, addr uint64) bool {
	return q.hiInf || size < q.hiSize || size == q.hiSize && addr < q.hiAddr
}

// freeSum sums up the blocks of a range.
type freeSum struct {
	n, open int32
	minSeg  int32
	mask    []uint64
	each    func(seg int32) // when set, sees the segment of each block of no class
}

func (t *freeTree) sumNode(x int32, s *freeSum) {
	nd := &t.nodes[x]
	s.n++
	if nd.class < 0 {
		s.open++
		if s.each != nil {
			s.each(nd.seg)
		}
		return
	}
	s.minSeg = min(s.minSeg, nd.seg)
	s.mask[uint32(nd.class)/64] |= 1 << (uint32(nd.class) % 64)
}

// sumTree adds the blocks of the subtree x to s: its sums, read in a few
// lines where they are of a word of classes and no block of no class is
// to be handed to s.each (the most of sum's calls); else sumTreeSlow.
func (t *freeTree) sumTree(x int32, s *freeSum) {
	if x == 0 {
		return
	}
	nd := &t.nodes[x]
	if !t.sums || t.words != 1 || nd.open > 0 && s.each != nil {
		t.sumTreeSlow(x, s)
		return
	}
	s.n += nd.n
	s.open += nd.open
	s.minSeg = min(s.minSeg, nd.minSeg)
	s.mask[0] |= nd.mask
}

func (t *freeTree) sumTreeSlow(x int32, s *freeSum) {
	if x == 0 {
		return
	}
	nd := &t.nodes[x]
	if !t.sums { // no block has a class: each is handed to s.each, in order
		t.sumTreeSlow(nd.l, s)
		t.sumNode(x, s)
		t.sumTreeSlow(nd.r, s)
		return
	}
	s.n += nd.n
	s.open += nd.open
	s.minSeg = min(s.minSeg, nd.minSeg)
	if t.words > 0 {
		t.orMask(s.mask, x)
	}
	if s.each != nil && nd.open > 0 {
		t.eachOpen(x, s.each)
	}
}

// sum adds the blocks of the set in q to s, reading the set only: for a
// treap logarithmic, and linear in the blocks of no class handed to
// s.each.
func (t *freeTree) sum(set int32, q *freeRange, s *freeSum) {
	if set < 0 {
		l := t.list(set)
		for i := t.lowerBound(l, q.lo, 0, math.MaxUint64); i < len(l) && q.belowKey(l[i].size, l[i].addr); i++ {
			t.sumNode(l[i].node, s)
		}
		return
	}
	x := set
	for x != 0 {
		nd := &t.nodes[x]
		switch {
		case nd.size < q.lo:
			x = nd.r
		case !q.below(nd):
			x = nd.l
		default: // in range: the left subtree's part from lo, the right's before hi
			for y := nd.l; y != 0; {
				if yn := &t.nodes[y]; yn.size >= q.lo {
					t.sumTree(yn.r, s)
					t.sumNode(y, s)
					y = yn.l
				} else {
					y = yn.r
				}
			}
			t.sumNode(x, s)
			for y := nd.r; y != 0; {
				if yn := &t.nodes[y]; q.below(yn) {
					t.sumTree(yn.l, s)
					t.sumNode(y, s)
					y = yn.r
				} else {
					y = yn.l
				}
			}
			return
		}
	}
}

// any says whether the set has a block in q.
func (t *freeTree) any(set int32, q *freeRange) bool {
	if set < 0 {
		l := t.list(set)
		i := t.lowerBound(l, q.lo, 0, math.MaxUint64)
		return i < len(l) && q.belowKey(l[i].size, l[i].addr)
	}
	var first int32
	for x := set; x != 0; {
		if nd := &t.nodes[x]; nd.size >= q.lo {
			first, x = x, nd.l
		} else {
			x = nd.r
		}
	}
	return first != 0 && q.below(&t.nodes[first])
}

// eachOpen hands f the segment of each block of no class in x, in order.
func (t *freeTree) eachOpen(x int32, f func(seg int32)) {
	if x == 0 || t.nodes[x].open == 0 {
		return
	}
	nd := t.nodes[x]
	t.eachOpen(nd.l, f)
	if nd.class < 0 {
		f(nd.seg)
	}
	t.eachOpen(nd.r, f)
}
