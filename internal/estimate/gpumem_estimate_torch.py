"""The parts of gpumem estimate's CUDA emulator that change torch itself
(imported by gpumem_estimate.install): torch.cuda answering as the virtual
card, CUDA's device guard without a driver, Module._apply onto fake
tensors, SDPA's kernel choice, the optimizers' foreach path."""
import collections
import os
import sys

import gpumem_estimate as core

# --- torch.nn.Module._apply ----------------------------------------------------

def patch_apply(torch):
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.nn import Parameter

    orig = torch.nn.Module._apply

    def _apply(self, fn, recurse=True):
        outer = getattr(core._tls, "apply_memo", None) is None
        if outer:
            core._tls.apply_memo = {}
        memo = core._tls.apply_memo
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
                core._tls.apply_memo = None

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
        self.max_threads_per_multi_processor = st.threads_per_sm
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
        self._prev = getattr(core._tls, "stream", None)
        core._tls.stream = self
        return self

    def __exit__(self, *a):
        core._tls.stream = self._prev

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
        self._prev = getattr(core._tls, "stream", None)
        if self.stream is not None:
            core._tls.stream = self.stream
        return self.stream

    def __exit__(self, *a):
        core._tls.stream = self._prev


def _unsupported(what):
    """A class that refuses to be made (a class, not a function: scripts and
    libraries use torch.cuda.CUDAGraph and MemPool in type annotations)."""
    def refuse(self, *a, **k):
        raise RuntimeError(f"gpumem estimate does not support {what}: an eager estimate would be wrong for it, "
                           f"so the estimate stops here")
    return type("Unsupported", (), {"__init__": refuse, "__doc__": f"{what}: not supported by gpumem estimate"})


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
    st = core._st
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


def patch_cuda(torch):
    st = core._st
    cuda = torch.cuda
    C = torch._C
    props = _Props(st)
    global _default_stream
    _default_stream = _Stream(stream_ptr=0)

    import gpumem_estimate_dist
    devices = gpumem_estimate_dist.devices()

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
        # --nproc: each rank sees its local world's GPUs, all its one card (gpumem_estimate_dist)
        if not -1 <= i < devices:
            raise RuntimeError("CUDA error: invalid device ordinal (gpumem estimate emulates one GPU)")
        return 0

    def flat_stats():
        with st.card.lock:
            return st.card.ask_json("s")

    cuda.is_available = lambda: True
    cuda.device_count = lambda: devices
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
    cuda.current_stream = lambda device=None: getattr(core._tls, "stream", None) or _default_stream
    cuda.default_stream = lambda device=None: _default_stream
    cuda.stream = _StreamContext
    cuda.set_stream = lambda s: setattr(core._tls, "stream", s)
    cuda.graph = _unsupported("CUDA graphs (torch.cuda.graph)")
    cuda.CUDAGraph = _unsupported("CUDA graphs (torch.cuda.CUDAGraph)")
    cuda.make_graphed_callables = _unsupported("CUDA graphs (torch.cuda.make_graphed_callables)")
    cuda.MemPool = _unsupported("private memory pools (torch.cuda.MemPool)")
    cuda.use_mem_pool = _unsupported("private memory pools (torch.cuda.use_mem_pool)")
    cuda.memory.MemPool = cuda.MemPool
    cuda.memory.use_mem_pool = cuda.use_mem_pool
    torch.Tensor.pin_memory = lambda self, device=None: self

    def tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        # the C++ method asks the device guard for the current device: the
        # meta guard (see _no_cuda_guard) would answer meta
        d = torch.device("cuda", dev_check(device))
        return self.to(device=d, non_blocking=non_blocking, memory_format=memory_format)

    torch.Tensor.cuda = tensor_cuda

    from torch._subclasses.fake_tensor import FakeTensor

    numpy = torch.Tensor.numpy

    def tensor_numpy(self, *, force=False):
        if isinstance(self, FakeTensor):
            f, line, _ = core._script_site()
            raise RuntimeError(f"gpumem estimate: {f}:{line}: .numpy() needs the values of a tensor that came from "
                               f"the virtual card, which an estimate does not compute")
        return numpy(self, force=force)

    torch.Tensor.numpy = tensor_numpy
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
            calls, _ = core._parse_dev(rep.split(" ")[2:])
            core._dev_history(calls)

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
            st.history = collections.deque(maxlen=max_entries)
        elif st.history.maxlen != max_entries:
            st.history = collections.deque(st.history, maxlen=max_entries)

    cuda.memory._record_memory_history = record_history
    C._cuda_memorySnapshot = lambda *a, **k: _snapshot()
    cuda.memory._snapshot = lambda device=None, augment_with_fx_traces=False: _snapshot()

    def compile_unsupported(*a, **k):
        raise RuntimeError("gpumem estimate: torch.compile is not supported: a compiled program allocates "
                           "other buffers than the eager one, so an eager estimate would be wrong for it")

    torch.compile = compile_unsupported


