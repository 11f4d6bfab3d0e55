"""What PyTorch's CUDA kernels allocate inside themselves through the
caching allocator, which a fake-tensor run does not see (docs/estimate.md,
"rules"): the staging buffer and semaphores of a reduction that takes
Reduce.cuh's global path, and memory-efficient attention's backward
scratch. Each rule reproduces how PyTorch 2.11 sizes the blocks and was
checked against calls recorded on the H200
(scripts/estimate/kernel_scratch_probe.py).

A rule gives the op's allocator events in order, as the recorded tables
do: ("o",) where the op's outputs are allocated, ("a", J, BYTES) a block
the kernel takes and ("f", J) its free. No torch import here: the rules
take shapes, strides and dtypes, so they run without the emulator."""

WARP = 32

# bytes of an element, by torch dtype name
_ELEM = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4, "int16": 2,
         "int8": 1, "uint8": 1, "bool": 1, "complex64": 8}
_HALF = ("float16", "bfloat16")

# The reductions whose kernels are Reduce.cuh's gpu_reduce_kernel, by aten
# op: the bytes of the kernel's accumulator (arg_t) for an input dtype, and
# the input's vector size (input_vec_size: vt0 of the kernel's launch).
# sum, mean and linalg_vector_norm accumulate in float for 16-bit floats
# (acc_type); amax and amin in the input's type; var and std in a Welford
# state of float mean, m2, nf and an int32 count (16 bytes; 2 elements a
# thread). Measured: sum, mean, amax, var, linalg_vector_norm (fp32 and
# bf16); amin and std run the same kernels as amax and var.
def _acc(dt):
    return {"float32": 4, "float16": 4, "bfloat16": 4, "float64": 8}.get(dt, 8)


REDUCE_OPS = {
    "aten.sum.dim_IntList": (_acc, 4), "aten.sum.default": (_acc, 4),
    "aten.mean.dim": (_acc, 4), "aten.mean.default": (_acc, 4),
    "aten.linalg_vector_norm.default": (_acc, 4),
    "aten.amax.default": (lambda dt: _ELEM[dt], 4), "aten.amin.default": (lambda dt: _ELEM[dt], 4),
    "aten.var.correction": (lambda dt: 16 if dt in ("float32",) + _HALF else None, 2),
    "aten.std.correction": (lambda dt: 16 if dt in ("float32",) + _HALF else None, 2),
}


def _last_pow2(n):
    """Reduce.cuh's last_pow2: the largest power of 2 not above n, at least 1."""
    n = int(n)
    for s in (1, 2, 4, 8, 16):
        n |= n >> s
    return max(1, n - (n >> 1))


def _div_up(a, b):
    return (a + b - 1) // b


def reduction_iter(shape, strides, reduced):
    """TensorIterator's view of a reduction: the input's shape and byte
    strides and the output's (0 on reduced dimensions, contiguous
    elsewhere), reordered (reduced dimensions first, then by stride:
    reorder_dimensions) and coalesced (coalesce_dimensions). Returns
    (shape, input strides, output strides), fastest dimension first."""
    nd = len(shape)
    out = [0] * nd
    acc = 1
    for d in range(nd - 1, -1, -1):
        if d in reduced and shape[d] != 1:
            continue
        out[d] = acc
        acc *= shape[d]
    ops = [out, list(strides)]

    def should_swap(d0, d1):
        for a, st in enumerate(ops):
            s0, s1 = st[d0], st[d1]
            if a == 0 and (s0 == 0) != (s1 == 0):  # the output: reduced dimensions to the front
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(nd - 1, -1, -1))
    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    sh = [shape[p] for p in perm]
    ops = [[st[p] for p in perm] for st in ops]
    if nd > 1:
        prev = 0
        for d in range(1, nd):
            s0, s1 = sh[prev], sh[d]
            if s0 == 1 or s1 == 1 or all(s0 * st[prev] == st[d] for st in ops):
                if sh[prev] == 1:
                    for st in ops:
                        st[prev] = st[d]
                sh[prev] *= sh[d]
            else:
                prev += 1
                if prev != d:
                    for st in ops:
                        st[prev] = st[d]
                    sh[prev] = sh[d]
        nd = prev + 1
        sh = sh[:nd]
        ops = [st[:nd] for st in ops]
    return sh, ops[1], ops[0]


