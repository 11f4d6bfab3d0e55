#!/usr/bin/env bash
# Measures the HTML explorer on a big snapshot in headless Chromium: the
# report's size, how long the page takes to open beside a blank page
# opened the same way in the same run, and the frame rate while panning
# and zooming the allocation bands, timed with requestAnimationFrame in the
# page. A benchmark: it reports; it fails only when the page reports an
# error or the report is over 40 MB. Not part of CI: a million-event
# snapshot takes a few minutes in all. What writing the report costs
# beside the plain replay (CPU, RSS, the page's size) is a row of
# scripts/bench.sh.
#
#   scripts/bench_html.sh SNAPSHOT [MAX_BANDS]
#
# SNAPSHOT is a PyTorch snapshot of about 1,000,000 events (e.g. from
# python3 scripts/gen_trace.py --events 1000000 OUT); MAX_BANDS is given to
# --html-max-bands; RUNS=N opens each page N times (5), and the medians are
# reported; BIN=FILE measures that gpumem instead of building one;
# HTML=FILE measures FILE, a report of SNAPSHOT written before
# (by another gpumem, say), instead of writing one. The times, all performance.now() in the page (ms since the
# navigation started):
#   drawn   the explorer's script has drawn the bands (from the preview
#           gpumem embeds) and the segment map: its first view
#   opened  the first animation frame after that, which shows them; a
#           blank page's first frame is its baseline
#   idle    a 0 ms timer set in that frame fires: the main thread is free
#   ready   every column decoded (in a worker) and the exact render drawn:
#           hover, pinning, scrubbing and the sites table live
#   longest the longest main-thread task between opened and ready
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/bench_html.sh SNAPSHOT [MAX_BANDS]" >&2; exit 2; }
snap=$(realpath "$1")
bands=${2:-0}
runs=${RUNS:-5}
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
[ -x /usr/bin/chromium ] || { echo "bench_html: needs /usr/bin/chromium (test/html_check.sh installs it)" >&2; exit 2; }

tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
if [ -n "${HTML:-}" ]; then
  cp "$HTML" "$tmp/report.html"
else
  bin=${BIN:-$tmp/gpumem}
  [ -n "${BIN:-}" ] || go build -o "$bin" ./cmd/gpumem
  start=$(date +%s.%N)
  "$bin" replay "$snap" --html "$tmp/report.html" --html-max-bands "$bands" >/dev/null 2>"$tmp/stderr"
  gen=$(echo "$(date +%s.%N) - $start" | bc)
fi
size=$(wc -c <"$tmp/report.html")

