#!/usr/bin/env bash
# End-to-end test of `gpumem exporter` with a real Prometheus: six
# "training processes" run python/gpumem_spool.py against a stand-in torch
# whose memory_stats() are what real PyTorch runs reported (the fixtures'
# truths); the exporter serves their spool, Prometheus scrapes it every
# second, and the checks query Prometheus's HTTP API for the series and
# their values, the alert rules, and every query of the Grafana dashboard.
# A killed process and a stopped one must disappear within three intervals.
#
# Installs Debian's prometheus package when /usr/bin/prometheus is missing
# (needs root and the network); skips, saying so, when it cannot.
#
# The pid_NAME variables are set by writer() through printf -v.
# shellcheck disable=SC2154
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"

if [ ! -x /usr/bin/prometheus ]; then
  echo "== installing prometheus"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus prometheus-node-exporter >/dev/null; } 2>/dev/null ||
    [ ! -x /usr/bin/prometheus ]; then
    echo "SKIP: exporter end-to-end test: Debian's prometheus package is not installed and cannot be (needs root and apt)"
    exit 0
  fi
fi
for tool in python3 curl; do
  command -v "$tool" >/dev/null || { echo "SKIP: exporter end-to-end test: no $tool"; exit 0; }
done
# The interpreter itself: a version manager's shim can take seconds a call.
py=$(python3 -c 'import sys; print(sys.executable)')

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok:   $*"; }
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

echo "== building gpumem"
go build -o "$tmp/gpumem" ./cmd/gpumem
echo "   built in $SECONDS s"

# The stand-in torch: memory_stats() from $FAKE_TRUTH, and a snapshot
# whose largest free block is half of the free cached memory.
mkdir -p "$tmp/fake/torch"
cat >"$tmp/fake/torch/__init__.py" <<'EOF'
import json, os
_stats = json.load(open(os.environ["FAKE_TRUTH"]))["memory_stats"]
class _Props:
    uuid = "e2e00000-0000-0000-0000-00000000000" + os.environ["FAKE_DEVICE"]
