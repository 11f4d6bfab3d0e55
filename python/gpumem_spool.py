"""Publish this process's CUDA caching-allocator statistics for `gpumem exporter`.

One line in a training script, after it has picked its GPU:

    import gpumem_spool; gpumem_spool.start()

Every `interval` seconds a daemon thread writes SPOOL/<pid>-<token>.json
with torch.cuda.memory_stats() of the current device; `gpumem exporter`
serves it to Prometheus, and drops it when the process exits or stops
writing. <token> is 16 random hex digits drawn at start: two processes'
names never collide (not even two PID 1s of two containers), and no one
who cannot list the folder can guess ours. The file is replaced
atomically (written to a temporary file created exclusively, then renamed
over our own name only) and readable by its owner only.

SPOOL is $GPUMEM_SPOOL, else $XDG_RUNTIME_DIR/gpumem-spool, else
/tmp/gpumem-spool-<uid>: the same rule as the exporter's --spool default.
The rank comes from $RANK and the job from $GPUMEM_JOB or $SLURM_JOB_ID;
the namespace, pod and container from $GPUMEM_NAMESPACE, $GPUMEM_POD and
$GPUMEM_CONTAINER, else, inside a pod ($KUBERNETES_SERVICE_HOST set), from
$POD_NAMESPACE, $POD_NAME and $CONTAINER_NAME (set them in the pod spec
through the downward API), the pod from $HOSTNAME and the namespace from
the service account's mount.

`python3 gpumem_spool.py --once` writes one file for the current device
and prints its path, to check a setup.
"""

import atexit
import json
import os
import secrets
import stat
import sys
import tempfile
import threading
import time

DEFAULT_INTERVAL = 15.0
MAX_INTERVAL = 3600  # the longest the exporter believes (internal/exporter maxInterval)

# The largest free block comes from torch.cuda.memory_snapshot(), which
# builds every segment and block, and the whole allocation history when
# recording is on, as Python objects, holding the GIL: about 0.3 ms for a
# GPT-2 cache alone, but 110-580 ms with a 27,000-entry history (measured
# on CPU by rebuilding the recordings' objects). It is therefore taken at
# most this share of wall time, and reused in between.
LARGEST_FREE_BLOCK_SHARE = 0.002


def spool_dir():
    """The spool folder, by the exporter's rule."""
    if os.environ.get("GPUMEM_SPOOL"):
        return os.environ["GPUMEM_SPOOL"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "gpumem-spool")
    return os.path.join(tempfile.gettempdir(), "gpumem-spool-%d" % os.getuid())


def _prepare(directory, explicit):
    """Creates the folder for its owner only. A default folder in a shared
    place must be ours and closed to others, or another user could read or
    plant our files; a folder named explicitly is trusted."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if explicit:
        return
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise RuntimeError(
            "gpumem_spool: %s is not a folder of this user closed to others; "
            "set GPUMEM_SPOOL" % directory
        )


def _uuid(torch, device):
    """The GPU's UUID as NVML writes it ("GPU-..."), or "" if torch does not
    know it. The exporter uses it to find NVML's index of the device."""
    try:
        u = str(torch.cuda.get_device_properties(device).uuid)
    except Exception:  # older torch, or a device without one
        return ""
    if not u or u.startswith(("GPU-", "MIG-")):
        return u
    return "GPU-" + u


def _largest_free_block(torch, device):
    """The largest inactive block cached on the device, from the segments of
    a memory snapshot; None if the snapshot is not available."""
    try:
        segments = torch.cuda.memory_snapshot()
    except Exception:
        return None
    largest = 0
    for seg in segments:
        if seg.get("device", device) != device:
            continue
        for b in seg.get("blocks", ()):
            if b.get("state") == "inactive":
                largest = max(largest, int(b.get("size", 0)))
    return largest


