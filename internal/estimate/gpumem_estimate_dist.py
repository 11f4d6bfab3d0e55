"""Several ranks for gpumem estimate's CUDA emulator (gpumem estimate
--nproc N; see docs/estimate.md, "Several ranks").

gpumem starts each rank as a process of its own, with torchrun's
environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...) and a virtual
card of its own. Here torch.distributed is made to work with no GPU and no
other process: every process group is torch's fake backend (collectives
return at once, their outputs keep their shapes and hold no data, as every
CUDA tensor here), so a rank never waits for another. What a collective
allocates through PyTorch's caching allocator is modelled (rules below);
NCCL's own buffers are not allocated through it and are not counted.
"""
import ctypes
import os
import sys

import torch  # imported by gpumem_estimate.install before this module

import gpumem_estimate as core

# the DDP Reducer's timer for CUDA parameters records CUDA events, which need
# the driver: the CPU timer is put in its place (see _cpu_timer_for_cuda)
_timer_patched = False


def world():
    """(rank, world size, local rank, local world size) from torchrun's
    environment; (0, 1, 0, 1) without it."""
    env = os.environ

    def num(k, d):
        try:
            return int(env.get(k, d))
        except ValueError:
            return d
    return num("RANK", 0), num("WORLD_SIZE", 1), num("LOCAL_RANK", 0), num("LOCAL_WORLD_SIZE", num("WORLD_SIZE", 1))


def devices():
    """How many GPUs each rank's torch.cuda reports: the local world size,
    so that torch.cuda.set_device(LOCAL_RANK) works; every index is the
    rank's one virtual card."""
    return max(world()[3], 1)


def install(torch):
    """Patch torch.distributed for the emulated ranks (imported lazily by
    torch, so this runs before the script's own imports)."""
    import torch.distributed as dist
    if not dist.is_available():
        return
    import torch.distributed.distributed_c10d as c10d

    orig_init = c10d.init_process_group

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                           group_name="", pg_options=None, device_id=None, _ranks=None):
        from torch.testing._internal.distributed.fake_pg import FakeStore
        global _backend
        _backend = _cuda_backend(backend)
        r, w, _, _ = world()
        rank = r if rank is None or rank < 0 else rank
        world_size = w if world_size is None or world_size < 0 else world_size
        # the backend the script asked for (nccl, gloo, cpu:gloo,cuda:nccl):
        # the fake one, which needs no rendezvous and no GPU
        return orig_init("fake", timeout=timeout, world_size=world_size, rank=rank, store=FakeStore(),
                         group_name=group_name, _ranks=_ranks)

    orig_new = c10d._new_group_with_tag

    def new_group_with_tag(ranks=None, timeout=None, backend=None, backend_options=None, *a, **k):
        return orig_new(ranks, timeout, None, None, *a, **k)

    init_process_group.__wrapped__ = orig_init
    c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group
    c10d._new_group_with_tag = new_group_with_tag
    dm = sys.modules.get("torch.distributed.device_mesh")
    if dm is not None and hasattr(dm, "init_process_group"):
        dm.init_process_group = init_process_group
    _patch_ddp(torch)
    _patch_accelerator(torch)
    _patch_storage_resize(torch)
    _patch_object_collectives(torch, c10d)
    core._op_hook = _op_hook


def _patch_storage_resize(torch):
    """A CUDA storage resized in place (FSDP2 frees its unsharded
    parameters with storage.resize_(0) and allocates them again with
    resize_(bytes)) frees its block at 0 bytes, allocates one when it grows
    from 0, and otherwise allocates the new block before freeing the old,
    as PyTorch's resize does. A storage method, not an op: the dispatch
    mode does not see it."""
    import weakref
    orig = torch.UntypedStorage.resize_
    emptied = {}  # key -> weak reference: CUDA storages resized to 0 (a fake one's device is meta)

    def resize_(self, size):
        out = orig(self, size)
        if core._st is None or core._st.card.closed:
            return out
        key, n = self._cdata, self.nbytes()
        ent = core._st.live.get(key)
        if n == 0:
            if ent is not None:
                core._free(key)
                emptied[key] = weakref.ref(self, lambda _r, key=key: emptied.pop(key, None))
        elif ent is None:
            if emptied.pop(key, None) is not None:
                core._malloc(key, n, self)
        elif n != ent[1]:
            core._relabel_free_then_alloc(key, n, self)
        return out

    resize_.__wrapped__ = orig
    torch.UntypedStorage.resize_ = resize_


