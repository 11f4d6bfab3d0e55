package replay

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The free sets answer as a sorted list of blocks searched one by one
// would: a take gives back the block of that size and address added last,
// and the sums of a range are those of its blocks, under random adds,
// takes, removals and ranges (few sizes and addresses: many ties).
func TestFreeTreeAsList(t *testing.T) {
	for _, classes := range []int{0, 40, 70} { // no class, a word of them, two
		// sets that are treaps, lists, and lists that become treaps
		for _, lists := range []int{0, 4, listMax} {
			testFreeTree(t, classes, lists)
		}
	}
}

func testFreeTree(t *testing.T, classes, lists int) {
	type blk struct {
		size, addr, seq uint64
		seg, class      int32
	}
	rng := rand.New(rand.NewPCG(3, uint64(classes)))
	tr := newFreeTree(classes, true)
	tr.listMax = lists
	var root int32
	var list []blk // in key order
	less := func(a, b blk) int {
		if keyLess(a.size, a.addr, a.seq, b.size, b.addr, b.seq) {
			return -1
		}
		return 1
	}
	for step := range 20000 {
		size, addr := uint64(1+rng.IntN(40)), uint64(rng.IntN(8))
		switch op := rng.IntN(4); {
		case op == 3 && len(list) > 0: // one block, by its key
			i := rng.IntN(len(list))
			b := list[i]
			root = tr.remove(root, b.size, b.addr, b.seq)
			list = slices.Delete(list, i, i+1)
		case op == 0 || len(list) == 0:
			seg, class := int32(rng.IntN(100)), int32(rng.IntN(classes+20))-20
			if class < 0 {
				class = -1
			}
			var x int32
			root, x = tr.add(root, size, addr, seg, class)
			b := blk{size, addr, tr.nodes[x].seq, seg, class}
			i, _ := slices.BinarySearchFunc(list, b, less)
			list = slices.Insert(list, i, b)
		case op == 1:
			if rng.IntN(2) == 0 { // a block that is there
				b := list[rng.IntN(len(list))]
				size, addr = b.size, b.addr
			}
			var x int32
			root, x = tr.take(root, size, addr)
			i := slices.IndexFunc(list, func(b blk) bool { return b.size == size && b.addr == addr })
			switch {
			case i < 0 && x != 0, i >= 0 && x == 0:
				t.Fatalf("%d classes, lists of %d, step %d: take(%d, %d) found node %d, the list %d", classes, lists, step, size, addr, x, i)
			case i >= 0:
				if nd := tr.nodes[x]; nd.seq != list[i].seq || nd.seg != list[i].seg {
					t.Fatalf("%d classes, lists of %d, step %d: take(%d, %d) took seq %d, the list %d", classes, lists, step, size, addr, nd.seq, list[i].seq)
				}
				list = slices.Delete(list, i, i+1)
			}
		default:
			q := freeRange{lo: size, hiSize: uint64(rng.IntN(45)), hiAddr: uint64(rng.IntN(8)), hiInf: rng.IntN(4) == 0}
			got := freeSum{minSeg: math.MaxInt32, mask: make([]uint64, tr.words)}
			var gotOpen []int32
			got.each = func(seg int32) { gotOpen = append(gotOpen, seg) }
			tr.sum(root, &q, &got)
			want := freeSum{minSeg: math.MaxInt32, mask: make([]uint64, tr.words)}
			var wantOpen []int32
			for _, b := range list {
				if b.size < q.lo || !q.hiInf && (b.size > q.hiSize || b.size == q.hiSize && b.addr >= q.hiAddr) {
					continue
				}
				want.n++
				if b.class < 0 {
					want.open++
					wantOpen = append(wantOpen, b.seg)
				} else {
					want.minSeg = min(want.minSeg, b.seg)
					want.mask[b.class/64] |= 1 << (b.class % 64)
				}
			}
			slices.Sort(gotOpen)
			slices.Sort(wantOpen)
			if got.n != want.n || got.open != want.open || got.minSeg != want.minSeg || !slices.Equal(got.mask, want.mask) || !slices.Equal(gotOpen, wantOpen) {
				t.Fatalf("%d classes, lists of %d, step %d: sum of %+v: %d blocks, %d open %v, min %d, mask %x; want %d, %d %v, %d, %x", classes, lists, step, q,
					got.n, got.open, gotOpen, got.minSeg, got.mask, want.n, want.open, wantOpen, want.minSeg, want.mask)
			}
			if tr.any(root, &q) != (want.n > 0) {
				t.Fatalf("%d classes, lists of %d, step %d: any of %+v: %v, want %v", classes, lists, step, q, !(want.n > 0), want.n > 0)
			}
		}
		n := len(list)
		switch {
		case root < 0:
			n = len(tr.list(root))
		case root == 0:
			n = 0
		case tr.sums:
			n = int(tr.nodes[root].n)
		}
		if n != len(list) {
			t.Fatalf("%d classes, lists of %d, step %d: the set holds %d blocks, the list %d", classes, lists, step, n, len(list))
		}
	}
}

