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


# Labels of what an allocation holds (docs/estimate.md "composition").
LABELS = ["parameter", "buffer", "gradient", "optimizer_state", "activation",
          "backward_temporary", "optimizer_temporary", "other", "library_workspace"]
_L = {n: i for i, n in enumerate(LABELS)}


class _State:
    def __init__(self, card, env):
        self.card = card
        self.total = int(env.get("GPUMEM_ESTIMATE_TOTAL", "0"))
        self.name = env.get("GPUMEM_ESTIMATE_NAME", "gpumem virtual GPU")
        cc = env.get("GPUMEM_ESTIMATE_CC", "9.0").split(".")
        self.cc = (int(cc[0]), int(cc[1]))
        self.sms = int(env.get("GPUMEM_ESTIMATE_SMS", "132"))
        self.info_path = env.get("GPUMEM_ESTIMATE_INFO", "")
        self.next_id = 1
        self.live = {}  # storage key -> [id, nbytes, weakref]
        self.ops = array.array("q")  # 2*id alloc, 2*id+1 free, 0 other op
        self.size = {}  # id -> bytes (each rounded up to 512)
        self.label = {}  # id -> label index
        self.module_of = {}  # id -> module name (activations)
        self.site = {}  # id -> (file, line) of the script that allocated it
        self.history = None  # _record_memory_history entries, or None when off
        self.history_max = 0
        self.frames_of = {}  # id -> frames, while history is on
        self.stand_ins = collections.Counter()  # (kind, site) -> count
        self.ooms = []
        self.error = None
        self.fraction = 1.0
        self.streams = 1
        self.started = time.time()


_st = None
_tls = threading.local()


def _script_site():
    """The innermost frame outside torch and this module: (file, line, name)."""
    f = sys._getframe(1)
    torch_dir = os.path.dirname(os.path.dirname(os.path.abspath(__import__("torch").__file__)))
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(torch_dir) or fn == __file__ or fn.startswith("<frozen")):
            return fn, f.f_lineno, f.f_code.co_name
        f = f.f_back
    return "?", 0, "?"


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

    if torch._C._current_graph_task_id() != -1:
        return _L["backward_temporary"], None
    if getattr(_tls, "in_optimizer", 0):
        return _L["optimizer_temporary"], None
    stack = getattr(_tls, "modules", None)
    if stack:
        return _L["activation"], _module_name(stack[-1])
    return _L["other"], None


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
    if len(h) > _st.history_max:
        del h[0]


def _dev_history(calls):
    for kind, addr, size in calls:
        _history_add(kind, addr, size, 0)


def _malloc(key, nbytes, storage):
    st = _st
    with st.card.lock:
        i = st.next_id
        st.next_id += 1
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
                            "stack": traceback.format_stack()[-12:-2]})
            import torch
            raise torch.OutOfMemoryError(msg)
        addr = int(parts[1])
        calls, _ = _parse_dev(parts[2:])
        st.ops.append(2 * i)
        st.size[i] = _round(nbytes)
        lab, mod = _current_label()
        st.label[i] = lab
        if mod is not None:
            st.module_of[i] = mod
        if st.history is not None:
            fr = _frames()
            st.frames_of[i] = fr
            _dev_history(calls)
            _history_add("alloc", addr, _round(nbytes), stream, fr)
        if storage is None:  # a library's workspace: held to the end
            st.label[i] = _L["library_workspace"]
            st.module_of.pop(i, None)
            return i
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
        i = ent[0]
        st.ops.append(2 * i + 1)
        st.card.send(f"f {i}")
        if st.history is not None:
            fr = st.frames_of.pop(i, [])
            _history_add("free_requested", ent[3], _round(ent[1]), ent[4], fr)
            _history_add("free_completed", ent[3], _round(ent[1]), ent[4], fr)


def _track(out):
    """Allocate the new CUDA storages among an op's outputs."""
    import torch
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
_CUBLASLT_WORKSPACE = 1 << 20  # on the first addmm with a bias (cuBLASLt)
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
    for kind, size in kinds:
        if (kind, key) not in _workspaces:
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


# --- streams -----------------------------------------------------------------

def _current_stream_id():
    s = getattr(_tls, "stream", None)
    return 0 if s is None else s.cuda_stream


# --- the dispatch mode ---------------------------------------------------------

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
            if not wants_fake(args, kwargs):
                return func(*args, **kwargs)
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
            _track(out)
            _blas_workspaces(func, args)
            return out

    return fake, Emulator()


