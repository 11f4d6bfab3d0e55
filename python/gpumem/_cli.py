"""Running the gpumem command and reading its JSON."""

import html
import json
import os
import shutil
import subprocess
import sys
import sysconfig


class GpumemError(RuntimeError):
    """gpumem refused or failed: its one-line error (and hints) as text,
    the exit status in .code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def binary():
    """The path of the gpumem command: $GPUMEM_BINARY, else the one
    installed with this package, else the first on PATH."""
    env = os.environ.get("GPUMEM_BINARY")
    if env:
        return env
    exe = "gpumem.exe" if sys.platform == "win32" else "gpumem"
    beside = os.path.join(sysconfig.get_path("scripts"), exe)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(exe)
    if found:
        return found
    raise GpumemError("gpumem: error: the gpumem command is not installed (pip install gpumem, "
                      "or set GPUMEM_BINARY)", 127)


def _run(args, timeout=None):
    p = subprocess.run([binary()] + args, capture_output=True, text=True, timeout=timeout)
    # exit 1 with a document is a result (a budget exceeded, an OOM with
    # --fail-on-oom); anything else without one is an error
    if p.returncode not in (0, 1) or not p.stdout.strip():
        msg = "\n".join(l for l in p.stderr.splitlines() if l.startswith("gpumem: ")) or p.stderr.strip()
        raise GpumemError(msg or f"gpumem exited {p.returncode}", p.returncode)
    return json.loads(p.stdout)


def _settings(alloc_conf=None, device_memory=None, memory_fraction=None, policy=None):
    a = []
    if alloc_conf is not None:
        a += ["--alloc-conf", alloc_conf]
    if device_memory is not None:
        a += ["--device-memory", str(device_memory)]
    if memory_fraction is not None:
        a += ["--memory-fraction", repr(float(memory_fraction))]
    if policy is not None:
        a += ["--policy", policy]
    return a


def replay(trace, *, alloc_conf=None, device_memory=None, memory_fraction=None, policy=None,
           device=None, ignore_addresses=False, timeout=None):
    """Replay a snapshot (or any trace gpumem reads) as `gpumem replay -o
    json` does; returns a Result (a dict). device_memory is bytes or a
    size with a unit ("24GiB"); alloc_conf is PYTORCH_CUDA_ALLOC_CONF
    syntax (None keeps the settings the trace was recorded with)."""
    a = ["replay", os.fspath(trace), "-o", "json"] + _settings(alloc_conf, device_memory, memory_fraction, policy)
    if device is not None:
        a += ["--device", str(device)]
    if ignore_addresses:
        a.append("--ignore-addresses")
    return Result(_run(a, timeout))


def sweep(trace, *, device_memory=None, grid=None, jobs=None, timeout=None):
    """Replay a trace under a grid of settings (`gpumem sweep -o json`):
    device_memory is one card or a list of them; grid a list of settings
    (None: the default grid)."""
    a = ["sweep", os.fspath(trace), "-o", "json"]
    if device_memory is not None:
        cards = device_memory if isinstance(device_memory, (list, tuple)) else [device_memory]
        a += ["--device-memory", ",".join(str(c) for c in cards)]
    for g in grid or []:
        a += ["--grid", g]
    if jobs:
        a += ["-j", str(jobs)]
    return _run(a, timeout)


def diff(a, b, *, alloc_conf=None, device_memory=None, timeout=None):
    """Compare two traces (`gpumem diff -o json`)."""
    args = ["diff", os.fspath(a), os.fspath(b), "-o", "json"] + _settings(alloc_conf, device_memory)
    return _run(args, timeout)


def estimate(command, *, device_memory=None, gpu=None, alloc_conf=None, timeout=None):
    """Estimate the memory of a PyTorch script before it runs
    (`gpumem estimate -o json -- COMMAND`): command is the argument list,
    e.g. ["python3", "train.py", "--batch", "8"]."""
    a = ["estimate", "-o", "json"]
    if device_memory is not None:
        a += ["--device-memory", str(device_memory)]
    if gpu is not None:
        a += ["--gpu", gpu]
    if alloc_conf is not None:
        a += ["--alloc-conf", alloc_conf]
    return _run(a + ["--"] + [os.fspath(c) for c in command], timeout)


def version():
    """gpumem's version (`gpumem version -o json`)."""
    return _run(["version", "-o", "json"])


def _bytes(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


class Result(dict):
    """A replay's JSON document, with its headline figures as attributes
    and a rich display in Jupyter."""

    @property
    def peak_reserved(self):
        return self["memory_stats"]["reserved_bytes.all.peak"]

    @property
    def peak_allocated(self):
        return self["memory_stats"]["allocated_bytes.all.peak"]

    @property
    def fits(self):
        """False when the replay ran out of memory where the program did not."""
        oom = self.get("oom")
        return not oom or bool(oom.get("recorded"))

    def _rows(self):
        ms = self["memory_stats"]
        frag = (self.get("fragmentation") or {}).get("peaks")
        rows = [
            ("source", self.get("source", "")),
            ("settings", self.get("settings") or "defaults"),
            ("peak reserved", _bytes(ms["reserved_bytes.all.peak"])),
            ("peak allocated", _bytes(ms["allocated_bytes.all.peak"])),
            ("lower bound", _bytes(self.get("lower_bound", 0))),
            ("fragmentation (peaks)", "n/a" if frag is None else f"{100 * frag:.1f}%"),
            ("allocation retries", f"{ms.get('num_alloc_retries', 0):,}"),
            ("OOMs", f"{ms.get('num_ooms', 0):,}"),
            ("outcome", "completed" if self.fits else f"out of memory at operation {self['oom']['op_index']:,}"),
        ]
        for k, why in sorted((self.get("inexact_keys") or {}).items()):
            rows.append(("not settled: " + k, why))
        return rows

    def _chart(self, width=420, height=90):
        pts = self.get("timeline") or []
        if len(pts) < 2:
            return ""
        top = max(max(p["reserved"], p["allocated"]) for p in pts) or 1
        last = pts[-1]["op"] or 1

        def path(key):
            return " ".join(f"{'M' if i == 0 else 'L'}{width * p['op'] / last:.1f},{height - height * p[key] / top:.1f}"
                            for i, p in enumerate(pts))
        return (f'<svg width="{width}" height="{height + 14}" role="img" aria-label="memory over operations">'
                f'<path d="{path("reserved")}" fill="none" stroke="#c0392b"/>'
                f'<path d="{path("allocated")}" fill="none" stroke="#2471a3"/>'
                f'<text x="0" y="{height + 12}" font-size="10">reserved (red), allocated (blue); '
                f'top {html.escape(_bytes(top))}</text></svg>')

    def _repr_html_(self):
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                       for k, v in self._rows())
        return f"<div><table>{body}</table>{self._chart()}</div>"

    def _repr_markdown_(self):
        return "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in self._rows())
