#!/usr/bin/env python3
"""Record a PyTorch CUDA memory snapshot of an unmodified training script.

    python3 record.py [-o snapshot.pickle] [--max-entries N] [--stacks python|all]
                      [--] script.py [args...]
    python3 record.py [options] -m package.module [args...]
    python3 record.py [options] -c CODE [args...]

Turns on torch.cuda.memory._record_memory_history before the script runs,
runs the script as __main__ with sys.argv set to the script and its
arguments, and writes torch.cuda.memory._dump_snapshot to the output file:
at the first out-of-memory error (even one the script catches), when an
out-of-memory error ends the script (before it is re-raised), and at exit.
Each dump replaces the last, so the file ends up with the latest history;
a dump goes to a new temporary file beside it, renamed over it once
complete, so a dump that fails (a full disk) keeps the earlier snapshot,
and a failed dump at exit makes the exit status 1 if the script's was 0.
Replay it with `gpumem replay snapshot.pickle`.

`gpumem record -- python3 train.py args...` runs this same file (it is
built into the gpumem binary). The exit status is the script's.
"""

import atexit
import os
import pickle
import runpy
import signal
import stat
import sys
import tempfile

USAGE = (
    "usage: record.py [-o FILE] [--max-entries N] [--stacks python|all] "
    "[--] script.py [args...] | -m module [args...] | -c CODE [args...]"
)


def write_snapshot(torch, out):
    """Writes the snapshot to a new file created exclusively beside out
    (no name another user can plant a link under), flushes it to disk and
    renames it over out: out keeps its earlier snapshot when this one
    fails, and a reader never sees half of one. Raises on failure."""
    directory = os.path.dirname(out) or "."
    try:
        st = os.stat(out)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OSError(f"{out} is not a regular file")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(out) + ".", suffix=".tmp")
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
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def tell_gpumem(ok, out, why):
    """Appends the outcome of a dump to the status file `gpumem record`
    reads ($GPUMEM_RECORD_STATUS), so that it reports a failed dump as a
    failure. The file must exist: a stale variable creates nothing."""
    path = os.environ.get("GPUMEM_RECORD_STATUS")
    if not path:
        return
    line = "\t".join(" ".join(str(x).split()) for x in ("ok" if ok else "fail", out, why)) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


# read once, while only one thread runs
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def parse(argv):
    out, max_entries, stacks, module, code = "snapshot.pickle", 1_000_000, "python", None, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        if a in ("-o", "--output", "--max-entries", "--stacks", "-m", "-c"):
            if i + 1 >= len(argv):
                sys.exit(f"record.py: {a} needs a value\n{USAGE}")
            v = argv[i + 1]
            i += 2
            if a in ("-o", "--output"):
                out = v
            elif a == "--stacks":
                if v not in ("python", "all"):
                    sys.exit(f"record.py: --stacks: want python or all, not {v!r}")
                stacks = v
            elif a == "-m":
                module = v
                break
            elif a == "-c":
                code = v
                break
            else:
                try:
                    max_entries = int(v)
                except ValueError:
                    max_entries = 0
                if max_entries <= 0:
                    sys.exit(f"record.py: --max-entries: want a positive number, not {v!r}")
            continue
        if a in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        sys.exit(f"record.py: unknown option {a}\n{USAGE}")
    rest = argv[i:]
    if module is None and code is None and not rest:
        sys.exit(f"record.py: no script to run\n{USAGE}")
    return out, max_entries, stacks, module, code, rest


def main():
    out, max_entries, stacks, module, code, rest = parse(sys.argv[1:])
    # the script may chdir; the snapshot goes where the caller meant
    out = os.path.abspath(out)

    try:
        import torch
    except ImportError as e:  # one line, not a traceback
        python = os.path.basename(sys.executable) or "python3"
        sys.exit(f"record.py: {python} cannot import torch: {e}")

    if not torch.cuda.is_available():
        sys.exit("record.py: torch sees no CUDA device; nothing to record")
    torch.cuda.memory._record_memory_history(
        enabled="all", context="all", stacks=stacks, max_entries=max_entries
    )
    pid = os.getpid()
    dumped_oom = False
    state = {"status": 0, "failed": False}

    def dump(why):
        # forked children (DataLoader workers) inherit the hooks; only the
        # recording process writes
        if os.getpid() != pid:
            return
        try:
            write_snapshot(torch, out)
        except Exception as e:  # never hide the script's own outcome
            state["failed"] = True
            print(f"record.py: could not write {out} ({why}): {e}", file=sys.stderr)
            tell_gpumem(False, out, f"{why}: {e}")
            return
        state["failed"] = False
        print(f"record.py: wrote {out} ({why})", file=sys.stderr)
        tell_gpumem(True, out, why)

    def at_exit():
        dump("at exit")
        if state["failed"] and state["status"] == 0:
            # a script that succeeded but whose snapshot could not be
            # written fails: the exit status cannot change from atexit
            # any other way
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    def on_oom(device, alloc, device_alloc, device_free):
        nonlocal dumped_oom
        if not dumped_oom:
            dumped_oom = True
            dump(f"out of memory on cuda:{device} asking for {alloc} bytes")

    try:
        torch._C._cuda_attach_out_of_memory_observer(on_oom)
    except (AttributeError, RuntimeError):
        pass  # older PyTorch: the except clause below still catches it
    atexit.register(at_exit)
    # schedulers stop jobs with SIGTERM, which would skip atexit
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(128 + sig))

    if code is not None:
        sys.argv = ["-c"] + rest
        sys.path[0] = ""  # as `python3 -c` does
        run = lambda: exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    elif module is not None:
        sys.argv = [module] + rest
        sys.path[0] = os.getcwd()  # as `python3 -m module` does
        run = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script = rest[0]
        sys.argv = rest
        # as `python3 script.py` does: the script's folder comes first
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        run = lambda: runpy.run_path(script, run_name="__main__")
    oom_error = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    try:
        run()
    except SystemExit as e:
        state["status"] = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        raise
    except oom_error:
        state["status"] = 1
        if not dumped_oom:
            dump("out of memory")
        raise
    except BaseException:
        state["status"] = 1
        raise


if __name__ == "__main__":
    main()