def _patch_object_collectives(torch, c10d):
    """all_gather_object, gather_object and broadcast_object_list move
    pickled objects through tensors whose values fake tensors do not hold.
    Every rank is taken to hold what this one does: the gathered list is
    this rank's object in every slot, broadcast_object_list leaves the
    rank's own list. Their CUDA tensors are allocated as PyTorch's NCCL
    path makes them (the sizes, then the bytes, each object as big as this
    rank's); gloo's path uses CPU tensors."""
    import io
    import pickle

    def nbytes(obj):
        f = io.BytesIO()
        c10d._pickler(f).dump(obj)
        return len(f.getvalue())

    def copy(obj):
        return pickle.loads(pickle.dumps(obj))

    def dev():
        return torch.device("cuda", 0) if _backend == "nccl" else None

    def all_gather_object(object_list, obj, group=None):
        n, w = nbytes(obj), c10d.get_world_size(group)  # (raises without a process group, as PyTorch)
        d = dev()
        if d is not None:
            data = torch.empty(n, dtype=torch.uint8, device=d)
            size = torch.empty(1, dtype=torch.long, device=d)
            sizes = torch.zeros(w, dtype=torch.long, device=d)
            c10d.all_gather([sizes[i].unsqueeze(0) for i in range(w)], size, group=group)
            out = torch.empty(n * w, dtype=torch.uint8, device=d)
            c10d.all_gather([out[n * i:n * (i + 1)] for i in range(w)], data, group=group)
            del data, size, sizes, out
        for i in range(len(object_list)):
            object_list[i] = copy(obj)

    def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
        c10d.get_world_size(group)
        if object_gather_list is not None:
            for i in range(len(object_gather_list)):
                object_gather_list[i] = copy(obj)

    def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
        c10d.get_world_size(group)
        d = dev() if device is None else torch.device(device)
        if d is not None and d.type == "cuda":
            sizes = [nbytes(o) for o in object_list]
            size_t = torch.empty(len(sizes), dtype=torch.long, device=d)
            data = torch.empty(sum(sizes), dtype=torch.uint8, device=d)
            del size_t, data

    for name, f in (("all_gather_object", all_gather_object), ("gather_object", gather_object),
                    ("broadcast_object_list", broadcast_object_list)):
        f.__wrapped__ = getattr(c10d, name)
        setattr(c10d, name, f)
        setattr(torch.distributed, name, f)


def _patch_accelerator(torch):
    """torch.accelerator (FSDP2's default mesh asks it for the device
    type) answers CUDA, as on the card; C++ would say CPU (no driver)."""
    cuda = torch.device("cuda")
    torch._C._get_accelerator = lambda check=False: cuda
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return
    acc.current_accelerator = lambda check_available=False: cuda
    acc.is_available = lambda: True
    acc.device_count = devices
    acc.current_device_index = lambda: 0
    acc.current_device_idx = lambda: 0
    acc.synchronize = lambda device=None: None


_backend = "nccl"  # what the script's default group would use for CUDA tensors


def _cuda_backend(backend):
    """The backend a group of the script would use for CUDA tensors:
    nccl by default, gloo when it asks for gloo alone ("gloo", or
    "cuda:gloo" in a per-device list)."""
    b = str(backend or "").lower()
    if ":" in b:
        for part in b.split(","):
            dev, _, name = part.partition(":")
            if dev.strip() == "cuda":
                return name.strip()
        return "nccl"
    return b if b in ("gloo", "nccl") else "nccl"


# --- DDP -----------------------------------------------------------------------

