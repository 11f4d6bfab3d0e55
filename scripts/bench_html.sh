#!/usr/bin/env bash
# Measures the HTML explorer on a big snapshot in headless Chromium: the
# report's size, how long the page takes to open (its scripts run and the
# first frame drawn), and the frame rate while panning and zooming the
# allocation bands, timed with requestAnimationFrame in the page. Not part
# of CI: a million-event snapshot takes about a minute in all.
#
#   scripts/bench_html.sh SNAPSHOT [MAX_BANDS]
#
# SNAPSHOT is a PyTorch snapshot of about 1,000,000 events; MAX_BANDS is
# given to --html-max-bands. Fails when the report is over 40 MB, opens in
# 2 s or more, or pans and zooms under 30 frames a second.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/bench_html.sh SNAPSHOT [MAX_BANDS]" >&2; exit 2; }
snap=$(realpath "$1")
bands=${2:-0}
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
[ -x /usr/bin/chromium ] || { echo "bench_html: needs /usr/bin/chromium (scripts/html_check.sh installs it)" >&2; exit 2; }

tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/gpumem" ./cmd/gpumem
start=$(date +%s.%N)
"$tmp/gpumem" replay "$snap" --html "$tmp/report.html" --html-max-bands "$bands" >/dev/null 2>"$tmp/stderr"
gen=$(echo "$(date +%s.%N) - $start" | bc)
size=$(wc -c <"$tmp/report.html")

# The probe runs once the page's own scripts have: it notes the time, then
# drives 50 frames of panning, 50 of zooming in and 50 of zooming out
# through the page's own view function, one step per animation frame, and
# logs the frame times to the console.
cat >"$tmp/probe.html" <<'JS'
<script>
(function () {
  var ex = document.getElementById("explorer");
  function when(f) { if (ex.dataset.ready || ex.dataset.error) f(); else setTimeout(function () { when(f); }, 5); }
  when(function () {
  if (ex.dataset.error) { console.log("BENCH error " + ex.dataset.error); return; }
  var opened = performance.now(), X = window.gpumemExplorer, D = X.data();
  var t = performance.now(); X.render(); var full = performance.now() - t;
  t = performance.now(); X.view(D.ops * 0.4, D.ops * 0.41); X.render(); var zoomed = performance.now() - t;
  var cv = document.getElementById("bands"), r = cv.getBoundingClientRect();
  t = performance.now();
  cv.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: r.left + r.width / 2, clientY: r.bottom - 20 }));
  var hover = performance.now() - t;
  t = performance.now(); X.scrub(Math.floor(D.ops * 0.77)); var mapMs = performance.now() - t;
  X.view(0, D.ops);
  requestAnimationFrame(function (first) {
    var painted = performance.now(), frames = [], last = performance.now(), i = 0, a = 0, b = D.ops;
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
      console.log("BENCH timing [" + ex.dataset.timing + "] started " + ex.dataset.startedAt + " script " + document.getElementById("explorer").dataset.scriptMs + " response " + Math.round(nav.responseEnd || 0) + " opened " + Math.round(opened) + " painted " + Math.round(painted) + " decode " + document.getElementById("explorer").dataset.decodeMs +
        " fps " + (1000 * frames.length / sum).toFixed(1) + " p95 " + frames[Math.floor(frames.length * 0.95)].toFixed(1) +
        " full-render " + Math.round(full) + " zoomed-render " + Math.round(zoomed) + " hover " + Math.round(hover) + " bands " + D.bands + " aggregated " + D.aggregated +
        " map " + Math.round(mapMs));
    }
    requestAnimationFrame(step);
  });
  });
})();
</script>
JS
awk -v f="$tmp/probe.html" '/<\/body>/{while((getline l<f)>0)print l}{print}' "$tmp/report.html" >"$tmp/probed.html"
/usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run \
  --enable-logging=stderr --v=0 --user-data-dir="$tmp/profile" --window-size=1400,1000 \
  "file://$tmp/probed.html" >"$tmp/chromium.log" 2>&1 &
pid=$!
for _ in $(seq 240); do
  grep -aq 'BENCH ' "$tmp/chromium.log" && break
  sleep 0.5
done
line=$(grep -ao 'BENCH [^"]*' "$tmp/chromium.log" | head -1)
kill "$pid" 2>/dev/null || true
pid=
[ -n "$line" ] || { echo "bench_html: the page reported nothing"; tail -5 "$tmp/chromium.log"; exit 1; }
get() { echo "$line" | grep -o " $1 [0-9.]*" | head -1 | cut -d" " -f3; }
echo "snapshot        $snap"
echo "report          $size bytes, written in ${gen%???????} s ($(grep -c . "$tmp/stderr") stderr lines)"
echo "opened          $(get opened) ms (data inflated, decoded, bands drawn), first frame at $(get painted) ms; file read by $(get response) ms; the explorer's script starts at $(get started) ms and takes $(get script) ms, of which decoding $(get decode) ms"
echo "steps           $(echo "$line" | sed 's/.*timing \[//; s/\].*//')"
echo "pan and zoom    $(get fps) frames/s, 95th percentile frame $(get p95) ms"
echo "exact render    $(get full-render) ms for the whole trace, $(get zoomed-render) ms zoomed to 1%; hover $(get hover) ms; scrubbing to 77% $(get map) ms"
echo "bands           $(get bands) drawn on their own, $(get aggregated) aggregated"
fails=0
[ "$size" -le $((40 * 1000 * 1000)) ] || { echo "FAIL: report over 40 MB"; fails=1; }
[ "$(echo "$(get painted) < 2000" | bc)" = 1 ] || { echo "FAIL: opens in 2 s or more"; fails=1; }
[ "$(echo "$(get fps) >= 30" | bc)" = 1 ] || { echo "FAIL: under 30 frames/s"; fails=1; }
exit $fails