def _stand_in(t, kind):
    f, line, _ = _script_site()
    _st.stand_ins[(kind, f"{f}:{line}")] += 1
    if t.dtype == __import__("torch").bool:
        return False
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return 0.0
    return 1


# --- torch.nn.Module._apply ----------------------------------------------------

def _patch_apply(torch):
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.nn import Parameter

    orig = torch.nn.Module._apply

    def _apply(self, fn, recurse=True):
        outer = getattr(_tls, "apply_memo", None) is None
        if outer:
            _tls.apply_memo = {}
        memo = _tls.apply_memo
        try:
            if recurse:
                for m in self.children():
                    m._apply(fn)
            for key, p in self._parameters.items():
                if p is None:
                    continue
                hit = memo.get(id(p))
                if hit is not None:  # tied: the module shares its new parameter too
                    self._parameters[key] = hit[1]
                    continue
                with torch.no_grad():
                    a = fn(p)
                if isinstance(a, FakeTensor) or isinstance(p, FakeTensor):
                    # fake mode's own swap_tensors fails on weak references;
                    # a new Parameter keeps ties through memo
                    q = Parameter(a, p.requires_grad)
                    q.__dict__.update({k: v for k, v in p.__dict__.items() if k != "_is_param"})
                    if p.grad is not None:
                        with torch.no_grad():
                            q.grad = fn(p.grad)
                    self._parameters[key] = q
                    memo[id(p)] = (p, q)
                else:
                    if a is not p:
                        p.data = a
                        if p.grad is not None:
                            with torch.no_grad():
                                p.grad.data = fn(p.grad)
                    memo[id(p)] = (p, p)
            for key, b in self._buffers.items():
                if b is not None:
                    hit = memo.get(id(b))
                    if hit is None:
                        hit = (b, fn(b))
                        memo[id(b)] = hit
                    self._buffers[key] = hit[1]
            return self
        finally:
            if outer:
                _tls.apply_memo = None

    _apply.__wrapped__ = orig
    torch.nn.Module._apply = _apply


# --- torch.cuda ---------------------------------------------------------------

class _Props:
    """torch.cuda.get_device_properties() of the virtual card."""

    def __init__(self, st):
        self.name = st.name
        self.total_memory = st.total
        self.major, self.minor = st.cc
        self.multi_processor_count = st.sms
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.max_threads_per_multi_processor = 2048
        self.warp_size = 32
        self.regs_per_multiprocessor = 65536
        self.gcnArchName = "NVIDIA CUDA"
        self.L2_cache_size = 50 * 1024 * 1024
        self.uuid = "00000000-0000-0000-0000-000000000000"
        self.pci_bus_id = self.pci_device_id = self.pci_domain_id = 0

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count})")


class _Stream:
    """A CUDA stream of the virtual card: an allocator stream id, no work."""
    _next = 1

    def __init__(self, device=None, priority=0, **kwargs):
        if kwargs.get("stream_ptr") is not None:
            self.cuda_stream = int(kwargs["stream_ptr"])
        else:
            _Stream._next += 1
            self.cuda_stream = 0x1000 * _Stream._next
        import torch
        self.device = torch.device("cuda", 0)
        self.device_index = 0
        self.device_type = 1
        self.stream_id = self.cuda_stream
        self.priority = priority

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def record_event(self, event=None):
        return event if event is not None else _Event()

    def query(self):
        return True

    def synchronize(self):
        pass

    def __eq__(self, o):
        return isinstance(o, _Stream) and o.cuda_stream == self.cuda_stream

    def __hash__(self):
        return hash(self.cuda_stream)

    def __enter__(self):
        self._prev = getattr(_tls, "stream", None)
        _tls.stream = self
        return self

    def __exit__(self, *a):
        _tls.stream = self._prev

    def __repr__(self):
        return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.cuda_stream:#x}>"


_default_stream = None


class _Event:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False, external=False):
        self.enable_timing = enable_timing

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return 0.0


class _StreamContext:
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        self._prev = getattr(_tls, "stream", None)
        if self.stream is not None:
            _tls.stream = self.stream
        return self.stream

    def __exit__(self, *a):
        _tls.stream = self._prev


def _unsupported(what):
    def f(*a, **k):
        raise RuntimeError(f"gpumem estimate: {what} is not supported: an estimate of it would be wrong, "
                           f"so gpumem estimate stops here")
    return f


def _stats_nested(flat):
    nested = {}
    for k, v in flat.items():
        parts = k.split(".")
        d = nested
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = v
    return nested