# --- scaled_dot_product_attention ----------------------------------------------

def patch_foreach(torch):
    """Let optimizers and grad clipping take their foreach (multi-tensor)
    path for fake tensors as for real ones: they test the tensor's exact
    type, and the single-tensor path has other temporaries."""
    import torch.optim.optimizer as oo
    import torch.utils._foreach_utils as fu
    from torch._subclasses.fake_tensor import FakeTensor

    for types in (oo._foreach_supported_types, fu._foreach_supported_types):
        if FakeTensor not in types:
            types.append(FakeTensor)


def _prefers_cudnn(torch):
    """PyTorch 2.11 puts cuDNN attention first on compute capability 9.0
    and 10.0 with cuDNN 9.9 or later: the H200 ran the GPT programs' bf16
    attention (causal, head dimension 64) through
    _scaled_dot_product_cudnn_attention (scripts/estimate/kernel_scratch_probe.py)."""
    return core._st.cc in ((9, 0), (10, 0)) and (torch.backends.cudnn.version() or 0) >= 90900


def patch_sdpa(torch):
    """Pick SDPA's kernel as PyTorch does on the card. The choice is made in
    C++ from the device's properties (which need the driver), so fake
    tensors get the math path, which materialises the attention matrix.
    cuDNN attention first where PyTorch prefers it (fp16/bf16, no mask,
    head dim up to 128), then flash attention (fp16/bf16, no mask, head dim
    up to 256), then
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
        need_lse = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
        if _prefers_cudnn(torch) and be.cudnn_sdp_enabled() and half and attn_mask is None and same and \
                hd <= 128 and hd % 8 == 0 and not dropout_p:
            kw = {} if scale is None else {"scale": scale}
            return aten._scaled_dot_product_cudnn_attention(query, key, value, None, need_lse, dropout_p,
                                                            is_causal, **kw)[0]
        if be.flash_sdp_enabled() and half and attn_mask is None and same and hd <= 256 and hd % 8 == 0:
            return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False,
                                                            scale=scale)[0]
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


# x86-64 machine code of the few answers the CUDA device guard must give
# (System V ABI: a Device is 2 bytes in ax, a Stream 16 bytes in rax:rdx)
_RET_ONE = bytes.fromhex("b801000000c3")  # mov eax,1; ret: CUDA, cuda:0, 1 device, true
_RET_STREAM = bytes.fromhex("31d2b801000000c3")  # xor edx,edx; mov eax,1; ret: cuda:0's stream 0
_keep = []  # the memory the patched tables live in, never freed


def _forever(obj):
    """Keep obj alive past the interpreter's teardown: C++ still asks the
    device guard while Python frees module globals at exit."""
    import ctypes
    _keep.append(obj)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def no_cuda_guard(torch):
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
        _forever(table)
        return ctypes.addressof(table) + 16

    # DeviceGuardImplInterface: 0 type, 1 exchangeDevice, 2 getDevice,
    # 5 getStream, 6 getDefaultStream, 7 getStreamFromGlobalPool,
    # 8 getNewStream, 9 exchangeStream, 15 deviceCount (PyTorch 2.11)
    guard = (ctypes.c_void_p * 1)(patched(reg[meta], {0: one, 1: one, 2: one, 5: stream, 6: stream, 7: stream,
                                                      8: stream, 9: stream, 15: one}, 40))
    _forever(guard)
    reg[cuda] = ctypes.addressof(guard)

    # CUDAHooksInterface: 4 hasPrimaryContext
    cpu = ctypes.CDLL(os.path.join(libdir, "libtorch_cpu.so"))
    get_hooks = cpu._ZN2at6detail12getCUDAHooksEv
    get_hooks.restype = ctypes.c_void_p
    hooks = get_hooks()
    ctypes.c_void_p.from_address(hooks).value = patched(hooks, {4: one}, 160)


# --- values of small tensors ---------------------------------------------------
#
# Fake tensors hold no data, but a program's control flow often reads
# values that never depended on data: a mask of ones, a counter made with
# torch.full, cache positions from arange, and what is computed from them
# alone (Hugging Face's generate stops when `unfinished_sequences.max() ==
# 0`, where unfinished_sequences starts as torch.ones and is and-ed with
# the stopping criteria). A CUDA tensor of at most VALUE_LIMIT elements
# whose inputs all have known values gets a real CPU copy of its value,
# computed by the same op on the CPU; .item() then answers with it, no
# stand-in. A value is valid while the fake tensor's version counter says
# nothing wrote to it since; a write whose values are unknown drops it.
# Seeded random ops get none (computing them would advance the CPU's
# generator, which the real run does not).

VALUE_LIMIT = 1 << 16
_values = None  # fake tensor -> (CPU tensor, the fake's version when it was right)


def _value_of(t):
    e = _values.get(t)
    if e is None:
        return None
    try:
        if t._version == e[1]:
            return e[0]
    except RuntimeError:  # an inference tensor has no version counter
        pass
    del _values[t]
    return None


def value_of(t):
    """The known value of fake tensor t (a CPU tensor), or None."""
    return None if _values is None else _value_of(t)


def _written(func, args, kwargs):
    from torch._subclasses.fake_tensor import FakeTensor
    if not func._schema.is_mutable:
        return []
    w = [a for a, arg in zip(args, func._schema.arguments) if arg.alias_info is not None
         and arg.alias_info.is_write and isinstance(a, FakeTensor)]
    return w + [v for k, v in kwargs.items() if k == "out" and isinstance(v, FakeTensor)]


def _unknown(func, args, kwargs, out):
    """An op with an input whose values are unknown."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    if func in _isin:
        o = out if isinstance(out, FakeTensor) else None
        if o is not None:
            # membership in a set of values (a generated token among the
            # stop tokens): assumed absent, so a generate loop runs to its
            # length
            core._stand_in(o, "isin")
            _values[o] = (torch.zeros(o.shape, dtype=o.dtype), o._version)
            return
    for a in _written(func, args, kwargs):
        _values.pop(a, None)


