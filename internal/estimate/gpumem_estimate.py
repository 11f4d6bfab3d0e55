"""gpumem estimate's CUDA emulator (built into gpumem; see docs/estimate.md).

Imported by the sitecustomize gpumem puts on PYTHONPATH, before the script
runs. It makes CUDA tensors fake (torch's FakeTensorMode: shapes, dtypes and
storages, no data, no compute) while CPU tensors stay real, and serves every
allocation and free of a CUDA tensor's storage from gpumem's allocator
replica, over a pipe pair to the gpumem process (requests on one fd,
replies on the other; the protocol is in pkg/estimate/protocol.go). The
torch.cuda memory API answers from the replica; a full virtual card raises
torch.OutOfMemoryError at the allocation that fails.
"""
import array
import atexit
import collections
import json
import os
import sys
import threading
import time
import traceback
import weakref

_HERE = os.path.dirname(os.path.abspath(__file__))


class _Card:
    """The connection to gpumem's allocator replica."""

    def __init__(self, rfd, wfd):
        self.r = os.fdopen(rfd, "rb")
        self.w = os.fdopen(wfd, "wb", buffering=1 << 16)
        self.lock = threading.RLock()
        self.closed = False

    def send(self, line):
        if not self.closed:
            self.w.write(line.encode() + b"\n")

    def ask(self, line):
        with self.lock:
            if self.closed:
                raise RuntimeError("gpumem estimate: the virtual card is closed")
            self.send(line)
            self.w.flush()
            rep = self.r.readline().decode()
            if not rep:
                raise RuntimeError("gpumem estimate: the gpumem process went away")
            return rep.rstrip("\n")

    def ask_json(self, line):
        rep = self.ask(line)
        if not rep.startswith("j "):
            raise RuntimeError(f"gpumem estimate: unexpected reply {rep[:60]!r}")
        return json.loads(rep[2:])

    def close(self):
        with self.lock:
            if not self.closed:
                self.send("q")
                self.w.flush()
                self.closed = True


# What an allocation holds: internal/categories' names, in its order
# (docs/categories.md; docs/estimate.md "what the memory is made of").
LABELS = ["parameter", "buffer", "gradient", "optimizer_state", "activation",
          "temporary", "input", "workspace", "unknown"]
_L = {n: i for i, n in enumerate(LABELS)}


class _State:
    def __init__(self, card, env):
        self.card = card
        self.total = int(env.get("GPUMEM_ESTIMATE_TOTAL", "0"))
        self.name = env.get("GPUMEM_ESTIMATE_NAME", "gpumem virtual GPU")
        cc = env.get("GPUMEM_ESTIMATE_CC", "9.0").split(".")
        self.cc = (int(cc[0]), int(cc[1]))
        self.sms = int(env.get("GPUMEM_ESTIMATE_SMS", "132"))
        # maxThreadsPerMultiProcessor, by compute capability (NVIDIA's tables)
        self.threads_per_sm = {(7, 5): 1024, (8, 6): 1536, (8, 7): 1536, (8, 9): 1536,
                               (12, 0): 1536}.get(self.cc, 2048)
        self.info_path = env.get("GPUMEM_ESTIMATE_INFO", "")
        self.next_id = 1
        self.live = {}  # storage key -> [id, nbytes, weakref]
        self.ops = array.array("q")  # 2*id alloc, 2*id+1 free, 0 other op
        # by allocation id - 1 (ids count from 1; one that met an OOM holds 0)
        self.size = array.array("Q")  # bytes, each rounded up to 512
        self.label = array.array("b")  # label index
        self.module_of = {}  # id -> module name (activations)
        self.site = {}  # id -> (file, line) of the script that allocated it
        self.history = None  # _record_memory_history entries, or None when off
        self.frames_of = {}  # id -> frames, while history is on
        self.stand_ins = collections.Counter()  # (kind, site) -> count
        self.not_modelled = collections.Counter()  # (what, site) -> count: library scratch with no rule
        self.ooms = []
        self.error = None
        self.fraction = float(env.get("GPUMEM_ESTIMATE_FRACTION", "0")) or 1.0
        self.streams = 1
        self.started = time.time()
        self.kernels = False  # the first kernel ran (the card was told: "l")


_st = None
_tls = threading.local()
_fake_mode = None  # the FakeTensorMode CUDA tensors are made in
_op_hook = None  # gpumem_estimate_dist's, called first for every op
_CONTINUE = object()  # what _op_hook returns to let the op run as usual
_torch_patches = None  # gpumem_estimate_torch, once installed