def _patch_ddp(torch):
    import torch.distributed.utils as du
    import torch.nn.parallel.distributed as ddp

    def verify(process_group, tensors, logger=None):
        """DDP's check that every rank has the same parameters, by the
        allocations it makes on the H200 (PyTorch 2.11, NCCL and gloo): a
        1-element int64 count, an all-gather of it into one tensor a rank
        (NCCL's flat output beside them), then the parameters' sizes and
        strides, one int64 each, broadcast; all freed. Its answer reads the
        gathered values, which fake tensors do not hold: every rank is
        taken to have the same model, as torchrun's ranks of one script do."""
        dev = next((t.device for t in tensors if t.device.type == "cuda"), None)
        if dev is None:
            return None
        import torch.distributed as dist
        n = dist.get_world_size(process_group)
        count = torch.empty(1, dtype=torch.int64, device=dev)
        outs = [torch.empty(1, dtype=torch.int64, device=dev) for _ in range(n)]
        dist.all_gather(outs, count, group=process_group)
        meta = torch.empty(2 * sum(t.dim() for t in tensors), dtype=torch.int64, device=dev)
        dist.broadcast(meta, 0, group=process_group)
        del meta, outs, count
        return None

    du._verify_param_shape_across_processes = verify
    ddp._verify_param_shape_across_processes = verify

    orig_to = du._recursive_to

    def recursive_to(inputs, target_device, use_side_stream_for_tensor_copies):
        # DDP moves its inputs to device_ids[0]: every CUDA index is cuda:0
        # here, so inputs on the card stay where they are, as on the rank's GPU
        if isinstance(target_device, torch.device) and target_device.type == "cuda":
            target_device = torch.device("cuda", 0)
        return orig_to(inputs, target_device, use_side_stream_for_tensor_copies)

    du._recursive_to = recursive_to

    # the Reducer's gradient buckets (made with it, and again when they are
    # rebuilt in the second forward) are gradients, not a module's activations
    base = ddp.dist.Reducer

    class Reducer(base):
        def __init__(self, *a, **k):
            with _labelled("gradient"):
                super().__init__(*a, **k)

        def _rebuild_buckets(self):
            with _labelled("gradient"):
                return super()._rebuild_buckets()

    Reducer.__name__ = Reducer.__qualname__ = "Reducer"
    ddp.dist.Reducer = Reducer

    orig_init = ddp.DistributedDataParallel.__init__

    def ddp_init(self, *a, **k):
        _cpu_timer_for_cuda(torch)  # before the Reducer is made
        orig_init(self, *a, **k)

    ddp_init.__wrapped__ = orig_init
    ddp.DistributedDataParallel.__init__ = ddp_init


class _labelled:
    """Label what is allocated inside (docs/estimate.md, composition)."""

    def __init__(self, label):
        self.label = label

    def __enter__(self):
        self.prev = getattr(core._tls, "label", None)
        core._tls.label = self.label

    def __exit__(self, *exc):
        core._tls.label = self.prev


def _cpu_timer_for_cuda(torch):
    """c10d's timer registry (an std::unordered_map from device type to a
    creator) makes the DDP Reducer a CUDA timer for CUDA parameters, which
    records CUDA events (the driver). Give CUDA the CPU timer's creator (a
    bitwise copy of its std::function: a plain function pointer, stored in
    place) so that the Reducer times on the host."""
    global _timer_patched
    if _timer_patched:
        return
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    cpu = ctypes.CDLL(os.path.join(libdir, "libtorch_cpu.so"))
    try:
        get = cpu._ZN4c10d13TimerRegistryEv
    except AttributeError as e:
        raise RuntimeError("gpumem estimate: this torch build has no c10d timer registry; DDP cannot be emulated") from e
    get.restype = ctypes.c_void_p
    reg = get()
    # libstdc++'s unordered_map: buckets, bucket count, the list's head, size
    head = (ctypes.c_uint64 * 4).from_address(reg)
    if head[3] > 16:
        raise RuntimeError("gpumem estimate: c10d's timer registry is not laid out as expected")
    nodes, node = {}, head[2]
    for _ in range(int(head[3])):
        if not node:
            break
        nodes[ctypes.c_int8.from_address(node + 8).value] = node
        node = ctypes.c_uint64.from_address(node).value
    cpu_t, cuda_t = int(torch._C._autograd.DeviceType.CPU), int(torch._C._autograd.DeviceType.CUDA)
    if cpu_t not in nodes or cuda_t not in nodes or not ctypes.c_uint64.from_address(nodes[cpu_t] + 32).value:
        raise RuntimeError("gpumem estimate: c10d's timer registry is not laid out as expected")
    ctypes.memmove(nodes[cuda_t] + 16, nodes[cpu_t] + 16, 32)
    _timer_patched = True


