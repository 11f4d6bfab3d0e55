"""Record PyTorch CUDA memory snapshots from inside a training program.

One file, no dependency beyond torch; `gpumem hooks` writes it out. Each
snapshot replays with `gpumem replay` (several ranks: `gpumem replay
'NAME.rank*.pickle'`).

    import gpumem_hooks

    with gpumem_hooks.recording("snapshot.pickle"):   # dumps on OOM and at exit
        train()

    gpumem_hooks.dump("after_warmup")   # snapshot.rank0.after_warmup.pickle

    trainer = lightning.Trainer(callbacks=[gpumem_hooks.lightning_callback(steps=[10, 100])])
    trainer = transformers.Trainer(..., callbacks=[gpumem_hooks.hf_callback(steps=[10, 100])])

Under a launcher (torchrun, accelerate, deepspeed) the file names carry
the rank from the environment: NAME.rank{RANK}[.TAG].pickle. Once
recording, SIGUSR1 to a process dumps it on demand.
"""

import atexit
import contextlib
import os
import pickle
import signal
import stat
import sys
import tempfile
import threading

_state = {"path": "snapshot.pickle", "pid": None, "oom_dumped": False, "timer": None, "on": False, "hooked": False}

# read once, at import, while only one thread runs
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def rank():
    """The process's rank from the launcher's environment, or None."""
    for var in ("RANK", "LOCAL_RANK"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    return None


def snapshot_path(path="snapshot.pickle", tag=None):
    """NAME.pickle as NAME.rank{R}[.TAG].pickle (no .rank part without a rank)."""
    base = path[: -len(".pickle")] if path.endswith(".pickle") else path
    r = rank()
    if r is not None:
        base += f".rank{r}"
    if tag:
        base += f".{tag}"
    return base + ".pickle"


def _say(msg):
    print(f"gpumem_hooks: {msg}", file=sys.stderr, flush=True)


def _write_snapshot(torch, out):
    """Writes the snapshot to a new file created exclusively beside out
    (its own random name: a periodic dump may run while the OOM dump does,
    and no one can plant a link under it), flushes it to disk and renames
    it over out, so out keeps its earlier snapshot when this one fails and
    a reader never sees half of one. Raises on failure."""
    try:
        st = os.stat(out)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OSError(f"{out} is not a regular file")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out) or ".", prefix="." + os.path.basename(out) + ".", suffix=".tmp")
    try:
        snapshot = getattr(torch.cuda.memory, "_snapshot", None)
        if snapshot is not None:
            with os.fdopen(fd, "wb") as f:
                fd = -1
                pickle.dump(snapshot(), f)
                f.flush()
                os.fsync(f.fileno())
        else:  # a torch without _snapshot writes the file itself
            os.close(fd)
            fd = -1
            torch.cuda.memory._dump_snapshot(tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # as open() would have made it
        os.replace(tmp, out)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _tell_gpumem(ok, out, why):
    """Appends the outcome of a dump to the status file of `gpumem record`
    ($GPUMEM_RECORD_STATUS), which reports a failed dump as a failure. The
    file must exist: a stale variable creates nothing."""
    path = os.environ.get("GPUMEM_RECORD_STATUS")
    if not path:
        return
    line = "\t".join(" ".join(str(x).split()) for x in ("ok" if ok else "fail", out, why)) + "\n"
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)


def _is_oom(e):
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return isinstance(e, oom)


def start(path="snapshot.pickle", max_entries=1_000_000, stacks="python", every=None, on_signal=True):
    """Turn on the allocator's history and dump at the first OOM, at exit,
    on SIGUSR1 and, with every (seconds), periodically. False when torch
    sees no CUDA device."""
    import torch

    if _state["on"] and _state["pid"] == os.getpid():
        return True  # already recording (a launcher's rank with a callback)
    if not torch.cuda.is_available():
        _say("torch sees no CUDA device; not recording")
        return False
    torch.cuda.memory._record_memory_history(
        enabled="all", context="all", stacks=stacks, max_entries=max_entries
    )
    # the snapshot goes where it was asked even if the program changes folder
    _state.update(path=os.path.abspath(path), pid=os.getpid(), oom_dumped=False, on=True)

    if not _state["hooked"]:  # once per process, however often recording starts
        _state["hooked"] = True

        def on_oom(device, alloc, device_alloc, device_free):
            if _state["on"] and not _state["oom_dumped"]:
                _state["oom_dumped"] = True
                dump(why=f"out of memory on cuda:{device} asking for {alloc} bytes")

        try:
            torch._C._cuda_attach_out_of_memory_observer(on_oom)
        except (AttributeError, RuntimeError):
            pass  # older PyTorch: recording() and the callbacks still catch it
        atexit.register(_at_exit)
        if on_signal and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR1, lambda sig, frame: dump(why="on SIGUSR1"))
            # launchers stop ranks with SIGTERM, which would skip atexit
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(128 + sig))
    if every:
        def tick():
            dump(why=f"every {every:g}s")
            _arm()

        def _arm():
            t = threading.Timer(every, tick)
            t.daemon = True
            _state["timer"] = t
            t.start()

        _arm()
    return True