def reduce_config(shape, strides, elem, offset, reduced, arg_size, vec_in, sms, threads_per_sm,
                  max_threads=512):
    """Reduce.cuh's setReduceConfig for an input of this shape, element
    strides, element size and storage offset reduced over the dimensions
    `reduced`. Returns a dict of the config, with the global memory's and
    the semaphores' bytes (0, 0 without a global reduction)."""
    if any(n == 0 for n in shape):
        return None  # no kernel
    bstrides = [s * elem for s in strides]
    sh, ist, ost = reduction_iter(list(shape), bstrides, set(reduced))
    ndim = len(sh)
    numel = 1
    for n in sh:
        numel *= n
    big = (1 << 31) - 1  # can_use_32bit_indexing, else gpu_reduce_kernel runs sub-iterators
    if numel > big or any(1 + sum((n - 1) * s for n, s in zip(sh, st)) > big for st in (ist, [s * elem for s in ost])):
        return "split"
    num_outputs = 1
    for n, s in zip(sh, ost):
        if s != 0:
            num_outputs *= n
    nred = sum(1 for s in ost if s == 0)
    inputs_per_output = numel // num_outputs
    if ndim > 0:
        fastest = nred == ndim or ist[0] < ist[nred]
        if fastest:
            dim0, dim1, moving = inputs_per_output, num_outputs, ist[0]
        else:
            dim0, dim1, moving = num_outputs, inputs_per_output, ist[nred]
    else:
        fastest, moving, dim0, dim1 = True, elem, 1, 1
    vec_out = 1
    if moving == elem:
        if fastest and dim0 >= 128 and nred == 1:
            dim0 //= vec_in
        elif not fastest:
            v = 4  # get_output_vec_size
            for n in [offset, sh[nred]] + [s // elem for j, s in enumerate(ist) if j != nred]:
                while n % v:
                    v //= 2
            vec_out = v
            dim0 //= vec_out
    mnt = max_threads // vec_out
    d0 = _last_pow2(dim0) if dim0 < mnt else mnt
    d1 = _last_pow2(dim1) if dim1 < mnt else mnt
    bw = min(d0, WARP)
    bh = min(d1, mnt // bw)
    bw = min(d0, mnt // bh)
    threads = bw * bh
    step_in = step_out = 1
    in_mult = [0, 0, 0]
    if ndim == 0 or fastest:
        in_mult[0], step_in = step_in, step_in * bw
    else:
        step_out *= bw
    vpt = _div_up(inputs_per_output, step_in)
    if vpt >= min(bh * 16, 256):
        in_mult[1], step_in = step_in, step_in * bh
    else:
        step_out *= bh
    vpt = _div_up(inputs_per_output, step_in)
    target = sms * (threads_per_sm // threads)
    grid = _div_up(num_outputs // vec_out, step_out)
    ctas = 1
    if in_mult[1] != 0 and vpt >= 256 and grid <= target:
        ctas = max(min(_div_up(target, grid), _div_up(vpt, 16)), _div_up(vpt, 256))
        if ctas > 1:
            in_mult[2] = step_in
    cfg = {"block": (bw, bh), "grid": (grid, ctas), "vec_out": vec_out, "global": 0, "semaphores": 0}
    if in_mult[2]:
        size = arg_size * num_outputs * ctas
        if in_mult[0] == 0:
            size *= bw * vec_out
        cfg["global"], cfg["semaphores"] = size, 4 * grid
    return cfg


def reduction(op, shape, strides, dtype, offset, dims, sms, threads_per_sm):
    """The events of a Reduce.cuh reduction (op: an aten op's name; dims
    None: all), or a reason it is not modelled, or None: no scratch."""
    arg, vec_in = REDUCE_OPS[op]
    size = arg(dtype)
    if size is None or dtype not in _ELEM:
        return f"{op}: no rule for {dtype} reductions' scratch"
    nd = len(shape)
    if dims is None or len(dims) == 0:
        reduced = set(range(nd))
    else:
        reduced = {d % nd if nd else 0 for d in dims}
    cfg = reduce_config(shape, strides, _ELEM[dtype], offset, reduced, size, vec_in, sms, threads_per_sm)
    if cfg == "split":
        return f"{op}: a reduction past 32-bit indexing runs in parts (not modelled)"
    if cfg is None or not cfg["global"]:
        return None
    # buffer, then semaphores; freed as their DataPtrs go: semaphores first
    return [("o",), ("a", 0, cfg["global"]), ("a", 1, cfg["semaphores"]), ("f", 1), ("f", 0)]


def _contiguous(shape, strides):
    acc = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != acc:
            return False
        acc *= n
    return True


def efficient_attention_backward(grad_out, query, value, bias, dropout_p, cc):
    """_scaled_dot_product_efficient_attention_backward's scratch (the
    kernels of cutlassB.h for sm80 and later, attention_backward.cu).
    Each tensor is (shape, strides, dtype) in the op's B, nH, M, K order.
    Returns the events, or a reason it is not modelled."""
    (b, nh, m, k), _, dt = query
    kv = value[0][3]
    if cc[0] < 8:
        return "memory-efficient attention backward: no rule before compute capability 8.0"
    if bias is not None or dropout_p:
        return "memory-efficient attention backward: no rule with an attention bias or dropout"
    if dt not in ("float32",) + _HALF:
        return f"memory-efficient attention backward: no rule for {dt}"
    kmax = max(k, kv)
    # the first kernel of cutlassB.h's list that takes this head dimension
    # (the sequence-aligned variants have the same block sizes)
    if kmax <= 64:
        bi, bj = 64, 64
    elif kmax <= 128 and cc[0] >= 9:
        bi, bj = 128, (128 if dt in _HALF else 64)
    else:
        return f"memory-efficient attention backward: no rule for head dimension {kmax} on this card"
    elem = _ELEM[dt]
    gshape, gstrides, _ = grad_out
    seq = []
    n = 0
    # the kernel takes grad_out as B, M, nH, K: a copy if that is not contiguous
    bmhk = [gshape[0], gshape[2], gshape[1], gshape[3]]
    bmhk_st = [gstrides[0], gstrides[2], gstrides[1], gstrides[3]]
    copy = None
    if not _contiguous(bmhk, bmhk_st):
        copy, n = n, n + 1
        seq.append(("a", copy, b * m * nh * kv * elem))
    seq.append(("o",))
    if dt in _HALF:  # kKernelComputesDelta: an empty B, nH, M float
        delta = n
        seq.append(("a", delta, b * nh * m * 4))
        n += 1
    else:  # (grad_out * out).sum(-1).transpose(-2, -1).contiguous()
        prod, s, delta = n, n + 1, n + 2
        seq += [("a", prod, b * m * nh * kv * 4), ("a", s, b * m * nh * 4), ("a", delta, b * nh * m * 4),
                ("f", s), ("f", prod)]
        n += 3
    # workspace_size(): grad_q's accumulation tiles (kNeedsAccumGradQ: split
    # keys from sm70), each a 16-byte lock and counter and a BI x BJ float
    # tile; grad_k and grad_v are kept in registers (kOutputInRF, or the
    # output is float)
    tiles = _div_up(m, bi) * _div_up(k, bj)
    elems = tiles * (16 + bi * bj * 4) // 4
    ws = b * nh * _div_up(elems, 4) * 4 * 4
    seq += [("a", n, ws), ("f", delta), ("f", n)]
    if copy is not None:
        seq.append(("f", copy))
    return seq


# --- the emulator's side: from an op's arguments (fake tensors) ---

def _layout(t):
    return list(t.shape), list(t.stride()), str(t.dtype)[6:], t.storage_offset()


def _reduction_args(op, args, kwargs, card):
    x = args[0]
    if x.device.type != "cuda":
        return None
    if op in ("aten.sum.default", "aten.mean.default"):
        dims = None
    elif op == "aten.linalg_vector_norm.default":
        dims = args[2] if len(args) > 2 else kwargs.get("dim")
    else:
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
    shape, stride, dt, off = _layout(x)
    return reduction(op, shape, stride, dt, off, dims, card.sms, card.threads_per_sm)


def _efficient_attention_backward_args(op, args, kwargs, card):
    a = list(args) + [None] * (10 - len(args))
    dropout = a[9] if len(args) > 9 else kwargs.get("dropout_p", 0.0)
    return efficient_attention_backward(_layout(a[0])[:3], _layout(a[1])[:3], _layout(a[3])[:3], a[4], dropout,
                                        card.cc)


def no_scratch(op, args, kwargs):
    """Calls of the recorded tables' ops that take no scratch, whatever
    their shapes: embedding backward of at most 3072 indices without
    scale_grad_by_freq runs one kernel into its output
    (embedding_dense_backward_cuda; on the H200 the GPT programs' position
    embedding, 512 and 1024 indices, took no block beyond its output)."""
    if op != "aten.embedding_dense_backward.default":
        return False
    a = list(args) + [None] * (5 - len(args))
    scale = a[4] if len(args) > 4 else kwargs.get("scale_grad_by_freq", False)
    g, idx = a[0], a[1]
    return idx.numel() <= 3072 and not scale and _contiguous(list(g.shape), list(g.stride()))


# aten op -> rule(op, args, kwargs, card): the op's events, a reason it is
# not modelled, or None (no scratch); card has cc, sms, threads_per_sm
RULES = {n: _reduction_args for n in REDUCE_OPS}
RULES["aten._scaled_dot_product_efficient_attention_backward.default"] = _efficient_attention_backward_args