# --- collectives -----------------------------------------------------------------

def _op_hook(func, types, args, kwargs):
    """Called by the emulator's dispatch mode before every op: every CUDA
    device index is the rank's one card (cuda:0); an op on a tensor
    subclass of its own (a DTensor: FSDP2's parameters, their gradients
    and optimizer states) goes to the subclass first (NotImplemented), so
    that the ops it runs on its local fake tensors come back through the
    mode and are allocated; c10d's collectives run on the fake backend with
    works whose futures hold their outputs, as NCCL's do (DDP's Reducer
    reads them). Returns core._CONTINUE to let the op run as usual."""
    for t in types:
        if t not in _plain and not _plain_type(t):
            return NotImplemented
    d = kwargs.get("device")
    if d is not None:
        dd = d if isinstance(d, torch.device) else torch.device(d)
        if dd.type == "cuda" and dd.index not in (None, 0):
            kwargs["device"] = torch.device("cuda", 0)
    if getattr(func, "namespace", "") != "c10d":
        return core._CONTINUE
    return _collective(func, args, kwargs)


_plain = set()  # types whose ops the mode handles itself


def _plain_type(t):
    """Tensor, Parameter, FakeTensor and their subclasses without a
    __torch_dispatch__ of their own: the mode's own."""
    from torch._subclasses.fake_tensor import FakeTensor
    for base in getattr(t, "__mro__", ()):
        if base in (FakeTensor, torch.Tensor, torch.nn.Parameter):
            break
        if "__torch_dispatch__" in base.__dict__:
            return False
    _plain.add(t)
    return True


def _collective(func, args, kwargs):
    from torch._C._distributed_c10d import _create_work_from_future
    from torch._subclasses.fake_tensor import FakeTensor

    name = func._schema.name.split("::")[-1]

    def cuda(t):
        return isinstance(t, FakeTensor) and t.device.type == "cuda"

    shape = None  # of the temporary the backend allocates for the collective
    like = None
    if name == "allgather_":
        # NCCL (and gloo) gather a list of same-sized outputs through one
        # flat tensor of them all, made before the collective and freed
        # after it (H200: DDP's parameter check, world sizes 1 and 2)
        outs = args[0][0] if args and args[0] else []
        if outs and all(cuda(t) for t in outs) and len({(tuple(t.shape), t.dtype) for t in outs}) == 1:
            shape, like = (len(outs),) + tuple(outs[0].shape), outs[0]
    elif _backend == "gloo" and name in ("_allgather_base_", "_reduce_scatter_base_") and len(args) > 1:
        # gloo stages a CUDA all_gather_into_tensor (reduce_scatter_tensor)
        # through a temporary the size of its output (input) on the
        # current stream, freed when it returns; NCCL allocates nothing
        # (H200, FSDP2: gloo with two ranks, NCCL with one)
        t = args[0] if name == "_allgather_base_" else args[1]
        if cuda(t):
            shape, like = tuple(t.shape), t
    temp = None
    if shape is not None:
        with core._fake_mode:  # inside the dispatch mode: make and allocate as the backend would
            temp = torch.empty(shape, dtype=like.dtype, device=like.device)
        core._track(temp)
    with core._fake_mode:
        out = func(*args, **kwargs)
    del temp
    if isinstance(out, tuple) and len(out) >= 2 and isinstance(out[-1], torch.ScriptObject):
        value = out[0]
    elif isinstance(out, torch.ScriptObject):
        value, out = None, (out,)
    else:
        return out
    fut = torch.futures.Future()
    fut.set_result(value)
    work = _create_work_from_future(fut).boxed()  # the op returns a ScriptObject
    if len(out) == 1:
        return work
    return tuple(out[:-1]) + (work,)