class cuda:
    @staticmethod
    def current_device(): return int(os.environ["FAKE_DEVICE"])
    @staticmethod
    def get_device_properties(d): return _Props()
    @staticmethod
    def memory_stats(d=None): return _stats
    @staticmethod
    def memory_snapshot():
        free = _stats["reserved_bytes.all.current"] - _stats["active_bytes.all.current"]
        return [{"device": int(os.environ["FAKE_DEVICE"]), "blocks": [{"state": "inactive", "size": free // 2}]}]
EOF

spool=$tmp/spool textfile=$tmp/textfile
mkdir -p "$textfile"
interval=1
# writer NAME TRUTH DEVICE RANK JOB: one training process; its pid goes in pid_NAME.
writer() {
  FAKE_TRUTH=$2 FAKE_DEVICE=$3 RANK=$4 GPUMEM_JOB=$5 GPUMEM_SPOOL=$spool PYTHONPATH="$tmp/fake:python" \
    "$py" -c "import gpumem_spool, time; gpumem_spool.start(interval=$interval); time.sleep(600)" &
  pids+=("$!")
  printf -v "pid_$1" %s $!
}
echo "== six training processes writing the spool"
writer gpt2 testdata/pytorch/gpt2_varlen.truth.json 0 "" ""
writer rank0 testdata/exporter/ddp_gpt2.rank0.truth.json 1 0 ddp-7
writer rank1 testdata/exporter/ddp_gpt2.rank1.truth.json 2 1 ddp-7
writer oom testdata/exporter/oom_survive_resnet.truth.json 3 "" ""
writer killed testdata/pytorch/resnet50_fp32.truth.json 4 "" ""
writer stopped testdata/pytorch/seed_frag.truth.json 5 "" ""

port=$(free_port)
"$tmp/gpumem" exporter --listen "127.0.0.1:$port" --spool "$spool" --textfile "$textfile" --interval ${interval}s \
  2>"$tmp/exporter.log" &
pids+=("$!")

# node_exporter reading the exporter's textfile, where Debian has it.
nport=
if [ -x /usr/bin/prometheus-node-exporter ]; then
  nport=$(free_port)
  /usr/bin/prometheus-node-exporter --web.listen-address="127.0.0.1:$nport" --collector.disable-defaults \
    --collector.textfile --collector.textfile.directory="$textfile" >"$tmp/node.log" 2>&1 &
  pids+=("$!")
fi

pport=$(free_port)
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/deploy/prometheus/gpumem-alerts.yml
scrape_configs:
  - job_name: gpumem
    static_configs:
      - targets: ["127.0.0.1:$port"]
EOF
/usr/bin/prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$pport" >"$tmp/prometheus.log" 2>&1 &
pids+=("$!")
echo "== $(/usr/bin/prometheus --version 2>&1 | head -1), scraping the exporter every second"

api="http://127.0.0.1:$pport/api/v1"
# query PROMQL: the result vector as "labels value" lines, sorted.
query() {
  curl -sfG "$api/query" --data-urlencode "query=$1" | "$py" -c '
import json, sys
for r in json.load(sys.stdin)["data"]["result"]:
    m = r["metric"]
    print(",".join("%s=%s" % (k, m[k]) for k in sorted(m) if k not in ("__name__", "instance", "job")), r["value"][1])
' | sort
}
# wait_for SECONDS DESCRIPTION COMMAND...: polls until COMMAND succeeds.
wait_for() {
  local end=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then
      fail "timed out waiting for $what"
      return 1
    fi
    sleep 0.5
  done
}
has_series() { [ -n "$(query "$1")" ]; }

wait_for 30 "prometheus to scrape six processes" has_series 'gpumem_spool_processes == 6' || {
  cat "$tmp/exporter.log" "$tmp/prometheus.log" | tail -20
  exit 1
}
pass "prometheus sees six processes through the spool"

echo "== the figures PyTorch reported, through the exporter and Prometheus"
# The UUID of the stand-in torch's DEVICE: the writers' series differ by it
# (the pid is on gpumem_torch_process_info alone).
uuid() { echo "GPU-e2e00000-0000-0000-0000-00000000000$1"; }
check_proc() { # NAME TRUTH DEVICE
  local pid=${!1} bad
  bad=$("$py" - "$api" "$(uuid "$3")" "$2" <<'EOF'
import json, sys, urllib.parse, urllib.request
api, uuid, truth = sys.argv[1:]
stats = json.load(open(truth))["memory_stats"]
for metric, key in [("reserved_bytes", "reserved_bytes.all.current"), ("allocated_bytes", "allocated_bytes.all.current"),
                    ("active_bytes", "active_bytes.all.current"), ("inactive_split_peak_bytes", "inactive_split_bytes.all.peak"),
                    ("reserved_peak_bytes", "reserved_bytes.all.peak"), ("ooms_total", "num_ooms"),
                    ("alloc_retries_total", "num_alloc_retries"), ("device_allocs_total", "num_device_alloc")]:
    q = urllib.parse.urlencode({"query": 'gpumem_torch_%s{UUID="%s"}' % (metric, uuid)})
    res = json.load(urllib.request.urlopen(api + "/query?" + q))["data"]["result"]
    got = [float(r["value"][1]) for r in res]
    if got != [float(stats[key])]:
        print("gpumem_torch_%s = %s, PyTorch said %s" % (metric, got, stats[key]))
EOF
  )
  [ -z "$bad" ] && pass "$1 (pid $pid): reserved, allocated, active, inactive split, peaks, OOMs, retries, cudaMallocs as PyTorch reported" ||
    fail "$1: $bad"
}
check_proc pid_gpt2 testdata/pytorch/gpt2_varlen.truth.json 0
check_proc pid_rank0 testdata/exporter/ddp_gpt2.rank0.truth.json 1
check_proc pid_oom testdata/exporter/oom_survive_resnet.truth.json 3
[ "$(query "gpumem_torch_process_info{UUID=\"$(uuid 3)\"}" | sed 's/.*pid=\([0-9]*\).*/\1/')" = "$pid_oom" ] &&
  pass "gpumem_torch_process_info names the pid" || fail "process info: $(query gpumem_torch_process_info)"

got=$(query "gpumem_torch_reserved_bytes{hpc_job=\"ddp-7\"}" | cut -d' ' -f1 | sed 's/hostname=[^,]*,//')
want="UUID=GPU-e2e00000-0000-0000-0000-000000000001,gpu=1,hpc_job=ddp-7,rank=0
UUID=GPU-e2e00000-0000-0000-0000-000000000002,gpu=2,hpc_job=ddp-7,rank=1"
[ "$got" = "$(sort <<<"$want")" ] && pass "labels of the two DDP ranks: $(tr '\n' ' ' <<<"$got")" || fail "DDP labels:
$got
want
$want"
# 1 - 68157440/19304284160
frag=$(query "gpumem_torch_fragmentation_ratio{UUID=\"$(uuid 0)\"}" | awk '{print $NF}')
[ "$frag" = 0.996469310157523 ] && pass "gpt2_varlen fragmentation $frag = 1 - allocated/reserved" || fail "gpt2_varlen fragmentation '$frag'"
lfb=$(query "gpumem_torch_largest_free_block_ratio{UUID=\"$(uuid 0)\"}" | awk '{print $NF}')
[ "$lfb" = 0.5 ] && pass "largest free block ratio $lfb from the process's snapshot" || fail "largest free block ratio '$lfb'"

nvml=$(query gpumem_nvml_up | awk '{print $NF}')
fb=$(query gpumem_gpu_memory_used_bytes)
if [ "$nvml" = 0 ] && [ -z "$fb" ]; then
  pass "no GPU here: gpumem_nvml_up 0, no device series, allocator series served all the same"
elif [ "$nvml" = 1 ] && [ -n "$fb" ]; then
  pass "gpumem_nvml_up 1 and gpumem_gpu_memory_used_bytes for $(wc -l <<<"$fb") GPUs"
else
  fail "gpumem_nvml_up '$nvml' with gpumem_gpu_memory_used_bytes '$fb'"
fi
[ -z "$(query '{__name__=~"DCGM_.*"}')" ] && pass "no DCGM_FI_ series without --dcgm-compat (dcgm-exporter has them)" ||
  fail "DCGM series without --dcgm-compat"

echo "== a malformed file, a killed process and a stopped one"
echo '{"pid": 1, "memory_stats": ' >"$spool/4194000.json"
kill -KILL "$pid_killed"   # no chance to remove its file
wait "$pid_killed" 2>/dev/null || true
kill -STOP "$pid_stopped"  # alive, but writes no more
start=$SECONDS
gone() { ! has_series "gpumem_torch_process_info{pid=\"$1\"}"; }
wait_for 15 "the killed process to disappear" gone "$pid_killed" &&
  pass "killed process (pid $pid_killed) gone from Prometheus after $((SECONDS - start)) s"
wait_for 15 "the stopped process to disappear" gone "$pid_stopped" &&
  pass "stopped process (pid $pid_stopped) gone after $((SECONDS - start)) s (stale past 3 intervals of ${interval}s)"
! compgen -G "$spool/$pid_killed-*.json" >/dev/null && ! compgen -G "$spool/$pid_stopped-*.json" >/dev/null &&
  pass "their files removed from the spool" || fail "files left in the spool: $(ls "$spool")"
wait_for 10 "the removal counters" has_series 'gpumem_spool_removed_files_total{reason="exited"} == 1 and on() gpumem_spool_removed_files_total{reason="stale"} == 1'
wait_for 10 "the malformed file to be counted" has_series 'gpumem_spool_malformed_files_total == 1' &&
  pass "the malformed file counted once, the exporter still serving"
[ "$(query gpumem_spool_processes | awk '{print $NF}')" = 4 ] && pass "four processes left" || fail "processes: $(query gpumem_spool_processes)"
kill -CONT "$pid_stopped" 2>/dev/null || true

echo "== alert rules"
rules=$(curl -sf "$api/rules" | "$py" -c '
import json, sys
for g in json.load(sys.stdin)["data"]["groups"]:
    for r in g["rules"]:
        print(r["name"], r["health"], r.get("state", ""))')
[ "$(grep -c ' ok ' <<<"$rules")" = 6 ] && pass "6 alert rules loaded and healthy" || fail "rules: $rules"
wait_for 10 "GpumemOutOfMemory to fire" has_series "ALERTS{alertname=\"GpumemOutOfMemory\",alertstate=\"firing\",UUID=\"$(uuid 3)\"}" &&
  pass "GpumemOutOfMemory firing for the process that hit 26 OOMs, and for no other: $(query 'count(ALERTS{alertname="GpumemOutOfMemory"})' | awk '{print $NF}')"
[ "$(query 'count(ALERTS{alertname="GpumemOutOfMemory"})' | awk '{print $NF}')" = 1 ] || fail "GpumemOutOfMemory fires for more than one process"

echo "== every query of the Grafana dashboard"
"$py" - deploy/grafana/gpumem-dashboard.json "$nvml" >"$tmp/exprs" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["uid"] and d["title"] and d["schemaVersion"] >= 36, "dashboard header"
ids = [p["id"] for p in d["panels"]]
assert len(ids) == len(set(ids)), "panel ids repeat"
for p in d["panels"]:
    g = p["gridPos"]
    assert g["x"] + g["w"] <= 24 and g["h"] > 0, "panel %r outside the grid" % p["title"]
    for t in p.get("targets", []):
        expr = t["expr"].replace("$__rate_interval", "10s").replace("$hostname", ".*").replace("$gpu", ".*")
        device = "DCGM_" in expr or "gpumem_gpu_" in expr
        if device and sys.argv[2] != "1":
            continue  # no GPU on this machine
        if "gpumem_gpu_process" in expr:
            continue  # needs a process on the GPU
        print(p["title"] + "\t" + expr)
EOF
n=0
while IFS=$'\t' read -r title expr; do
  n=$((n + 1))
  has_series "$expr" || fail "dashboard panel '$title': no data for $expr"
done <"$tmp/exprs"
pass "$n dashboard queries return data"

echo "== the textfile for node_exporter"
prom=$textfile/gpumem.prom
if grep -q "^gpumem_torch_process_info{.*pid=\"$pid_gpt2\"" "$prom" && ! grep -q "pid=\"$pid_killed\"" "$prom"; then
  pass "gpumem.prom holds the live processes and not the killed one ($(grep -vc '^#' "$prom") series)"
else
  fail "gpumem.prom: $(head -c 300 "$prom")"
fi
if [ -n "$nport" ]; then
  curl -sf "http://127.0.0.1:$nport/metrics" >"$tmp/node.txt" || true
  if grep -q "^gpumem_torch_process_info{.*pid=\"$pid_gpt2\"" "$tmp/node.txt" && grep -qx 'node_textfile_scrape_error 0' "$tmp/node.txt"; then
    pass "node_exporter's textfile collector serves the file without error ($(/usr/bin/prometheus-node-exporter --version 2>&1 | head -1 | cut -d' ' -f1-3))"
  else
    fail "node_exporter: $(grep -E 'textfile|gpumem_torch_reserved' "$tmp/node.txt" | head -5) $(tail -3 "$tmp/node.log")"
  fi
else
  echo "skip: no prometheus-node-exporter, the textfile is not read through it"
fi
/usr/bin/promtool check metrics <"$prom" >"$tmp/lint" 2>&1 || true
if grep -v '^DCGM_FI' "$tmp/lint" | grep -q .; then fail "promtool check metrics: $(cat "$tmp/lint")"; else pass "promtool check metrics: no complaint about gpumem's own names"; fi

grep -q 'warning: spool: skipping .*4194000.json' "$tmp/exporter.log" && pass "the exporter warned about the malformed file" ||
  fail "no warning about the malformed file: $(cat "$tmp/exporter.log")"

echo "== alert rule unit tests"
(cd deploy/prometheus && /usr/bin/promtool test rules gpumem-alerts.test.yml >/dev/null) && pass "promtool test rules" || fail "promtool test rules"

if [ "$fails" -gt 0 ]; then
  echo "$fails checks failed"
  exit 1
fi
echo "all checks passed ($SECONDS s)"