_isin = ()


def track_values(func, args, kwargs, out):
    """After a fake op: give its small outputs their values, when known."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_flatten, tree_leaves, tree_map

    global _values, _isin
    if _values is None:
        import atexit

        from torch.utils.weak import WeakIdKeyDictionary
        _values = WeakIdKeyDictionary()
        atexit.register(_values.clear)  # before the interpreter tears torch down
        a = torch.ops.aten
        _isin = (a.isin.Tensor_Tensor, a.isin.Tensor_Scalar, a.isin.Scalar_Tensor)
    for a in args:  # most ops of a model: the first input is an activation
        if isinstance(a, FakeTensor) and _value_of(a) is None:
            return _unknown(func, args, kwargs, out)
    for a in tree_leaves((args, kwargs)):
        if isinstance(a, FakeTensor) and _value_of(a) is None:
            return _unknown(func, args, kwargs, out)
    outs = [o for o in tree_leaves(out) if isinstance(o, FakeTensor)]
    if torch.Tag.nondeterministic_seeded in func.tags or any(o.numel() > VALUE_LIMIT for o in outs):
        return _unknown(func, args, kwargs, out)
    written = _written(func, args, kwargs)

    def cpu(a):
        if isinstance(a, FakeTensor):
            return _value_of(a)
        if isinstance(a, torch.device) and a.type == "cuda":
            return torch.device("cpu")
        return a

    kw = {k: ("cpu" if k == "device" and v is not None and torch.device(v).type == "cuda" else cpu(v))
          for k, v in kwargs.items()}
    try:
        with torch.no_grad():
            res = func(*tree_map(cpu, args), **kw)
    except Exception:  # an op the CPU does not have: the values stay unknown
        for a in written:
            _values.pop(a, None)
        return
    flat, _ = tree_flatten(out)
    rflat, _ = tree_flatten(res)
    if len(flat) != len(rflat):
        return
    # a view shares its base's version counter once the op returns; an op
    # that writes a tensor bumps its version once it returns
    base = args[0] if func.is_view and args and isinstance(args[0], FakeTensor) else None
    for o, r in zip(flat, rflat):
        if isinstance(o, FakeTensor) and isinstance(r, torch.Tensor):
            v = base._version if base is not None else o._version
            _values[o] = (r, v + (1 if any(o is a for a in written) else 0))
