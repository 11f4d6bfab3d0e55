# The ten lines of python/gpumem_spool.py that `gpumem exporter` needs, to
# paste into a training script after torch.cuda.set_device().
import json, os, secrets, tempfile, threading, time, torch
def _gpumem_spool(every=15.0, dev=torch.cuda.current_device(), pid=os.getpid()):
    d = os.environ.get("GPUMEM_SPOOL") or (os.environ.get("XDG_RUNTIME_DIR", "") + "/gpumem-spool" if os.environ.get("XDG_RUNTIME_DIR") else f"/tmp/gpumem-spool-{os.getuid()}")
    os.makedirs(d, 0o700, exist_ok=True); path = f"{d}/{pid}-{secrets.token_hex(8)}.json"
    while True:
        rec = {"pid": pid, "rank": int(os.environ.get("RANK", 0)), "device": dev, "time": time.time(), "interval": every,
               "pidns": os.stat("/proc/self/ns/pid").st_ino,
               "uuid": f"GPU-{torch.cuda.get_device_properties(dev).uuid}", "memory_stats": torch.cuda.memory_stats(dev)}
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".gpumem-", suffix=".tmp")  # exclusive, mode 0600
        with os.fdopen(fd, "w") as f: json.dump(rec, f)
        os.replace(tmp, path); time.sleep(every)
threading.Thread(target=_gpumem_spool, daemon=True).start()