def _snapshot(include_traces=True):
    st = _st
    with st.card.lock:
        st.card.w.flush()
        segs = st.card.ask_json("g")
        byaddr = {}
        for ent in st.live.values():
            if ent is not None:
                byaddr[ent[3]] = ent[0]
    for s in segs:
        s["segment_pool_id"] = tuple(s["segment_pool_id"])
        for b in s["blocks"]:
            i = b.pop("id")
            b["frames"] = st.frames_of.get(i, []) if b["state"] != "inactive" else []
    traces = [list(st.history or [])] if include_traces else []
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return {"segments": segs, "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": conf}}


def _patch_cuda(torch):
    st = _st
    cuda = torch.cuda
    C = torch._C
    props = _Props(st)
    global _default_stream
    _default_stream = _Stream(stream_ptr=0)

    def dev_check(device=None):
        if device is None:
            return 0
        if isinstance(device, int):
            i = device
        else:
            d = torch.device(device)
            if d.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {d}")
            i = 0 if d.index is None else d.index
        if i not in (0, -1):
            raise RuntimeError("CUDA error: invalid device ordinal (gpumem estimate emulates one GPU)")
        return 0

    def flat_stats():
        with st.card.lock:
            return st.card.ask_json("s")

    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.set_device = lambda device: dev_check(device) and None
    cuda._lazy_init = lambda: None
    cuda.is_initialized = lambda: True
    cuda.is_current_stream_capturing = lambda: False
    cuda.graphs.is_current_stream_capturing = lambda: False
    # the CUDA generators need the driver: seeding and states do nothing
    # (random ops on the virtual card make no data anyway)
    cuda.manual_seed = cuda.random.manual_seed = lambda seed: None
    cuda.manual_seed_all = cuda.random.manual_seed_all = lambda seed: None
    cuda.seed = cuda.random.seed = lambda: None
    cuda.seed_all = cuda.random.seed_all = lambda: None
    cuda.initial_seed = cuda.random.initial_seed = lambda: 0
    cuda.get_rng_state = cuda.random.get_rng_state = lambda device="cuda": torch.zeros(16, dtype=torch.uint8)
    cuda.get_rng_state_all = cuda.random.get_rng_state_all = lambda: [torch.zeros(16, dtype=torch.uint8)]
    cuda.set_rng_state = cuda.random.set_rng_state = lambda new_state, device="cuda": None
    cuda.set_rng_state_all = cuda.random.set_rng_state_all = lambda new_states: None
    cuda.init = lambda: None
    cuda.is_bf16_supported = lambda including_emulation=True: st.cc >= (8, 0)
    cuda.get_device_name = lambda device=None: (dev_check(device), st.name)[1]
    cuda.get_device_capability = lambda device=None: (dev_check(device), st.cc)[1]
    cuda.get_device_properties = lambda device=None: (dev_check(device), props)[1]
    cuda.get_arch_list = lambda: [f"sm_{st.cc[0]}{st.cc[1]}"]
    cuda.synchronize = lambda device=None: None
    cuda.ipc_collect = lambda: None
    cuda.Stream = _Stream
    cuda.Event = _Event
    cuda.current_stream = lambda device=None: getattr(_tls, "stream", None) or _default_stream
    cuda.default_stream = lambda device=None: _default_stream
    cuda.stream = _StreamContext
    cuda.set_stream = lambda s: setattr(_tls, "stream", s)
    cuda.graph = _unsupported("CUDA graphs (torch.cuda.graph)")
    cuda.CUDAGraph = _unsupported("CUDA graphs (torch.cuda.CUDAGraph)")
    cuda.make_graphed_callables = _unsupported("CUDA graphs (torch.cuda.make_graphed_callables)")
    torch.Tensor.pin_memory = lambda self, device=None: self

    def tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        # the C++ method asks the device guard for the current device: the
        # meta guard (see _no_cuda_guard) would answer meta
        d = torch.device("cuda", dev_check(device))
        return self.to(device=d, non_blocking=non_blocking, memory_format=memory_format)

    torch.Tensor.cuda = tensor_cuda
    torch.Tensor.record_stream = lambda self, stream: None

    # the memory API, at the level torch.cuda.memory's functions call
    C._cuda_memoryStats = lambda device=None: _stats_nested(flat_stats())
    cuda.memory.is_initialized = lambda: True
    cuda.memory.memory_stats_as_nested_dict = lambda device=None: (dev_check(device), _stats_nested(flat_stats()))[1]
    C._cuda_resetPeakMemoryStats = lambda device=None: st.card.send("r")
    C._cuda_resetAccumulatedMemoryStats = lambda device=None: None

    def empty_cache():
        with st.card.lock:
            rep = st.card.ask("e")
            st.ops.append(0)
            calls, _ = _parse_dev(rep.split(" ")[2:])
            _dev_history(calls)

    C._cuda_emptyCache = empty_cache
    cuda.empty_cache = empty_cache
    cuda.memory.empty_cache = empty_cache

    def mem_get_info(device=None):
        dev_check(device)
        with st.card.lock:
            free, total = st.card.ask_json("m")
        return free, total

    cuda.mem_get_info = mem_get_info
    cuda.memory.mem_get_info = mem_get_info

    def set_fraction(fraction, device=None):
        dev_check(device)
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        rep = st.card.ask(f"x {fraction!r}")
        if rep.startswith("E "):
            raise RuntimeError(rep[2:])
        st.fraction = fraction

    C._cuda_setMemoryFraction = set_fraction
    cuda.set_per_process_memory_fraction = set_fraction
    cuda.memory.set_per_process_memory_fraction = set_fraction
    C._cuda_getMemoryFraction = lambda device=None: st.fraction
    cuda.get_per_process_memory_fraction = lambda device=None: st.fraction
    cuda.memory.get_per_process_memory_fraction = lambda device=None: st.fraction

    def record_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                       clear_history=False, **kwargs):
        if enabled in (None, False):
            st.history = None
            st.frames_of = {}
            return
        if st.history is None or clear_history:
            st.history = []
        st.history_max = max_entries

    cuda.memory._record_memory_history = record_history
    C._cuda_memorySnapshot = lambda *a, **k: _snapshot()
    cuda.memory._snapshot = lambda device=None, augment_with_fx_traces=False: _snapshot()

    def compile_unsupported(*a, **k):
        raise RuntimeError("gpumem estimate: torch.compile is not supported: a compiled program allocates "
                           "other buffers than the eager one, so an eager estimate would be wrong for it")

    torch.compile = compile_unsupported


