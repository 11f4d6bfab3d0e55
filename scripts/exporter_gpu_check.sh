#!/usr/bin/env bash
# Checks `gpumem exporter` on a real GPU: starts bin/gpumem exporter on a
# free port with a temporary spool, runs a small PyTorch training loop
# (about 600 MB at its largest) that publishes its allocator statistics
# with python/gpumem_spool.py, and at three pauses of the loop scrapes
# /metrics and prints, side by side:
#   - DCGM_FI_DEV_FB_USED / _RESERVED / _TOTAL against nvidia-smi's figures,
#     and the process's driver-attributed memory against nvidia-smi's;
#   - the gpumem_torch_* series of the process against the
#     torch.cuda.memory_stats() the script took at that pause.
# Then it checks that the process's series disappear once it exits, and
# kills everything it started. Builds nothing: run `go build -o bin/gpumem
# ./cmd/gpumem` first.
#
# Exit status: 0 when the allocator figures match exactly and the device
# figures agree within 1%, 1 otherwise, 2 when something it needs is missing.
#
# EXPORTER_CHECK_TRAINER=FILE runs FILE instead of the PyTorch loop (a
# stand-in that follows the same pause protocol, to test this script
# without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

gpumem=bin/gpumem
[ -x "$gpumem" ] || { echo "exporter_gpu_check: $gpumem not found; build it with: go build -o bin/gpumem ./cmd/gpumem" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "exporter_gpu_check: no nvidia-smi" >&2; exit 2; }
py=$(python3 -c 'import sys; print(sys.executable)')
if [ -z "${EXPORTER_CHECK_TRAINER:-}" ]; then
  "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null ||
    { echo "exporter_gpu_check: python3 has no torch with CUDA" >&2; exit 2; }
fi

tmp=$(mktemp -d)
spool=$tmp/spool ctl=$tmp/ctl
mkdir -p "$ctl"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$gpumem" exporter --listen "127.0.0.1:$port" --spool "$spool" --interval 1s --dcgm-compat 2>"$tmp/exporter.log" &
pids+=("$!")

# The training loop: three models of growing width, each trained for a few
# steps, then a pause with its memory_stats() written to ctl/phaseN.json
# until the checker writes ctl/phaseN.done.
cat >"$tmp/train.py" <<'EOF'
import json, os, sys, time
import torch
import torch.nn.functional as F
import gpumem_spool

ctl = sys.argv[1]
torch.cuda.set_device(0)
pub = gpumem_spool.start(interval=1)

def pause(n):
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    pub.write_once()  # the spool holds this state before the checker looks
    rec = {"pid": os.getpid(), "time": time.time(), "memory_stats": stats}
    with open(os.path.join(ctl, ".phase%d.json" % n), "w") as f:
        json.dump(rec, f)
    os.replace(os.path.join(ctl, ".phase%d.json" % n), os.path.join(ctl, "phase%d.json" % n))
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(ctl, "phase%d.done" % n)):
        if time.time() > deadline:
            sys.exit("train.py: the checker did not answer")
        time.sleep(0.05)

for n, (width, batch) in enumerate([(1024, 256), (2048, 512), (4096, 1024)]):
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(20):
        x = torch.randn(batch, width, device="cuda")
        y = torch.randint(0, 10, (batch,), device="cuda")
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    pause(n)
    del model, opt, x, y, loss
EOF
trainer=${EXPORTER_CHECK_TRAINER:-$tmp/train.py}
GPUMEM_SPOOL=$spool PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" "$py" "$trainer" "$ctl" &
trainer_pid=$!
pids+=("$trainer_pid")

"$py" - "http://127.0.0.1:$port/metrics" "$ctl" "$trainer_pid" <<'EOF'
import json, os, re, subprocess, sys, time, urllib.request

url, ctl, pid = sys.argv[1], sys.argv[2], sys.argv[3]
MIB = 1 << 20
SERIES = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')

def scrape():
    """/metrics as {(name, frozenset(labels)): value}."""
    out = {}
    for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
        m = SERIES.match(line)
        if m and not line.startswith("#"):
            out[(m[1], frozenset(LABEL.findall(m[2] or "")))] = float(m[3])
    return out

def find(metrics, name, **want):
    """The values of name whose labels include want."""
    return [v for (n, labels), v in metrics.items()
            if n == name and all((k, str(x)) in labels for k, x in want.items())]

def labels_of(metrics, name, **want):
    return [dict(labels) for (n, labels), _ in metrics.items()
            if n == name and all((k, str(x)) in labels for k, x in want.items())]

def find_own(metrics, name):
    """The values of the allocator series name of the trainer: those with
    the labels of its gpumem_torch_process_info, which alone has the pid."""
    info = labels_of(metrics, "gpumem_torch_process_info", pid=pid)
    if not info:
        return []
    want = {k: v for k, v in info[0].items() if k != "pid"}
    return [v for (n, labels), v in metrics.items() if n == name and dict(labels) == want]

def smi(query, kind="gpu"):
    cmd = ["nvidia-smi", "--query-%s=%s" % (kind, query), "--format=csv,noheader,nounits"]
    rows = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()
    return [[c.strip() for c in r.split(",")] for r in rows if r.strip()]

def wait_exporter():
    for _ in range(100):
        try:
            return scrape()
        except OSError:
            time.sleep(0.1)
    sys.exit("exporter_gpu_check: the exporter does not answer at " + url)