def _at_exit():
    if _state["on"]:
        dump(why="at exit")


def stop():
    """Stop recording (and the periodic dumps)."""
    import torch

    if _state["timer"] is not None:
        _state["timer"].cancel()
    _state["on"] = False
    torch.cuda.memory._record_memory_history(enabled=None)


def dump(tag=None, path=None, why=None):
    """Write the snapshot now, to NAME.rank{R}[.TAG].pickle; returns the
    file, or None when it could not be written (never raises)."""
    import torch

    # forked children (DataLoader workers) inherit the hooks; only the
    # recording process writes
    if _state["pid"] is not None and os.getpid() != _state["pid"]:
        return None
    out = snapshot_path(path or _state["path"], tag)
    why = why or tag or "on request"
    try:
        _write_snapshot(torch, out)
    except Exception as e:  # never hide the program's own outcome
        _say(f"could not write {out} ({why}): {e}")
        _tell_gpumem(False, out, f"{why}: {e}")
        return None
    _say(f"wrote {out} ({why})")
    _tell_gpumem(True, out, why)
    return out


@contextlib.contextmanager
def recording(path="snapshot.pickle", max_entries=1_000_000, stacks="python", every=None):
    """Record inside the block; dump at its first OOM and when it ends."""
    on = start(path, max_entries, stacks, every)
    try:
        yield
    except BaseException as e:
        if on and _is_oom(e) and not _state["oom_dumped"]:
            _state["oom_dumped"] = True
            dump(why="out of memory")
        raise
    finally:
        if on:
            dump(why="end of recording")
            stop()


def _due(step, steps, every_n_steps):
    return step in steps or bool(every_n_steps and step > 0 and step % every_n_steps == 0)


def lightning_callback(path="snapshot.pickle", steps=(), every_n_steps=None, **start_kw):
    """A PyTorch Lightning callback: records from fit start, dumps after the
    chosen global steps (NAME.rank{R}.step{N}.pickle), on OOM and at fit end."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback
    steps = set(steps)

    class GpumemCallback(Callback):
        def on_fit_start(self, trainer, pl_module):
            start(path, **start_kw)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if _due(trainer.global_step, steps, every_n_steps):
                dump(f"step{trainer.global_step}")

        def on_exception(self, trainer, pl_module, exception):
            if _is_oom(exception) and not _state["oom_dumped"]:
                _state["oom_dumped"] = True
                dump("oom")

        def on_fit_end(self, trainer, pl_module):
            dump("end")

    return GpumemCallback()


def hf_callback(path="snapshot.pickle", steps=(), every_n_steps=None, **start_kw):
    """A Hugging Face transformers.Trainer callback: records from the start
    of training, dumps after the chosen global steps, on OOM (through the
    allocator's observer) and at the end of training."""
    from transformers import TrainerCallback

    steps = set(steps)

    class GpumemCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            start(path, **start_kw)

        def on_step_end(self, args, state, control, **kwargs):
            if _due(state.global_step, steps, every_n_steps):
                dump(f"step{state.global_step}")

        def on_train_end(self, args, state, control, **kwargs):
            dump("end")

    return GpumemCallback()


def _launcher_start():
    """What `gpumem record` runs in every Python process a launcher starts
    (through sitecustomize): each rank records itself, once."""
    env = os.environ
    if rank() is None or env.get("GPUMEM_RECORDING_PID"):
        return  # the launcher itself, or a child of a recording rank
    env["GPUMEM_RECORDING_PID"] = str(os.getpid())
    every = float(env.get("GPUMEM_RECORD_EVERY") or 0) or None
    start(
        env.get("GPUMEM_RECORD_SNAPSHOT", "snapshot.pickle"),
        int(env.get("GPUMEM_RECORD_MAX_ENTRIES") or 1_000_000),
        env.get("GPUMEM_RECORD_STACKS") or "python",
        every,
    )