# --- scaled_dot_product_attention ----------------------------------------------

def _patch_foreach(torch):
    """Let optimizers and grad clipping take their foreach (multi-tensor)
    path for fake tensors as for real ones: they test the tensor's exact
    type, and the single-tensor path has other temporaries."""
    import torch.optim.optimizer as oo
    import torch.utils._foreach_utils as fu
    from torch._subclasses.fake_tensor import FakeTensor

    for types in (oo._foreach_supported_types, fu._foreach_supported_types):
        if FakeTensor not in types:
            types.append(FakeTensor)


def _patch_sdpa(torch):
    """Pick SDPA's kernel as PyTorch does on the card. The choice is made in
    C++ from the device's properties (which need the driver), so fake
    tensors get the math path, which materialises the attention matrix.
    Flash attention first (fp16/bf16, no mask, head dim up to 256), then
    memory-efficient attention (head dim a multiple of 8, or of 4 in
    fp32), then math, honouring torch.backends.cuda's switches."""
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensor

    orig = F.scaled_dot_product_attention
    aten = torch.ops.aten
    be = torch.backends.cuda

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        fake = isinstance(query, FakeTensor) and query.device.type == "cuda"
        if not fake or query.dim() != 4 or key.dim() != 4 or value.dim() != 4 or enable_gqa:
            return orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, enable_gqa=enable_gqa)
        hd = query.shape[-1]
        same = key.shape[-1] == hd and value.shape[-1] == hd and query.shape[0] == key.shape[0] and \
            query.shape[1] == key.shape[1]
        half = query.dtype in (torch.float16, torch.bfloat16)
        if be.flash_sdp_enabled() and half and attn_mask is None and same and hd <= 256 and hd % 8 == 0:
            return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False,
                                                            scale=scale)[0]
        need_lse = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
        if be.mem_efficient_sdp_enabled() and same and hd % (8 if half else 4) == 0 and \
                query.dtype in (torch.float16, torch.bfloat16, torch.float32):
            bias = attn_mask
            if bias is not None and bias.dtype == torch.bool:
                return orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale)
            return aten._scaled_dot_product_efficient_attention(query, key, value, bias, need_lse, dropout_p,
                                                                is_causal, scale=scale)[0]
        return orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)

    F.scaled_dot_product_attention = sdpa


# --- composition: module and optimizer hooks -----------------------------------

def _relabel(t, label):
    from torch._subclasses.fake_tensor import FakeTensor
    if isinstance(t, FakeTensor) and t.device.type == "cuda":
        ent = _st.live.get(t.untyped_storage()._cdata)
        if ent is not None:
            _st.label[ent[0]] = _L[label]
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
        lab = LABELS[st.label.get(i, _L["other"])]
        by[lab] += st.size[i]
        if lab == "activation":
            mods[st.module_of.get(i, "?")] += st.size[i]
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
                if not fr.filename.startswith(os.path.dirname(os.path.dirname(__import__("torch").__file__))) \
                        and fr.filename != __file__:
                    site = f"{fr.filename}:{fr.lineno}"
            _st.error = {"type": tp.__name__, "message": str(value)[:2000], "site": site}
        orig(tp, value, tb)
    return hook