def _script_site():
    """The innermost frame outside torch and this module: (file, line, name)."""
    f = sys._getframe(1)
    torch_dir = os.path.dirname(os.path.abspath(__import__("torch").__file__))
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(torch_dir) or os.path.dirname(fn) == _HERE or fn.startswith("<frozen")):
            return fn, f.f_lineno, f.f_code.co_name
        f = f.f_back
    return "?", 0, "?"


def _user_stack():
    """The program's frames (not torch's, not the emulator's), outermost
    first, as FILE:LINE in NAME."""
    torch_dir = os.path.dirname(os.path.abspath(__import__("torch").__file__))
    out = []
    for fr in traceback.extract_stack():
        if fr.filename.startswith(torch_dir) or os.path.dirname(fr.filename) == _HERE or fr.filename.startswith("<frozen"):
            continue
        out.append(f"{fr.filename}:{fr.lineno} in {fr.name}")
    return out[-16:]


def _frames():
    """The Python stack, innermost first, as PyTorch's snapshots give it."""
    out = []
    f = sys._getframe(2)
    while f is not None and len(out) < 64:
        out.append({"filename": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return out


def _current_label():
    import torch

    forced = getattr(_tls, "label", None)  # gpumem_estimate_dist: DDP's gradient buckets
    if forced is not None:
        return _L[forced], None
    if torch._C._current_graph_task_id() != -1:
        return _L["temporary"], None
    if getattr(_tls, "in_optimizer", 0):
        return _L["temporary"], None
    stack = getattr(_tls, "modules", None)
    if stack:
        return _L["activation"], _module_name(stack[-1])
    return _L["unknown"], None


_names = weakref.WeakKeyDictionary()


def _module_name(m):
    n = _names.get(m)
    if n is None:
        # a module first seen outside any other is a root: name its tree
        try:
            for name, sub in m.named_modules():
                if sub not in _names:
                    _names[sub] = name or type(sub).__name__
        except Exception:
            pass
        n = _names.get(m, type(m).__name__)
    return n


def _round(n):
    return (n + 511) // 512 * 512


def _parse_dev(parts):
    """Device calls of a reply: N KIND:ADDR:SIZE..."""
    n = int(parts[0])
    calls = []
    for p in parts[1:1 + n]:
        kind, addr, size = p.split(":")
        calls.append((kind, int(addr), int(size)))
    return calls, parts[1 + n:]


def _history_add(action, addr, size, stream, frames=None, **extra):
    h = _st.history
    if h is None:
        return
    e = {"action": action, "addr": addr, "size": size, "stream": stream,
         "time_us": int(time.time() * 1e6), "frames": frames or []}
    e.update(extra)
    h.append(e)
    # h is a deque bounded by max_entries: the oldest entries go


def _dev_history(calls):
    for kind, addr, size in calls:
        _history_add(kind, addr, size, 0)


def _malloc(key, nbytes, storage):
    st = _st
    with st.card.lock:
        i = st.next_id
        st.next_id += 1
        st.size.append(0)
        st.label.append(_L["unknown"])
        stream = _current_stream_id()
        rep = st.card.ask(f"a {i} {nbytes} {stream}")
        parts = rep.split(" ")
        if parts[0] == "o":
            st.ops.append(0)
            calls, rest = _parse_dev(parts[2:])
            _dev_history(calls)
            _history_add("oom", int(parts[1]), nbytes, stream, _frames() if st.history is not None else None,
                         device_free=int(parts[1]))
            msg = " ".join(rest)
            site = _script_site()
            st.ooms.append({"op": len(st.ops), "size": nbytes, "site": f"{site[0]}:{site[1]}",
                            "stack": _user_stack()})
            import torch
            raise torch.OutOfMemoryError(msg)
        addr = int(parts[1])
        calls, _ = _parse_dev(parts[2:])
        st.ops.append(2 * i)
        st.size[i - 1] = _round(nbytes)
        lab, mod = _current_label()
        st.label[i - 1] = lab
        if mod is not None:
            st.module_of[i] = mod
        if st.history is not None:
            fr = _frames()
            st.frames_of[i] = fr
            _dev_history(calls)
            _history_add("alloc", addr, _round(nbytes), stream, fr)
        if storage is None:  # a library's workspace: held to the end, or freed by _release
            st.label[i - 1] = _L["workspace"]
            st.module_of.pop(i, None)
            return i, addr, stream
        ref = weakref.ref(storage, lambda _r, key=key: _free(key))
        st.live[key] = [i, nbytes, ref, addr, stream]
        return i


def _free(key):
    st = _st
    if st is None or st.card.closed:
        return
    with st.card.lock:
        ent = st.live.pop(key, None)
        if ent is None:
            return
        _release(ent[0], ent[1], ent[3], ent[4])


def _release(i, nbytes, addr, stream):
    st = _st
    with st.card.lock:
        st.ops.append(2 * i + 1)
        st.card.send(f"f {i}")
        if st.history is not None:
            fr = st.frames_of.pop(i, [])
            _history_add("free_requested", addr, _round(nbytes), stream, fr)
            _history_add("free_completed", addr, _round(nbytes), stream, fr)


def _track(out):
    """Allocate the new CUDA storages among an op's outputs."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_leaves

    for t in tree_leaves(out):
        if not isinstance(t, FakeTensor) or t.device.type != "cuda":
            continue
        s = t.untyped_storage()
        key = s._cdata
        n = s.nbytes()
        ent = _st.live.get(key)
        if ent is not None:
            if n > ent[1]:  # resized in place: a new block, then the old one goes
                _relabel_free_then_alloc(key, n, s)
            continue
        if n == 0:
            continue  # PyTorch's allocator serves 0 bytes without a block
        _malloc(key, n, s)


def _relabel_free_then_alloc(key, n, s):
    old = _st.live.pop(key)
    # the weakref of the old entry must not free the new block
    _st.live[key] = None
    try:
        _malloc(key, n, s)
    finally:
        if _st.live.get(key) is None:
            _st.live.pop(key, None)
    i = old[0]
    with _st.card.lock:
        _st.ops.append(2 * i + 1)
        _st.card.send(f"f {i}")


# --- what PyTorch allocates beyond the tensors (docs/estimate.md, "rules") ---

# PyTorch keeps a workspace per cuBLAS handle (one a thread: the autograd
# engine's backward thread has its own) and stream
_CUBLAS_WORKSPACE = 32 << 20  # on the first cuBLAS call (H200, PyTorch 2.11)
# PyTorch's default for other cards (parseChosenWorkspaceSize: 32 MiB from
# compute capability 9 on, else :4096:2:16:8); read in its source, not measured
_CUBLAS_WORKSPACE_BEFORE_HOPPER = 4096 * 1024 * 2 + 16 * 1024 * 8
_CUBLASLT_WORKSPACE = 1 << 20  # on the first addmm with a bias (cuBLASLt)
# The process's first cuBLAS handle makes the driver map 64 MiB of its own
# (address space, not the card's memory) before the workspace comes: every
# H200 recording skips 64 MiB there (docs/pytorch-allocator.md, "Where the
# driver places segments", rule 8). It moves where later segments go.
_CUBLAS_MAPPING = 64 << 20
_workspaces = set()


def _blas_workspaces(func, args):
    import torch
    aten = torch.ops.aten
    if func in (aten.addmm.default, aten.addmm.out) and args and getattr(args[0], "dim", lambda: 0)() == 1:
        # cuBLASLt's path sets up the thread's cuBLAS handle too
        kinds = [("cublas", _CUBLAS_WORKSPACE), ("cublaslt", _CUBLASLT_WORKSPACE)]
    elif func in _blas_ops():
        kinds = [("cublas", _CUBLAS_WORKSPACE)]
    else:
        return
    key = (threading.get_ident(), _current_stream_id())
    if _st.cc[0] < 9:
        kinds = [(k, _CUBLAS_WORKSPACE_BEFORE_HOPPER if k == "cublas" else n) for k, n in kinds]
    for kind, size in kinds:
        if (kind, key) not in _workspaces:
            if not _workspaces:
                _st.card.send("t %d" % _CUBLAS_MAPPING)
            _workspaces.add((kind, key))
            _malloc(None, size, None)


_blas = None


def _blas_ops():
    global _blas
    if _blas is None:
        import torch
        a = torch.ops.aten
        _blas = {a.mm.default, a.mm.out, a.addmm.default, a.addmm.out, a.bmm.default, a.bmm.out,
                 a.baddbmm.default, a.baddbmm.out, a.addbmm.default, a.addmv.default, a.mv.default,
                 a.dot.default, a.vdot.default, a._scaled_mm.default, a.addmm_.default, a.baddbmm_.default}
    return _blas


def _arg_key(a):
    import torch
    if isinstance(a, torch.Tensor):
        return f"T{list(a.shape)}{list(a.stride())}{str(a.dtype)[6:]}+{a.storage_offset()}"
    if isinstance(a, (list, tuple)):
        return "[" + ",".join(_arg_key(x) for x in a) + "]"
    if isinstance(a, torch.dtype):
        return str(a)[6:]
    if isinstance(a, torch.device):
        return a.type
    return repr(a)


def op_key(func, args, kwargs):
    """An aten call as the recorded tables of library scratch key it: the
    op, its tensor arguments' shapes, strides, dtypes and offsets, its other
    arguments, and cuDNN's switches (scripts/estimate/cudnn_probe.py
    records with the same key on a real GPU)."""
    import torch
    b = torch.backends.cudnn
    kw = "".join(f",{k}={_arg_key(v)}" for k, v in sorted(kwargs.items()))
    return (f"{func}({','.join(_arg_key(a) for a in args)}{kw})"
            f"|cudnn={int(b.enabled)}{int(b.benchmark)}{int(b.deterministic)}{int(b.allow_tf32)}")


# Library scratch recorded on a real card (scripts/estimate/cudnn_probe.py,
# kernel_scratch_probe.py): for each call of the table's ops (cuDNN
# convolutions and attention, embedding backward's sort and segment
# buffers), the blocks the op allocates in order, its outputs' and its
# scratch's, and the scratch's frees. Loaded when gpumem gives a table for
# the card (GPUMEM_ESTIMATE_SCRATCH); a call of those ops that is not in it
# is counted in the report as not modelled.
_TABLE_WHAT = {"aten.convolution.default": "cuDNN workspace", "aten.convolution_backward.default": "cuDNN workspace",
               "aten._scaled_dot_product_cudnn_attention.default": "cuDNN attention workspace",
               "aten._scaled_dot_product_cudnn_attention_backward.default": "cuDNN attention workspace",
               "aten.embedding_dense_backward.default": "embedding backward's sort and segment buffers"}
_scratch_ops = None  # aten ops the table is about -> what their scratch is
_scratch_table = {}
_scratch_why = ""  # why calls of them are not modelled, for the report, after what


def _aten_op(name):
    import torch
    _, op, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, op), overload)


def _load_scratch(path):
    global _scratch_ops, _scratch_table, _scratch_why
    import torch
    _scratch_ops = {_aten_op(n): w for n, w in _TABLE_WHAT.items()}
    if not path:
        _scratch_why = "none recorded for this card"
        return
    with open(path) as f:
        d = json.load(f)
    meta = d["meta"]
    if torch.backends.cudnn.version() != meta["cudnn"]:
        _scratch_why = (f"recorded with cuDNN {meta['cudnn']}, "
                        f"this torch has {torch.backends.cudnn.version()}")
        return
    _scratch_ops = {_aten_op(n): _TABLE_WHAT[n] for n in d["ops"]}
    _scratch_table = d["table"]
    _scratch_why = "this call is not in the card's recorded table"


def _library_scratch(func, args, kwargs, out):
    """Allocate and free the recorded scratch of a table op's call, in
    order with its outputs. False when the call is not in the table."""
    from torch.utils._pytree import tree_leaves

    import gpumem_estimate_kernels as kern
    if kern.no_scratch(str(func), args, kwargs):
        return False
    seq = _scratch_table.get(op_key(func, args, kwargs)) if _scratch_table else None
    if seq is None:
        _not_modelled(f"{func}: {_scratch_ops[func]}: {_scratch_why}")
        return False
    leaves = tree_leaves(out)
    _run_seq(seq, lambda o: _track(leaves[o[1]]) if o[1] < len(leaves) else None)
    return True


def _not_modelled(what):
    """Count a call whose library or kernel scratch is not modelled, by
    what and the script line that made it, for the report."""
    f, line, _ = _script_site()
    _st.not_modelled[(what, f"{f}:{line}")] += 1


# What kernels allocate inside themselves (gpumem_estimate_kernels): a
# reduction's staging buffer and semaphores, memory-efficient attention's
# backward scratch. A rule gives the op's events, outputs included.
_kernel_rules = {}


def _rule_result(r):
    if isinstance(r, str):
        _not_modelled(r)
        return None
    return r


def _load_kernel_rules():
    import gpumem_estimate_kernels as kern
    for n, rule in kern.RULES.items():
        _kernel_rules[_aten_op(n)] = rule


def _run_seq(seq, output):
    """Play an op's events in order: an ("o", ...) event makes outputs
    (output(event): a recorded table names which, a kernel rule means them
    all), ("a", id, n) allocates n bytes of scratch, ("f", id) frees them."""
    held = {}
    for t in seq:
        if t[0] == "o":
            output(t)
        elif t[0] == "a":
            held[t[1]] = (_malloc(None, t[2], None), t[2])
        else:
            (i, addr, stream), n = held.pop(t[1])
            _release(i, n, addr, stream)


def _accumulates_in_place(args, kwargs):
    """Whether this add is the autograd engine summing two gradients of one
    input (InputBuffer::accumulate) where PyTorch adds in place: grad mode
    off, in a backward pass, the older gradient dense and held by the buffer
    alone. PyTorch never does under fake tensors (they are subclass-like),
    so the emulator decides for it. Held alone: a use count of 4 and a
    storage use count of 2 here (the buffer's, the dispatcher's boxed
    argument's, the Python object's and this call's), where a gradient the
    buffer shares (x + x) has 7 and 3."""
    import torch
    from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense
    if kwargs or len(args) != 2 or torch.is_grad_enabled() or torch._C._current_graph_task_id() == -1:
        return False
    a, b = args
    return (isinstance(b, torch.Tensor) and a.device.type == "cuda" and a.shape == b.shape and a.dtype == b.dtype
            and is_non_overlapping_and_dense(a) and a._use_count() == 4
            and torch._C._storage_Use_Count(a.untyped_storage()._cdata) == 2)


# --- streams -----------------------------------------------------------------

def _current_stream_id():
    s = getattr(_tls, "stream", None)
    return 0 if s is None else s.cuda_stream


# --- the dispatch mode ---------------------------------------------------------

_host_outputs = {}  # op -> indices of its outputs that live on the host (_make_mode)


def _make_mode():
    import torch
    from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException,
                                               FakeTensor, FakeTensorMode, UnsupportedOperatorException)
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    import torch._subclasses.fake_tensor as ft

    ft.init_gpu_context = lambda device: None  # it would create a real CUDA tensor
    class Fake(FakeTensorMode):
        # never fold a copy to the card into a real one (torch.cuda says a
        # GPU is there, and this would otherwise believe it)
        avoid_device_init = True

    fake = Fake(allow_non_fake_inputs=True)
    aten = torch.ops.aten
    # Outputs a CUDA kernel makes on the host, which fake mode puts on the
    # inputs' device: memory-efficient attention's philox seed and offset,
    # made with at::empty on the CPU unless a CUDA graph is being captured
    # (its meta kernel returns meta tensors for that reason; capture is
    # refused here). Seen on the H200 (gpt_expandable, fp32): nothing is
    # allocated after an attention's output and logsumexp. Flash attention's
    # are on the card in 2.11 (scripts/estimate/probe.py: two 8-byte
    # blocks before its output), so they stay.
    _host_outputs.update({aten._scaled_dot_product_efficient_attention.default: (2, 3)})
    scalar_ops = {aten._local_scalar_dense.default}

    def wants_fake(args, kwargs):
        d = kwargs.get("device")
        if d is not None and torch.device(d).type == "cuda":
            return True
        for a in tree_leaves((args, kwargs)):
            if isinstance(a, FakeTensor):
                return True
        return False

    class Emulator(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if _op_hook is not None:
                r = _op_hook(func, types, args, kwargs)
                if r is not _CONTINUE:
                    return r
            if not wants_fake(args, kwargs):
                return func(*args, **kwargs)
            if func is aten.add.Tensor and _accumulates_in_place(args, kwargs):
                with fake:
                    return args[0].add_(args[1])
            if func in scalar_ops:
                return _stand_in(args[0], "item")
            try:
                with fake:
                    out = func(*args, **kwargs)
            except (DynamicOutputShapeException, DataDependentOutputException) as e:
                f, line, _ = _script_site()
                raise RuntimeError(
                    f"gpumem estimate: {f}:{line}: {func} needs the values of a CUDA tensor, which an "
                    f"estimate does not compute (tensors on the virtual card hold no data)") from e
            except UnsupportedOperatorException as e:
                f, line, _ = _script_site()
                raise RuntimeError(
                    f"gpumem estimate: {f}:{line}: {func} has no meta kernel, so its memory cannot be "
                    f"estimated (a custom CUDA extension?); gpumem estimate does not support it") from e
            _torch_patches.track_values(func, args, kwargs, out)
            if func in _scratch_ops:
                _library_scratch(func, args, kwargs, out)
            keep = _host_outputs.get(func)
            outs = out if keep is None else [t for i, t in enumerate(out) if i not in keep]
            seq = _kernel_rules.get(func)
            seq = _rule_result(seq(str(func), args, kwargs, _st)) if seq is not None else None
            if seq is None:
                _track(outs)
            else:
                _run_seq(seq, lambda _o: _track(outs))
            _blas_workspaces(func, args)
            if not _st.kernels and _launches(func, args):
                # after the op's own allocations, as the kernel launches then
                _st.kernels = True
                _st.card.send("l")
            return out

    def _launches(func, args):
        # whether the op runs a kernel: not an allocation, a view, or a copy
        # from the host (cudaMemcpy). The driver frees its start-up range at
        # a program's first kernel, which moves where later segments go
        # (docs/pytorch-allocator.md, "Where the driver places segments").
        if func in no_kernel or getattr(func, "is_view", False):
            return False
        if func in host_copies:
            return not any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in args[:2])
        return True

    no_kernel = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
                 aten.detach.default, aten.alias.default, aten.lift_fresh.default, aten.set_.source_Tensor,
                 aten.set_.source_Storage, aten.set_.source_Storage_storage_offset,
                 aten._has_compatible_shallow_copy_type.default}
    host_copies = {aten._to_copy.default, aten.copy_.default, aten._copy_from.default}
    return fake, Emulator()


# A line that needs more stand-ins than this is a loop whose end depends on
# values (a generate loop waiting for an end-of-sequence token): stop it
# rather than run forever.
MAX_STAND_INS = 1000


def _stand_in(t, kind):
    if kind == "item":
        v = _torch_patches.value_of(t)
        if v is not None:  # a value that never depended on data: known
            return v.item()
    f, line, _ = _script_site()
    n = _st.stand_ins[(kind, f"{f}:{line}")] = _st.stand_ins[(kind, f"{f}:{line}")] + 1
    if n > MAX_STAND_INS and kind == "item":
        raise RuntimeError(f"gpumem estimate: {f}:{line}: more than {MAX_STAND_INS} values of CUDA tensors asked "
                           f"here: a loop whose end depends on them cannot be estimated (tensors on the virtual "
                           f"card hold no data)")
    if t.dtype == __import__("torch").bool:
        return False
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return 0.0
    return 1


# --- composition: module and optimizer hooks -----------------------------------

def _relabel(t, label, only=None):
    """Label t's allocation (when it has label only, if given)."""
    from torch._subclasses.fake_tensor import FakeTensor
    if isinstance(t, FakeTensor) and t.device.type == "cuda":
        ent = _st.live.get(t.untyped_storage()._cdata)
        if ent is not None and (only is None or _st.label[ent[0] - 1] == only):
            _st.label[ent[0] - 1] = _L[label]
            _st.module_of.pop(ent[0], None)


def _module_tensors(m):
    for p in m._parameters.values():
        if p is not None:
            _relabel(p, "parameter")
            if p.grad is not None:
                _relabel(p.grad, "gradient")
    for b in m._buffers.values():
        if b is not None:
            _relabel(b, "buffer")


def _optimizer_tensors(opt):
    for g in opt.param_groups:
        for p in g["params"]:
            _relabel(p, "parameter")
            if p.grad is not None:
                _relabel(p.grad, "gradient")
    for s in opt.state.values():
        if isinstance(s, dict):
            for v in s.values():
                _relabel(v, "optimizer_state")


_optimizers = weakref.WeakSet()
_modules = weakref.WeakSet()


def _install_hooks(torch):
    import torch.nn.modules.module as mm
    import torch.optim.optimizer as om

    def pre(m, args):
        stack = getattr(_tls, "modules", None)
        if stack is None:
            stack = _tls.modules = []
        if not stack:  # a root module: its arguments made outside any module are its inputs
            for t in args:
                _relabel(t, "input", only=_L["unknown"])
        stack.append(m)
        _modules.add(m)
        _module_tensors(m)

    def post(m, args, out):
        stack = getattr(_tls, "modules", None)
        if stack and stack[-1] is m:
            stack.pop()

    mm.register_module_forward_pre_hook(pre)
    mm.register_module_forward_hook(post, always_call=True)

    def opt_pre(opt, args, kwargs):
        _optimizers.add(opt)
        _optimizer_tensors(opt)
        _tls.in_optimizer = getattr(_tls, "in_optimizer", 0) + 1

    def opt_post(opt, args, kwargs):
        _tls.in_optimizer = max(getattr(_tls, "in_optimizer", 1) - 1, 0)
        _optimizer_tensors(opt)

    om.register_optimizer_step_pre_hook(opt_pre)
    om.register_optimizer_step_post_hook(opt_post)


def _composition(op):
    """Bytes by label and the top modules' activations, live after op."""
    st = _st
    live = set()
    for k in st.ops[:op]:
        if k == 0:
            continue
        if k & 1:
            live.discard(k >> 1)
        else:
            live.add(k >> 1)
    by = collections.Counter()
    mods = collections.Counter()
    for i in live:
        lab = LABELS[st.label[i - 1]]
        by[lab] += st.size[i - 1]
        if lab == "activation":
            mods[st.module_of.get(i, "?")] += st.size[i - 1]
    return dict(by), mods.most_common(10)


def _finish():
    st = _st
    if st is None or st.card.closed:
        return
    try:
        for m in list(_modules):
            _module_tensors(m)
        for o in list(_optimizers):
            _optimizer_tensors(o)
        with st.card.lock:
            st.card.w.flush()
            peaks = st.card.ask_json("p")
        comp, mods = _composition(peaks["allocated_op"])
        info = {
            "composition": comp,
            "top_activation_modules": [{"module": m, "bytes": b} for m, b in mods],
            "stand_ins": [{"kind": k, "site": s, "count": n} for (k, s), n in sorted(st.stand_ins.items())],
            "not_modelled": [{"kind": k, "site": s, "count": n} for (k, s), n in sorted(st.not_modelled.items())],
            "ooms": st.ooms,
            "error": st.error,
            "seconds": time.time() - st.started,
        }
        if st.info_path:
            with open(st.info_path, "w") as f:
                json.dump(info, f)
    finally:
        st.card.close()


def _excepthook(orig):
    def hook(tp, value, tb):
        if _st is not None:
            site = "?"
            for fr in traceback.extract_tb(tb):
                if not fr.filename.startswith(os.path.dirname(__import__("torch").__file__)) \
                        and os.path.dirname(fr.filename) != _HERE:
                    site = f"{fr.filename}:{fr.lineno}"
            _st.error = {"type": tp.__name__, "message": str(value)[:2000], "site": site}
        orig(tp, value, tb)
    return hook


def install():
    """Start emulating CUDA in this process, if gpumem asked for it."""
    global _st
    ours = {k: v for k, v in os.environ.items() if k.startswith("GPUMEM_ESTIMATE_")}
    for k in ours:
        del os.environ[k]  # children do not emulate again on a pipe that is not theirs
    fds = ours.get("GPUMEM_ESTIMATE_FDS", "")
    if not fds or _st is not None:
        return
    rfd, wfd = (int(x) for x in fds.split(","))
    import torch
    import torch.cuda.memory  # noqa: F401 (patched below)

    import gpumem_estimate_torch as patches

    global _torch_patches
    _torch_patches = patches

    _st = _State(_Card(rfd, wfd), ours)
    patches.no_cuda_guard(torch)
    torch._C._set_only_lift_cpu_tensors(True)
    patches.patch_cuda(torch)
    patches.patch_apply(torch)
    patches.patch_sdpa(torch)
    patches.patch_foreach(torch)
    _install_hooks(torch)
    _load_scratch(ours.get("GPUMEM_ESTIMATE_SCRATCH", ""))
    _load_kernel_rules()
    global _fake_mode
    _fake_mode, mode = _make_mode()
    import gpumem_estimate_dist
    gpumem_estimate_dist.install(torch)
    mode.__enter__()
    atexit.register(_finish)
    sys.excepthook = _excepthook(sys.excepthook)
    # a forked child (a DataLoader worker) shares the pipes: it must not
    # talk on them, nor free the parent's blocks as it drops references
    os.register_at_fork(after_in_child=_forked)


def _forked():
    _st.card.closed = True