// The treap's adds, takes and removals build the very treap that a split
// and merges around the key would (refAdd, refDrop), and a list holds
// that treap's nodes in order, becoming that treap when it outgrows
// listMax: the shape decides the order the sums hand blocks of no class
// to freeSum.each.
func TestFreeTreeShape(t *testing.T) {
	for _, classes := range []int{40, 70} { // a word of classes, two
		for _, lists := range []int{0, 8} {
			testFreeTreeShape(t, classes, lists)
		}
	}
}

func testFreeTreeShape(t *testing.T, classes, lists int) {
	rng := rand.New(rand.NewPCG(5, uint64(classes)))
	got, want := newFreeTree(classes, true), newFreeTree(classes, true)
	got.listMax = lists
	var gr, wr int32
	var keys [][3]uint64
	for step := range 20000 {
		size, addr := uint64(1+rng.IntN(40)), uint64(rng.IntN(8))
		switch op := rng.IntN(3); {
		case op == 0 || len(keys) == 0:
			seg, class := int32(rng.IntN(100)), int32(rng.IntN(classes+20))-20
			class = max(class, -1)
			var x int32
			gr, x = got.add(gr, size, addr, seg, class)
			wr = want.refAdd(wr, size, addr, seg, class)
			keys = append(keys, [3]uint64{size, addr, got.nodes[x].seq})
		case op == 1:
			gr, _ = got.take(gr, size, addr)
			wr = want.refDrop(wr, size, addr, math.MaxUint64, true)
		default:
			i := rng.IntN(len(keys))
			k := keys[i]
			keys = slices.Delete(keys, i, i+1)
			gr = got.remove(gr, k[0], k[1], k[2])
			wr = want.refDrop(wr, k[0], k[1], k[2], false)
		}
		if gr < 0 && !slices.Equal(got.listNodes(gr), want.inOrder(wr, nil)) || gr >= 0 && !sameTreap(got, want, gr, wr) {
			t.Fatalf("%d classes, lists of %d, step %d: the sets differ", classes, lists, step)
		}
	}
}

// listNodes is the nodes of list set, in key order.
func (t *freeTree) listNodes(set int32) []int32 {
	var l []int32
	for _, e := range t.list(set) {
		if nd := &t.nodes[e.node]; nd.size != e.size || nd.addr != e.addr {
			panic("a list's key is not its node's")
		}
		l = append(l, e.node)
	}
	return l
}

// inOrder appends the nodes of treap x to l in order.
func (t *freeTree) inOrder(x int32, l []int32) []int32 {
	if x == 0 {
		return l
	}
	l = t.inOrder(t.nodes[x].l, l)
	return t.inOrder(t.nodes[x].r, append(l, x))
}

func sameTreap(a, b *freeTree, x, y int32) bool {
	if x == 0 || y == 0 {
		return x == y
	}
	p, q := a.nodes[x], b.nodes[y]
	if p.size != q.size || p.addr != q.addr || p.seq != q.seq || p.prio != q.prio || p.n != q.n ||
		p.open != q.open || p.minSeg != q.minSeg || !slices.Equal(a.maskOf(x), b.maskOf(y)) {
		return false
	}
	return sameTreap(a, b, p.l, q.l) && sameTreap(a, b, p.r, q.r)
}

// refAdd is add as a split at the key and two merges.
func (t *freeTree) refAdd(root int32, size, addr uint64, seg, class int32) int32 {
	t.seq++
	x := t.newNode(size, addr, t.seq, seg, class)
	t.pull(x)
	l, r := t.split(root, size, addr, t.seq)
	return t.merge(t.merge(l, x), r)
}

// refDrop is drop as a split at the key, the removal of the right part's
// first node, and a merge.
func (t *freeTree) refDrop(root int32, size, addr, seq uint64, same bool) int32 {
	l, r := t.split(root, size, addr, seq)
	if r == 0 {
		return l
	}
	x := r
	for t.nodes[x].l != 0 {
		x = t.nodes[x].l
	}
	if nd := &t.nodes[x]; same && (nd.size != size || nd.addr != addr) {
		return t.merge(l, r)
	}
	r = t.refDropFirst(r)
	t.spare = append(t.spare, x)
	return t.merge(l, r)
}

func (t *freeTree) refDropFirst(x int32) int32 {
	nd := &t.nodes[x]
	if nd.l == 0 {
		return nd.r
	}
	nd.l = t.refDropFirst(nd.l)
	t.pull(x)
	return x
}

// maskOf is the classes in node x's subtree.
func (t *freeTree) maskOf(x int32) []uint64 {
	m := make([]uint64, t.words)
	if t.words > 0 {
		t.orMask(m, x)
	}
	return m
}