# The probe notes when the first frame after the explorer's script comes
# and when the main thread is next free, watches for long tasks, and once
# the explorer is ready times its renders and drives 50 frames of panning,
# 50 of zooming in and 50 of zooming out through the page's own view
# function, one step per animation frame; it logs all to the console.
cat >"$tmp/probe.html" <<'JS'
<script>
(function () {
  var ex = document.getElementById("explorer"), long = [], painted = 0, idle = 0;
  try {
    new PerformanceObserver(function (l) { l.getEntries().forEach(function (e) { long.push([e.startTime, e.duration]); }); }).observe({ type: "longtask", buffered: true });
  } catch (e) {}
  // the first frame once the explorer has drawn (a report without a first
  // view, from before it had one, draws when ready)
  (function first() {
    if (!ex.dataset.drawnAt && !ex.dataset.ready) { setTimeout(first, 5); return; }
    requestAnimationFrame(function () { painted = performance.now(); setTimeout(function () { idle = performance.now(); }, 0); });
  })();
  function when(f) { if (ex.dataset.ready || ex.dataset.error) f(); else setTimeout(function () { when(f); }, 20); }
  when(function () {
    if (ex.dataset.error) { console.log("BENCH error " + ex.dataset.error); return; }
    var seen = Math.round(performance.now()), X = window.gpumemExplorer, D = X.data(), worst = 0;
    long.forEach(function (t) { if (t[0] >= painted) worst = Math.max(worst, t[1]); });
    var t = performance.now(); X.render(); var full = performance.now() - t;
    t = performance.now(); X.view(D.ops * 0.4, D.ops * 0.41); X.render(); var zoomed = performance.now() - t;
    var cv = document.getElementById("bands"), r = cv.getBoundingClientRect();
    t = performance.now();
    cv.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: r.left + r.width / 2, clientY: r.bottom - 20 }));
    var hover = performance.now() - t;
    t = performance.now(); X.scrub(Math.floor(D.ops * 0.77)); var mapMs = performance.now() - t;
    X.view(0, D.ops);
    requestAnimationFrame(function () {
      var frames = [], last = performance.now(), i = 0, a = 0, b = D.ops;
      function step() {
        var now = performance.now();
        if (i > 0) frames.push(now - last);
        last = now;
        if (i < 50) { a += D.ops * 0.005; b += D.ops * 0.005; }
        else if (i < 100) { var c = (a + b) / 2, w = (b - a) * 0.96; a = c - w / 2; b = c + w / 2; }
        else { c = (a + b) / 2; w = (b - a) / 0.96; a = c - w / 2; b = c + w / 2; }
        X.view(a, b);
        if (++i <= 150) { requestAnimationFrame(step); return; }
        frames.sort(function (x, y) { return x - y; });
        var sum = frames.reduce(function (s, x) { return s + x; }, 0);
        var nav = performance.getEntriesByType("navigation")[0] || {};
        console.log("BENCH response " + Math.round(nav.responseEnd || 0) + " started " + ex.dataset.startedAt + " drawn " + (ex.dataset.drawnAt || ex.dataset.readyAt || seen) +
          " opened " + Math.round(painted) + " idle " + Math.round(idle) + " ready " + (ex.dataset.readyAt || seen) + " longest " + Math.round(worst) +
          " fps " + (1000 * frames.length / sum).toFixed(1) + " p95 " + frames[Math.floor(frames.length * 0.95)].toFixed(1) +
          " full-render " + Math.round(full) + " zoomed-render " + Math.round(zoomed) + " hover " + Math.round(hover) +
          " bands " + D.bands + " aggregated " + D.aggregated + " map " + Math.round(mapMs) + " worker [" + ex.dataset.timing + "]");
      }
      requestAnimationFrame(step);
    });
  });
})();
</script>
JS
cat >"$tmp/blank.html" <<'HTML'
<!DOCTYPE html><html><body><script>requestAnimationFrame(function () { console.log("BENCH opened " + Math.round(performance.now())); });</script></body></html>
HTML
awk -v f="$tmp/probe.html" '/<\/body>/{while((getline l<f)>0)print l}{print}' "$tmp/report.html" >"$tmp/probed.html"
# page FILE: open FILE in a fresh headless Chromium, print its BENCH line.
page() {
  rm -rf "$tmp/profile"
  /usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run \
    --enable-logging=stderr --v=0 --user-data-dir="$tmp/profile" --window-size=1400,1000 \
    "file://$1" >"$tmp/chromium.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    grep -aq 'BENCH ' "$tmp/chromium.log" && break
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=
  grep -ao 'BENCH [^"]*' "$tmp/chromium.log" | head -1
}
# get KEY LINE: the number after KEY in LINE
get() { echo "$2" | grep -o " $1 [0-9.]*" | head -1 | cut -d" " -f3; }
# median KEY FILE: the median of KEY over FILE's lines
median() { while read -r l; do get "$1" "$l"; done <"$2" | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
: >"$tmp/blank.txt"; : >"$tmp/report.txt"
for i in $(seq "$runs"); do
  b=$(page "$tmp/blank.html") r=$(page "$tmp/probed.html")
  [ -n "$r" ] && [ -n "$b" ] || { echo "bench_html: run $i: the page reported nothing"; tail -5 "$tmp/chromium.log"; exit 1; }
  case "$r" in "BENCH error"*) echo "bench_html: $r"; exit 1 ;; esac
  echo "$b" >>"$tmp/blank.txt"; echo "$r" >>"$tmp/report.txt"
  echo "run $i          blank opened $(get opened "$b") ms; report drawn $(get drawn "$r"), opened $(get opened "$r"), idle $(get idle "$r"), ready $(get ready "$r") ms; load $(cut -d' ' -f1 /proc/loadavg)"
done
line=$(tail -1 "$tmp/report.txt")
echo "snapshot        $snap"
if [ -n "${HTML:-}" ]; then echo "report          $size bytes ($HTML)"; else
  echo "report          $size bytes, written in ${gen%???????} s ($(grep -c . "$tmp/stderr") stderr lines)"; fi
echo "medians of $runs  blank page opened $(median opened "$tmp/blank.txt") ms; report: file read by $(median response "$tmp/report.txt"), script started $(median started "$tmp/report.txt"), drawn $(median drawn "$tmp/report.txt"), opened $(median opened "$tmp/report.txt"), main thread idle $(median idle "$tmp/report.txt"), ready $(median ready "$tmp/report.txt") ms; longest task after opening $(median longest "$tmp/report.txt") ms"
echo "worker (last)   $(echo "$line" | sed 's/.*worker \[//; s/\].*//')"
echo "pan and zoom    $(median fps "$tmp/report.txt") frames/s (median), 95th percentile frame $(get p95 "$line") ms (last run)"
echo "exact render    $(get full-render "$line") ms for the whole trace, $(get zoomed-render "$line") ms zoomed to 1%; hover $(get hover "$line") ms; scrubbing to 77% $(get map "$line") ms (last run)"
echo "bands           $(get bands "$line") drawn on their own, $(get aggregated "$line") aggregated"
open=$(median opened "$tmp/report.txt")
echo "targets         opens under 2000 ms: $( [ "$open" -lt 2000 ] && echo met || echo "missed ($open ms; blank page $(median opened "$tmp/blank.txt") ms)"); 30 frames/s: $( [ "$(echo "$(median fps "$tmp/report.txt") >= 30" | bc)" = 1 ] && echo met || echo missed)"
[ "$size" -le $((40 * 1000 * 1000)) ] || { echo "FAIL: report over 40 MB"; exit 1; }