def _pid_namespace():
    """The inode of our pid namespace: the exporter trusts our pid only when
    it looks into the same one (not from inside another container)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def kubernetes(env=None):
    """(namespace, pod, container) of the Kubernetes container this process
    runs in, from its environment; ("", "", "") outside Kubernetes."""
    env = os.environ if env is None else env

    def first(*names):
        return next((env[n] for n in names if env.get(n)), "")

    ns = first("GPUMEM_NAMESPACE")
    pod = first("GPUMEM_POD")
    container = first("GPUMEM_CONTAINER")
    if env.get("KUBERNETES_SERVICE_HOST"):  # the generic names mean this only in a pod
        ns = ns or first("POD_NAMESPACE")
        pod = pod or first("POD_NAME", "HOSTNAME")
        container = container or first("CONTAINER_NAME")
        if not ns:
            try:
                with open(_SA_NAMESPACE) as f:
                    ns = f.read(254).strip()
            except OSError:
                pass
    return ns[:253], pod[:253], container[:253]


def record(torch, device, rank=None, job="", interval=DEFAULT_INTERVAL, largest_free_block=True):
    """One spool record of the current statistics of `device`."""
    namespace, pod, container = kubernetes()
    rec = {
        "pid": os.getpid(),
        "namespace": namespace,
        "pod": pod,
        "container": container,
        "pidns": _pid_namespace(),
        "rank": rank,
        "device": device,
        "uuid": _uuid(torch, device),
        "job": job,
        "time": time.time(),
        "interval": interval,
        "memory_stats": {k: v for k, v in torch.cuda.memory_stats(device).items()
                         if isinstance(v, (int, float))},
    }
    if largest_free_block:
        lfb = _largest_free_block(torch, device)
        if lfb is not None:
            rec["largest_free_block"] = lfb
    return rec


def new_token():
    """The random part of a spool file's name, drawn once per process."""
    return secrets.token_hex(8)


def write(directory, rec, token):
    """Writes rec as directory/<pid>-<token>.json: to a temporary file of
    mode 0600 created exclusively first, then renamed over our own file,
    so a reader never sees half."""
    name = "%d-%s.json" % (rec["pid"], token)
    final = os.path.join(directory, name)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f)
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return final


class Publisher:
    """Writes the spool file every interval from a daemon thread until
    stop(), which also removes the file. start() makes one."""

    def __init__(self, directory, device, rank, job, interval, largest_free_block):
        import torch

        self.torch = torch
        self.directory = directory
        self.device = device
        self.rank = rank
        self.job = job
        self.interval = interval
        self.largest = largest_free_block
        self.path = None
        self.token = new_token()
        self._pid = os.getpid()
        self._largest = None  # the last largest free block measured
        self._largest_next = 0.0  # time.monotonic() when to measure again
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpumem-spool", daemon=True)

    def largest_free_block(self):
        """The largest free block, measured again only when its cost so
        far leaves it under LARGEST_FREE_BLOCK_SHARE of the time."""
        now = time.monotonic()
        if now >= self._largest_next:
            start = time.perf_counter()
            self._largest = _largest_free_block(self.torch, self.device)
            cost = time.perf_counter() - start
            self._largest_next = now + max(self.interval, cost / LARGEST_FREE_BLOCK_SHARE)
        return self._largest

    def write_once(self):
        rec = record(self.torch, self.device, self.rank, self.job, self.interval, False)
        if self.largest:
            lfb = self.largest_free_block()
            if lfb is not None:
                rec["largest_free_block"] = lfb
        if os.getpid() != self._pid:  # a forked child: a name of its own
            self._pid, self.token = os.getpid(), new_token()
        self.path = write(self.directory, rec, self.token)
        return self.path

    def _run(self):
        while not self._stop.is_set():
            try:
                self.write_once()
            except Exception as e:  # a full disk must not kill training
                print("gpumem_spool: %s" % e, file=sys.stderr)
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def start(interval=DEFAULT_INTERVAL, device=None, rank=None, job=None, directory=None,
          largest_free_block=True):
    """Starts publishing; returns the Publisher. `device` defaults to the
    current CUDA device at the time of the call, so call it after
    torch.cuda.set_device()."""
    p = publisher(interval, device, rank, job, directory, largest_free_block)
    p.write_once()  # at once, so the process shows up before its first interval
    p._thread.start()
    atexit.register(p.stop)
    return p


def publisher(interval=DEFAULT_INTERVAL, device=None, rank=None, job=None, directory=None,
              largest_free_block=True):
    """A Publisher with start()'s defaults, not yet started."""
    import torch

    if not 0 < float(interval) <= MAX_INTERVAL:
        raise ValueError("gpumem_spool: interval %r s: the exporter reads 0 < interval <= %d" % (interval, MAX_INTERVAL))
    explicit = directory is not None or bool(os.environ.get("GPUMEM_SPOOL"))
    directory = directory or spool_dir()
    _prepare(directory, explicit)
    if device is None:
        device = torch.cuda.current_device()
    if rank is None and os.environ.get("RANK", "").isdigit():
        rank = int(os.environ["RANK"])
    if job is None:
        job = os.environ.get("GPUMEM_JOB") or os.environ.get("SLURM_JOB_ID") or ""
    return Publisher(directory, device, rank, job, float(interval), largest_free_block)


if __name__ == "__main__":
    if sys.argv[1:] != ["--once"]:
        sys.exit("usage: python3 gpumem_spool.py --once")
    print(publisher().write_once())