# x86-64 machine code of the few answers the CUDA device guard must give
# (System V ABI: a Device is 2 bytes in ax, a Stream 16 bytes in rax:rdx)
_RET_ONE = bytes.fromhex("b801000000c3")  # mov eax,1; ret: CUDA, cuda:0, 1 device, true
_RET_STREAM = bytes.fromhex("31d2b801000000c3")  # xor edx,edx; mov eax,1; ret: cuda:0's stream 0
_keep = []  # the memory the patched tables live in, never freed


def _no_cuda_guard(torch):
    """Give CUDA a device guard that needs no driver.

    Autograd asks c10's device guard of every CUDA tensor it records for
    the current device and stream, and the engine asks CUDA's hooks whether
    the device has a context; the real ones call the CUDA driver. Here the
    guard (c10's registry of implementations by device type) becomes a copy
    of the meta device's, which does nothing, answering cuda:0 and its
    default stream, and the hooks answer that cuda:0 has a context.
    Everything that would run on the GPU is a fake tensor op by then.
    """
    import ctypes
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        raise RuntimeError("gpumem estimate: emulating CUDA needs an x86-64 machine")
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    c10 = ctypes.CDLL(os.path.join(libdir, "libc10.so"))
    reg = (ctypes.c_void_p * 21).in_dll(c10, "_ZN3c104impl26device_guard_impl_registryE")
    cuda, meta = int(torch._C._autograd.DeviceType.CUDA), int(torch._C._autograd.DeviceType.Meta)
    if not reg[meta] or not reg[cuda]:
        raise RuntimeError("gpumem estimate: this torch build has no CUDA or meta device guard")

    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = libc.mmap(None, 4096, 3, 0x22, -1, 0)  # read|write, private|anonymous
    if page in (None, ctypes.c_void_p(-1).value):
        raise RuntimeError("gpumem estimate: mmap failed")
    ctypes.memmove(page, _RET_ONE, len(_RET_ONE))
    ctypes.memmove(page + 16, _RET_STREAM, len(_RET_STREAM))
    if libc.mprotect(page, 4096, 5) != 0:  # read|exec
        raise RuntimeError("gpumem estimate: mprotect failed")
    one, stream = page, page + 16

    def patched(obj, entries, n):
        """A copy of obj's vtable (n entries, and the two words before it)
        with entries replaced, and a new object pointing at it."""
        vptr = ctypes.c_void_p.from_address(obj).value
        table = (ctypes.c_void_p * (n + 2))()
        ctypes.memmove(table, vptr - 16, 8 * (n + 2))
        for i, f in entries.items():
            table[i + 2] = f
        _keep.append(table)
        return ctypes.addressof(table) + 16

    # DeviceGuardImplInterface: 0 type, 1 exchangeDevice, 2 getDevice,
    # 5 getStream, 6 getDefaultStream, 7 getStreamFromGlobalPool,
    # 8 getNewStream, 9 exchangeStream, 15 deviceCount (PyTorch 2.11)
    guard = (ctypes.c_void_p * 1)(patched(reg[meta], {0: one, 1: one, 2: one, 5: stream, 6: stream, 7: stream,
                                                      8: stream, 9: stream, 15: one}, 40))
    _keep.append(guard)
    reg[cuda] = ctypes.addressof(guard)

    # CUDAHooksInterface: 4 hasPrimaryContext
    cpu = ctypes.CDLL(os.path.join(libdir, "libtorch_cpu.so"))
    get_hooks = cpu._ZN2at6detail12getCUDAHooksEv
    get_hooks.restype = ctypes.c_void_p
    hooks = get_hooks()
    ctypes.c_void_p.from_address(hooks).value = patched(hooks, {4: one}, 160)


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

    _st = _State(_Card(rfd, wfd), ours)
    _no_cuda_guard(torch)
    torch._C._set_only_lift_cpu_tensors(True)
    _patch_cuda(torch)
    _patch_apply(torch)
    _patch_sdpa(torch)
    _patch_foreach(torch)
    _install_hooks(torch)
    _fake, mode = _make_mode()
    mode.__enter__()
    atexit.register(_finish)
    sys.excepthook = _excepthook(sys.excepthook)
