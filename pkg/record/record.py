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
Each dump replaces the last, so the file ends up with the latest history.
Replay it with `gpumem replay snapshot.pickle`.

`gpumem record -- python3 train.py args...` runs this same file (it is
built into the gpumem binary). The exit status is the script's.
"""

import atexit
import os
import runpy
import signal
import sys

USAGE = (
    "usage: record.py [-o FILE] [--max-entries N] [--stacks python|all] "
    "[--] script.py [args...] | -m module [args...] | -c CODE [args...]"
)


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

    def dump(why):
        # forked children (DataLoader workers) inherit the hooks; only the
        # recording process writes
        if os.getpid() != pid:
            return
        try:
            torch.cuda.memory._dump_snapshot(out)
        except Exception as e:  # never hide the script's own outcome
            print(f"record.py: could not write {out} ({why}): {e}", file=sys.stderr)
            return
        print(f"record.py: wrote {out} ({why})", file=sys.stderr)

    def on_oom(device, alloc, device_alloc, device_free):
        nonlocal dumped_oom
        if not dumped_oom:
            dumped_oom = True
            dump(f"out of memory on cuda:{device} asking for {alloc} bytes")

    try:
        torch._C._cuda_attach_out_of_memory_observer(on_oom)
    except (AttributeError, RuntimeError):
        pass  # older PyTorch: the except clause below still catches it
    atexit.register(dump, "at exit")
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
    except oom_error:
        if not dumped_oom:
            dump("out of memory")
        raise


if __name__ == "__main__":
    main()