bad = []
rows = []  # (phase, what, exporter, direct)

def row(phase, what, exp, direct, exact, unit=""):
    if exp is None or direct is None:
        ok = False
    elif exact:
        ok = exp == direct
    else:
        ok = abs(exp - direct) <= 0.01 * max(abs(direct), 1)
    rows.append((phase, what, exp, direct, unit, ok))
    if not ok:
        bad.append("phase %s: %s: exporter %s, direct %s" % (phase, what, exp, direct))

m = wait_exporter()
print("exporter up: gpumem_nvml_up %s, %d GPUs" % (find(m, "gpumem_nvml_up"), len(find(m, "DCGM_FI_DEV_FB_TOTAL"))))
for n in range(3):
    path = os.path.join(ctl, "phase%d.json" % n)
    deadline = time.time() + 300
    while not os.path.exists(path):
        if time.time() > deadline:
            sys.exit("exporter_gpu_check: the training loop did not reach pause %d" % n)
        time.sleep(0.1)
    own = json.load(open(path))
    st = own["memory_stats"]
    # Scrape a few times, until the exporter has a record written in the pause.
    for attempt in range(40):
        m = scrape()
        upd = find_own(m, "gpumem_torch_last_update_timestamp_seconds")
        if upd and upd[0] >= own["time"] - 0.5 and attempt >= 2:
            break
        time.sleep(0.5)
    lab = (labels_of(m, "gpumem_torch_process_info", pid=pid) or [{}])[0]
    uuid, gpu = lab.get("UUID", ""), lab.get("gpu", "")
    try:
        gpus = {r[1]: r for r in smi("index,uuid,memory.used,memory.reserved,memory.total")}
    except subprocess.CalledProcessError:  # an nvidia-smi without memory.reserved
        gpus = {r[1]: r[:3] + ["n/a"] + r[3:] for r in smi("index,uuid,memory.used,memory.total")}
    g = gpus.get(uuid)
    if g is None:
        bad.append("phase %d: nvidia-smi does not list the process's GPU %r" % (n, uuid))
    else:
        for name, col in [("DCGM_FI_DEV_FB_USED", 2), ("DCGM_FI_DEV_FB_RESERVED", 3), ("DCGM_FI_DEV_FB_TOTAL", 4)]:
            v = find(m, name, UUID=uuid)
            direct = float(g[col]) if g[col].replace(".", "").isdigit() else None
            row(n, "%s gpu %s vs nvidia-smi" % (name, gpu), v[0] if v else None, direct, False, "MiB")
    apps = {r[0]: r for r in smi("pid,gpu_uuid,used_memory", "compute-apps")}
    v = find(m, "gpumem_gpu_process_memory_used_bytes", pid=pid)
    direct = float(apps[pid][2]) if pid in apps else None
    row(n, "process used (driver) vs nvidia-smi", v[0] / MIB if v else None, direct, False, "MiB")
    for metric, key in [("reserved_bytes", "reserved_bytes.all.current"), ("allocated_bytes", "allocated_bytes.all.current"),
                        ("active_bytes", "active_bytes.all.current"), ("inactive_split_bytes", "inactive_split_bytes.all.current"),
                        ("reserved_peak_bytes", "reserved_bytes.all.peak"), ("allocated_peak_bytes", "allocated_bytes.all.peak"),
                        ("device_allocs_total", "num_device_alloc"), ("alloc_retries_total", "num_alloc_retries"),
                        ("ooms_total", "num_ooms")]:
        v = find_own(m, "gpumem_torch_" + metric)
        row(n, "gpumem_torch_%s vs memory_stats" % metric, v[0] if v else None, float(st.get(key, 0)), True)
    r, a = st["reserved_bytes.all.current"], st["allocated_bytes.all.current"]
    v = find_own(m, "gpumem_torch_fragmentation_ratio")
    row(n, "gpumem_torch_fragmentation_ratio vs 1-alloc/res", v[0] if v else None, 1 - a / r if r else 0.0, True)
    open(os.path.join(ctl, "phase%d.done" % n), "w").close()

# The process exits; its file and series must go within three intervals.
t0 = time.time()
while time.time() - t0 < 10:
    m = scrape()
    if not find(m, "gpumem_torch_process_info", pid=pid):
        break
    time.sleep(0.5)
gone = not find(m, "gpumem_torch_process_info", pid=pid)
if not gone:
    bad.append("the series of pid %s are still there 10 s after the pause ended" % pid)

def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "MiB":
        return "%.1f MiB" % v
    if abs(v) >= MIB:
        return "%d (%.1f MiB)" % (v, v / MIB)
    return "%.6g" % v

w = max(len(r[1]) for r in rows)
print("\n%-5s  %-*s  %24s  %24s  %s" % ("pause", w, "figure", "exporter", "direct", ""))
for phase, what, exp, direct, unit, ok in rows:
    print("%-5s  %-*s  %24s  %24s  %s" % (phase, w, what, fmt(exp, unit), fmt(direct, unit), "ok" if ok else "DIFFERS"))
print("\nafter exit: series of pid %s %s (%.1f s)" % (pid, "gone" if gone else "STILL THERE", time.time() - t0))
if bad:
    print("\n%d differences:" % len(bad))
    for b in bad:
        print("  " + b)
    sys.exit(1)
print("all figures agree")
EOF
