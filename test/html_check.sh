#!/usr/bin/env bash
# Checks the HTML report in a real browser: writes the report of a shared
# fixture with `gpumem replay --html`, opens it in headless Chromium, reads
# the rendered DOM for the figures it must show, drives hover and zoom
# through the page's own script, opens a million-point report, and takes
# the README's screenshots. The explorer is checked on the
# trace with stacks: its first view (drawn from gpumem's preview before a
# worker has decoded the columns) is the exact render's image and map,
# hover shows a band's recorded frames, a click pins it,
# the scrubber's segment map equals `gpumem replay --stop-at N`, the sites
# table, the annotated spans and the axes, the OOM panel against the
# terminal's hints, and a two-device trace's switcher; on a million-event
# snapshot it measures, through scripts/bench_html.sh, the report's size,
# how long it takes to open beside a blank page, and the frame rate while
# panning (printed; only the page's errors and the 40 MB limit fail it).
# Then does the same for the
# reports of `run`, `sweep` and `fragcheck`: figures read from the rendered
# DOM and checked against the commands' table and JSON output, and bars'
# drawn geometry against their figures. Then `diff --html`: both runs'
# timelines drawn, the alignment note, the table as the terminal's, hover
# and zoom, no script errors. Timings are printed, never judged (a loaded
# machine is slower; scripts/bench_html.sh measures). It writes nothing in
# the repository: with SHOTS=DIR it leaves its screenshots in DIR (the
# report, diff, run, sweep and fragcheck pages; report.png and diff.png are
# the README's, copy them to docs/ to refresh it).
#
# Installs Debian's chromium when /usr/bin/chromium is missing (needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"

fixture=testdata/pytorch/gpt2_varlen.pickle
# the peak PyTorch itself reported for the fixture (19304284160)
peak_reserved=$(grep -o '"reserved_bytes.all.peak": *[0-9]*' "${fixture%.pickle}.truth.json" | grep -o '[0-9]*$')

if [ ! -x /usr/bin/chromium ] || ! command -v bc >/dev/null; then
  echo "== installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium bc >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok:   $*"; }

chrome() {
  /usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
    --user-data-dir="$(mktemp -d -p "$tmp")" "$@" 2>"$tmp/chromium.log"
}

# attr NAME FILE: the value of the first data-probe-NAME attribute.
attr() { grep -o "data-probe-$1=\"[^\"]*\"" "$2" | head -1 | sed 's/^[^"]*"//; s/"$//'; }

echo "== building gpumem and writing the report"
go build -o "$tmp/gpumem" ./cmd/gpumem
"$tmp/gpumem" replay "$fixture" --html "$tmp/report.html" >/dev/null 2>"$tmp/stderr"
grep -qx "gpumem: wrote $tmp/report.html" "$tmp/stderr" || fail "no 'wrote' line on stderr: $(cat "$tmp/stderr")"
"$tmp/gpumem" replay "$fixture" --html "$tmp/again.html" >/dev/null 2>&1
cmp -s "$tmp/report.html" "$tmp/again.html" && pass "same input, same bytes" || fail "two reports of one trace differ"
if grep -Eq '<(script|img|iframe)[^>]* src=|<link ' "$tmp/report.html"; then
  fail "the report loads something from outside itself"
else
  pass "self-contained ($(wc -c <"$tmp/report.html") bytes)"
fi

# The probe runs in the page after its own script: it reads figures from
# the rendered SVG, hovers and drags across the timeline with synthetic
# mouse events, and leaves what it saw in data-probe-* attributes.
cat >"$tmp/probe.html" <<'EOF'
<script>
(function () {
  var b = document.body;
  function put(k, v) { b.setAttribute("data-probe-" + k, String(v)); }
  try {
    var t = document.getElementById("timeline");
    put("peak", t.dataset.peakReserved);
    put("paths", t.querySelectorAll("path.line").length);
    var pathLen = 0;
    t.querySelectorAll("path.line").forEach(function (p) { pathLen = Math.max(pathLen, p.getTotalLength()); });
    put("path-length", Math.round(pathLen));
    // the peak's segment map: the explorer's, which opens there (drawn by
    // its script, before this one runs); the page shows no other
    var m = document.getElementById("segmap-live"), sum = 0, n = 0, big = null;
    if (document.getElementById("segmap-peak")) put("error", "a second map of the peak");
    (m.rects || []).forEach(function (q) {
      sum += q[3][1]; n++;
      if (q[2] <= 0) put("error", "a block has no width");
      if (q[3][2] < 2 && q[3][1] === +m.dataset.largestFree && !big) big = q;
    });
    put("rects", n);
    put("rects-declared", m.dataset.blocks);
    put("seg-bytes", sum === +m.dataset.reserved ? sum : "the blocks' " + sum + ", the map's " + m.dataset.reserved);
    put("largest", big ? "1/1" : "0/1");
    var ov = t.querySelector("rect.overlay"), r = ov.getBoundingClientRect();
    function at(f) { return { bubbles: true, clientX: r.left + f * r.width, clientY: r.top + r.height / 2 }; }
    ov.dispatchEvent(new MouseEvent("mousemove", at(0.5)));
    put("tip", document.getElementById("tip").textContent);
    put("cross", t.querySelector("line.cross").style.display === "none" ? "hidden" : "shown");
    ov.dispatchEvent(new MouseEvent("mousedown", at(0.25)));
    ov.dispatchEvent(new MouseEvent("mousemove", at(0.5)));
    ov.dispatchEvent(new MouseEvent("mouseup", at(0.5)));
    put("zoom", t.querySelector("svg.plot").getAttribute("viewBox"));
    put("zoom-frag", document.querySelector("#fragmentation svg.plot").getAttribute("viewBox"));
    put("xticks", t.querySelector("g.xticks").textContent);
    ov.dispatchEvent(new MouseEvent("dblclick", at(0.5)));
    put("reset", t.querySelector("svg.plot").getAttribute("viewBox"));
    var mr = m.getBoundingClientRect();
    m.dispatchEvent(new MouseEvent("mousemove", { bubbles: true,
      clientX: mr.left + (big[0] + big[2] / 2) * mr.width / m.width, clientY: mr.top + (big[1] + 9) * mr.height / m.height }));
    put("block-tip", document.getElementById("tip").textContent);
  } catch (e) { put("error", e); }
  put("ms", Math.round(performance.now()));
})();
</script>
EOF
# probe FILE OUT: FILE with the probe before </body>.
probe() { awk -v f="$tmp/probe.html" '/<\/body>/{while((getline l<f)>0)print l}{print}' "$1" >"$2"; }
probe "$tmp/report.html" "$tmp/probe-report.html"

echo "== opening it in $(/usr/bin/chromium --version 2>/dev/null)"
chrome --window-size=1400,1000 --dump-dom "file://$tmp/report.html" >"$tmp/dom.html"
chrome --window-size=1400,1000 --dump-dom "file://$tmp/probe-report.html" >"$tmp/probe-dom.html"
dom=$tmp/dom.html probe=$tmp/probe-dom.html

grep -q "id=\"timeline\"[^>]*data-peak-reserved=\"$peak_reserved\"" "$dom" &&
  pass "timeline carries peak reserved $peak_reserved" || fail "timeline lacks data-peak-reserved=$peak_reserved"
grep -q "data-key=\"peak-reserved\" data-value=\"$peak_reserved\"" "$dom" &&
  pass "summary shows peak reserved $peak_reserved" || fail "summary lacks peak reserved"
if grep -q '<canvas id="segmap-live"' "$dom" && ! grep -q 'id="segmap-peak"' "$dom"; then
  pass "the peak's segments shown once, in the explorer's map"
else
  fail "the peak's segment map missing or shown twice"
fi
[ -z "$(attr error "$probe")" ] || fail "probe error: $(attr error "$probe")"
[ "$(attr peak "$probe")" = "$peak_reserved" ] && pass "rendered timeline reads peak $peak_reserved" || fail "probe read peak $(attr peak "$probe")"
[ "$(attr paths "$probe")" = 3 ] && [ "$(attr path-length "$probe")" -gt 1000 ] &&
  pass "3 memory lines drawn (longest $(attr path-length "$probe") px)" || fail "memory lines: $(attr paths "$probe"), length $(attr path-length "$probe")"
[ "$(attr seg-bytes "$probe")" = "$peak_reserved" ] &&
  pass "blocks of the peak map add up to peak reserved ($(attr rects "$probe") blocks)" ||
  fail "blocks of the peak map add up to $(attr seg-bytes "$probe"), want $peak_reserved"
[ "$(attr rects "$probe")" = "$(attr rects-declared "$probe")" ] || fail "peak map: $(attr rects "$probe") rects drawn, $(attr rects-declared "$probe") declared"
[ "$(attr largest "$probe")" = "1/1" ] && pass "largest free block found in the peak map" || fail "largest free block: $(attr largest "$probe")"
case "$(attr tip "$probe")" in
  op*reserved*active*allocated*fragmentation*) pass "hover read-out: $(attr tip "$probe")" ;;
  *) fail "hover read-out: '$(attr tip "$probe")'" ;;
esac
[ "$(attr cross "$probe")" = shown ] || fail "hover shows no crosshair"
zoom=$(attr zoom "$probe") reset=$(attr reset "$probe")
if [ "$zoom" != "$reset" ] && [ "$zoom" = "$(attr zoom-frag "$probe")" ] && [ "${zoom%% *}" -gt 0 ]; then
  pass "drag zooms both charts to viewBox '$zoom', double-click resets to '$reset'"
else
  fail "zoom: '$zoom' (fragmentation '$(attr zoom-frag "$probe")'), reset '$reset'"
fi
case "$(attr block-tip "$probe")" in
  free*B\ at\ 0x*|inactive\ split*B\ at\ 0x*) pass "block hover: $(attr block-tip "$probe")" ;;
  *) fail "block hover: '$(attr block-tip "$probe")'" ;;
esac

echo "== an out-of-memory, and allocation sites"
"$tmp/gpumem" replay "$fixture" --device-memory 16GiB --html "$tmp/oom.html" >/dev/null 2>&1
chrome --window-size=1400,1000 --dump-dom "file://$tmp/oom.html" >"$tmp/oom-dom.html"
oom_op=$(grep -o 'id="timeline"[^>]*data-oom-op="[0-9]*"' "$tmp/oom-dom.html" | grep -o '[0-9]*"$' | tr -d '"')
if [ -n "$oom_op" ] && grep -q "class=\"mark oom\" data-op=\"$oom_op\"" "$tmp/oom-dom.html" &&
  grep -q '<section class="oom" id="oom" data-verdict="real shortage"' "$tmp/oom-dom.html" &&
  grep -q '<svg class="segmap" id="segmap-oom"' "$tmp/oom-dom.html"; then
  pass "16 GiB card: OOM marked at op $oom_op, verdict and segment map at the OOM shown"
else
  fail "16 GiB card: OOM mark, verdict or segment map missing"
fi
"$tmp/gpumem" replay "${fixture%.pickle}_stacks.pickle" --html "$tmp/sites.html" >/dev/null 2>&1
chrome --window-size=1400,1000 --dump-dom "file://$tmp/sites.html" >"$tmp/sites-dom.html"
sites=$(grep -c '<tr class="site"' "$tmp/sites-dom.html" || true)
[ "$sites" -gt 0 ] && pass "trace with stacks: $sites allocation sites at the peak" || fail "trace with stacks: no allocation sites"

echo "== a million-point timeline"
HTMLREPORT_LARGE="$tmp/large.html" go test -count=1 -run '^TestLargeTimeline$' ./internal/htmlreport/ >/dev/null
probe "$tmp/large.html" "$tmp/large-probe.html"
chrome --window-size=1400,1000 --dump-dom "file://$tmp/large-probe.html" >"$tmp/large-dom.html"
ms=$(attr ms "$tmp/large-dom.html")
# how long it took is printed, not judged: a loaded machine is slower, and
# timing targets belong to scripts/bench_html.sh
[ -n "$ms" ] && pass "opened and scripted ($ms ms here, $(wc -c <"$tmp/large.html") bytes)" ||
  fail "million-point report: the page's script did not run"

shots=${SHOTS:-$tmp}
mkdir -p "$shots"

echo "== run --html: a workload with phases"
"$tmp/gpumem" run transformer --html "$tmp/run.html" >/dev/null 2>"$tmp/stderr"
grep -qx "gpumem: wrote $tmp/run.html" "$tmp/stderr" || fail "run: no 'wrote' line: $(cat "$tmp/stderr")"
run_peak=$("$tmp/gpumem" run transformer -o json | grep -o '"reserved_bytes.all.peak": *[0-9]*' | grep -o '[0-9]*$')
probe "$tmp/run.html" "$tmp/probe-run.html"
chrome --window-size=1400,1000 --dump-dom "file://$tmp/probe-run.html" >"$tmp/run-dom.html"
rd=$tmp/run-dom.html
phases=$(grep -o 'id="timeline"[^>]*data-phases="[0-9]*"' "$rd" | grep -o '[0-9]*"$' | tr -d '"')
[ -z "$(attr error "$rd")" ] || fail "run probe error: $(attr error "$rd")"
[ "$(attr peak "$rd")" = "$run_peak" ] && pass "run report: timeline reads peak $run_peak, as run -o json" ||
  fail "run report: peak $(attr peak "$rd"), run -o json says $run_peak"
[ -n "$phases" ] && [ "$phases" -gt 3 ] && [ "$(grep -o 'class="mark phase"' "$rd" | wc -l)" = "$phases" ] &&
  pass "run report: $phases phase starts marked on the timeline" || fail "run report: phases '$phases'"
case "$(attr tip "$rd")" in
  op*step*reserved*) pass "run hover names the phase: $(attr tip "$rd")" ;;
  *) fail "run hover: '$(attr tip "$rd")'" ;;
esac
chrome --window-size=1300,1000 --screenshot="$shots/run.png" "file://$tmp/run.html" >/dev/null

# The sweep and fragcheck reports run no script of their own. Their
# probes read the rendered page and call put(key, value).
# page_probe JS OUT: the probe script JS, wrapped for injection.
page_probe() {
  {
    echo '<script>(function () { var b = document.body;'
    echo 'function put(k, v) { b.setAttribute("data-probe-" + k, String(v)); }'
    echo 'function box(e) { return e.getBoundingClientRect(); }'
    echo 'function go() { try {'
    cat "$1"
    echo '} catch (e) { put("error", e); } }'
    # the explorer decodes its data in a worker: wait until it is ready
    echo 'var ex = document.getElementById("explorer");'
    echo '(function when() { if (!ex || ex.dataset.ready || ex.dataset.error) go(); else setTimeout(when, 10); })(); })();</script>'
  } >"$2"
}
# inject FILE PROBE OUT: FILE with PROBE before </body>.
inject() { awk -v f="$2" '/<\/body>/{while((getline l<f)>0)print l}{print}' "$1" >"$3"; }

echo "== the explorer (gpt2_varlen_stacks)"
# The explorer decodes its columns in a Web Worker, which runs in real time
# while the page's virtual time runs ahead: a budget of virtual time large
# enough for a loaded machine (once the page is idle it passes at once).
budget=600000
# Right after the explorer's script, before the worker has started: what
# the first view shows (the bands from gpumem's preview, the segment map
# where the scrubber starts), for the probe to compare once ready.
cat >"$tmp/explorer-early.html" <<'EOF'
<script>
(function () {
  var ex = document.getElementById("explorer"), m = document.getElementById("segmap-live"), cv = document.getElementById("bands");
  var px = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data, n = 0;
  for (var i = 3; i < px.length; i += 4) if (px[i]) n++;
  window.probeEarly = { ready: ex.dataset.ready || "no", drawn: ex.dataset.drawnAt, op: m.dataset.op, digest: m.dataset.digest, painted: n,
    scrub: document.getElementById("scrub").disabled ? "disabled" : "enabled" };
})();
</script>
EOF
stacks=${fixture%.pickle}_stacks.pickle
# the ops at which the scrubber's map is compared with replay --stop-at
stops="1 2999 3042 9000 17923"
cat >"$tmp/explorer-probe.js" <<'JS'
put("ready", document.getElementById("explorer").dataset.ready);
var E = window.probeEarly, X = window.gpumemExplorer, D = X.data(), cv = document.getElementById("bands");
put("early", [E.ready, E.scrub, E.painted > 0, E.drawn > 0, E.op].join(" "));
// the preview is the image the exact render draws at the preview's width
cv.style.width = D.previewW + "px"; cv.style.width = 2 * D.previewW - cv.clientWidth + "px";
window.dispatchEvent(new Event("resize"));
var cx = cv.getContext("2d"), differ = 0;
X.preview(); var pa = cx.getImageData(0, 0, cv.width, cv.height).data;
X.render(); var pb = cx.getImageData(0, 0, cv.width, cv.height).data;
for (var i = 0; i < pa.length; i++) if (pa[i] !== pb[i]) differ++;
put("preview", cv.width + " " + differ);
cv.style.width = ""; window.dispatchEvent(new Event("resize"));
var r = box(cv);
put("ops", D.ops);
// hover up the column of the peak until a band of the top site at the
// peak (the static table below, from the Go side) is under the pointer
var want = document.querySelector("#sites tr.site").dataset.frames, x = r.left + (D.peak + 0.5) / D.ops * r.width, hit = null;
for (var y = r.bottom - 1; y > r.top && !hit; y -= 2) {
  cv.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: x, clientY: y }));
  var pre = document.querySelector("#tip pre.frames");
  if (pre && pre.textContent === want) hit = y;
}
put("hover-frames", hit ? "match" : "none");
put("hover-tip", document.getElementById("tip").textContent.split("allocated at")[0]);
if (hit) {
  var band = cv.dataset.hover;
  cv.dispatchEvent(new MouseEvent("mousedown", { bubbles: true, clientX: x, clientY: hit }));
  window.dispatchEvent(new MouseEvent("mouseup", { bubbles: true, clientX: x, clientY: hit }));
  var p = document.getElementById("pinned");
  put("pin", p.dataset.band === band && p.textContent.indexOf("pinned") === 0 ? "pinned " + band : "not pinned: " + p.dataset.band + " vs " + band);
  put("pin-scrub", document.getElementById("scrub").value);
}
// the scrubber's map at each op of STOPS, and where it started
var range = document.getElementById("scrub"), m = document.getElementById("segmap-live");
range.value = E.op; range.dispatchEvent(new Event("input"));
put("first-map", m.dataset.op === E.op && m.dataset.digest === E.digest ? "same" : "differs: " + m.dataset.digest.slice(0, 80) + " vs " + E.digest.slice(0, 80));
STOPS.split(" ").forEach(function (k) {
  range.value = k; range.dispatchEvent(new Event("input"));
  var d = m.dataset;
  put("map-" + k, [d.op, d.segments, d.reserved, d.allocated, d.active, d.split, d.splitBytes, d.largestFree].join(" "));
});
put("sites-rows", document.querySelectorAll("#xsites tr.xsite").length);
var row = document.querySelector("#xsites tr.xsite");
row.click();
put("site-sel", document.querySelectorAll("#xsites tr.xsite.sel").length);
document.getElementById("depth").value = "1"; document.getElementById("depth").dispatchEvent(new Event("change"));
put("sites-depth1", document.getElementById("xsites").dataset.sites);
put("spans", document.getElementById("spans").dataset.spans);
var mode = document.getElementById("xmode");
mode.value = "steps"; mode.dispatchEvent(new Event("change"));
put("step-ticks", document.getElementById("axis").dataset.ticks);
mode.value = "time"; mode.dispatchEvent(new Event("change"));
put("time-ticks", document.getElementById("axis").dataset.ticks);
JS
sed -i "s/STOPS/\"$stops\"/" "$tmp/explorer-probe.js"
"$tmp/gpumem" replay "$stacks" --html "$tmp/explorer.html" >/dev/null 2>&1
page_probe "$tmp/explorer-probe.js" "$tmp/explorer-probe.html"
inject "$tmp/explorer.html" "$tmp/explorer-early.html" "$tmp/explorer-early.page.html"
inject "$tmp/explorer-early.page.html" "$tmp/explorer-probe.html" "$tmp/explorer-probed.html"
chrome --window-size=1400,1000 --virtual-time-budget=$budget --dump-dom "file://$tmp/explorer-probed.html" | tr '\n' ' ' >"$tmp/explorer-dom.html"
xd=$tmp/explorer-dom.html
[ -z "$(attr error "$xd")" ] || fail "explorer probe error: $(attr error "$xd")"
grep -q 'id="explorer"[^>]*data-error' "$xd" && fail "explorer: $(grep -o 'data-error="[^"]*"' "$xd")"
[ "$(attr ready "$xd")" = true ] && pass "explorer ready, $(attr ops "$xd") operations" || fail "explorer not ready"
early=$(attr early "$xd")
case "$early" in
  "no disabled true true "[0-9]*) pass "first view before the worker's columns: bands drawn from the preview, segment map at op ${early##* }, scrubber waiting" ;;
  *) fail "first view: '$early' (ready, scrubber, bands drawn, drawn-at, map op)" ;;
esac
[ "$(attr preview "$xd")" = "$(grep -o '"previewW":[0-9]*' "$tmp/explorer.html" | head -1 | cut -d: -f2) 0" ] &&
  pass "the preview is the exact render's image at its width ($(attr preview "$xd" | cut -d' ' -f1) px, 0 pixels differ)" ||
  fail "preview against the exact render: '$(attr preview "$xd")' (width, pixels differing)"
[ "$(attr first-map "$xd")" = same ] && pass "the first segment map (from gpumem) is the scrubber's at op ${early##* }" || fail "first segment map $(attr first-map "$xd")"
[ "$(attr hover-frames "$xd")" = match ] &&
  pass "hovering a band of the top site shows its recorded frames: $(attr hover-tip "$xd")" ||
  fail "no band at the peak showed the top site's frames (tip '$(attr hover-tip "$xd")')"
case "$(attr pin "$xd")" in
  pinned*) pass "click pins band $(attr pin "$xd" | cut -d' ' -f2) and moves the scrubber to op $(attr pin-scrub "$xd")" ;;
  *) fail "click: $(attr pin "$xd")" ;;
esac
for k in $stops; do
  json=$("$tmp/gpumem" replay "$stacks" --stop-at "$k" -o json)
  stat() { echo "$json" | grep -o "\"$1\": *[0-9]*" | head -1 | grep -o '[0-9]*$'; }
  want="$k $(stat segment.all.current) $(stat reserved_bytes.all.current) $(stat allocated_bytes.all.current) $(stat active_bytes.all.current) $(stat inactive_split.all.current) $(stat inactive_split_bytes.all.current) $(stat largest_free)"
  [ "$(attr "map-$k" "$xd")" = "$want" ] &&
    pass "scrubber at op $k: segments, reserved, allocated, active, inactive split, largest hole as replay --stop-at $k ($want)" ||
    fail "scrubber at op $k: page '$(attr "map-$k" "$xd")', replay --stop-at '$want'"
done
[ "$(attr sites-rows "$xd")" -gt 5 ] && [ "$(attr site-sel "$xd")" = 1 ] && [ "$(attr sites-depth1 "$xd")" -gt 0 ] &&
  pass "sites table: $(attr sites-rows "$xd") rows, a click selects one, depth 1 groups into $(attr sites-depth1 "$xd") sites" ||
  fail "sites table: rows $(attr sites-rows "$xd"), selected $(attr site-sel "$xd"), depth 1 $(attr sites-depth1 "$xd")"
starts=$(python3 -c "import pickle,sys; a=pickle.load(open(sys.argv[1],'rb')).get('external_annotations',[]); print(sum(1 for x in a if x.get('stage')=='START' and x.get('device',0)==0))" "$stacks")
[ "$(attr spans "$xd")" = "$starts" ] && [ "$(attr step-ticks "$xd")" -gt 0 ] && [ "$(attr time-ticks "$xd")" -gt 0 ] &&
  pass "annotations: $starts record_function spans drawn; steps axis $(attr step-ticks "$xd") ticks, time axis $(attr time-ticks "$xd")" ||
  fail "annotations: $(attr spans "$xd") spans drawn, the trace has $starts; ticks $(attr step-ticks "$xd")/$(attr time-ticks "$xd")"

echo "== the explorer at an out-of-memory, and two devices"
cat >"$tmp/oomx-probe.js" <<'JS'
var m = document.getElementById("segmap-live"), range = document.getElementById("scrub");
put("oom-op", range.value + " " + window.gpumemExplorer.data().oom);
window.gpumemExplorer.scrub(+range.value); // the page draws the map a frame after opening
put("oom-legend", document.getElementById("segmap-legend").textContent);
put("hints", document.querySelector("#oom .hints").textContent);
put("comment", (document.querySelector("#oom .comment") || { textContent: "" }).textContent);
JS
page_probe "$tmp/oomx-probe.js" "$tmp/oomx-probe.html"
inject "$tmp/oom.html" "$tmp/oomx-probe.html" "$tmp/oomx-probed.html"
chrome --window-size=1400,1000 --virtual-time-budget=$budget --dump-dom "file://$tmp/oomx-probed.html" | tr '\n' ' ' >"$tmp/oomx-dom.html"
od=$tmp/oomx-dom.html
# the terminal's hints, one a line (it wraps them: continuation lines are indented, unbulleted)
term=$("$tmp/gpumem" replay "$fixture" --device-memory 16GiB 2>/dev/null | sed -n '/^Hints:/,/^$/p' | tail -n +2 |
  awk '/^ *- /{if (h != "") print h; sub(/^ *- /, ""); h = $0; next} NF{sub(/^ */, ""); h = h " " $0} END{if (h != "") print h}')
oo=$(attr oom-op "$od")
[ "${oo% *}" = $(( ${oo#* } + 1 )) ] && case "$(attr oom-legend "$od")" in *"request that failed"*) true ;; *) false ;; esac &&
  pass "the explorer opens at the OOM ($oo) with the failing request marked" || fail "explorer at the OOM: '$oo', legend '$(attr oom-legend "$od")'"
hints_ok=true
while IFS= read -r h; do
  [ -z "$h" ] && continue
  case "$(attr hints "$od")" in *"$h"*) ;; *) hints_ok=false; echo "  missing hint: $h" ;; esac
done <<<"$term"
$hints_ok && [ -n "$term" ] && pass "OOM panel shows the terminal's hints" || fail "OOM panel hints '$(attr hints "$od")', terminal '$term'"
case "$(attr comment "$od")" in *expandable_segments*) pass "real shortage: PyTorch's expandable_segments advice commented" ;; *) fail "no comment on PyTorch's advice" ;; esac

"$tmp/gpumem" convert "$fixture" - >"$tmp/two.trace"
{ echo "device 1"; "$tmp/gpumem" convert testdata/pytorch/multistream.pickle - | grep -vE '^(#|segment |block |setting |device )'; } >>"$tmp/two.trace"
"$tmp/gpumem" replay "$tmp/two.trace" --html "$tmp/two.html" >/dev/null 2>&1
dev1=$("$tmp/gpumem" replay "$tmp/two.trace" --device 1 -o json | grep -o '"reserved_bytes.all.peak": *[0-9]*' | grep -o '[0-9]*$')
cat >"$tmp/two-probe.js" <<'JS'
var sel = document.getElementById("device"), m = document.getElementById("segmap-live"), range = document.getElementById("scrub");
put("options", sel.options.length + " " + (sel.parentNode.style.display !== "none"));
put("dev0", document.getElementById("explorer").dataset.device + " " + window.gpumemExplorer.data().ops);
sel.value = "1"; sel.dispatchEvent(new Event("change"));
document.querySelector('#explorer [data-scrub-to="peak"]').click();
put("dev1", document.getElementById("explorer").dataset.device + " " + window.gpumemExplorer.data().ops + " " + m.dataset.reserved);
JS
page_probe "$tmp/two-probe.js" "$tmp/two-probe.html"
inject "$tmp/two.html" "$tmp/two-probe.html" "$tmp/two-probed.html"
chrome --window-size=1400,1000 --virtual-time-budget=$budget --dump-dom "file://$tmp/two-probed.html" | tr '\n' ' ' >"$tmp/two-dom.html"
td=$tmp/two-dom.html
[ -z "$(attr error "$td")" ] || fail "two-device probe error: $(attr error "$td")"
d1=$(attr dev1 "$td")
[ "$(attr options "$td")" = "2 true" ] && [ "${d1%% *}" = 1 ] && [ "${d1##* }" = "$dev1" ] &&
  pass "two devices: the switcher shows device 1 ($d1: its segment map at its peak reserves replay --device 1's peak)" ||
  fail "device switch: options '$(attr options "$td")', device 0 '$(attr dev0 "$td")', device 1 '$d1' (replay --device 1 peaks at $dev1)"

echo "== sweep --html"
cards=16GiB,24GiB
"$tmp/gpumem" sweep "$fixture" --device-memory $cards --html "$tmp/sweep.html" >"$tmp/sweep.txt" 2>"$tmp/stderr"
grep -q "gpumem: wrote $tmp/sweep.html" "$tmp/stderr" || fail "sweep: no 'wrote' line: $(cat "$tmp/stderr")"
"$tmp/gpumem" sweep "$fixture" --device-memory $cards --html "$tmp/sweep2.html" >/dev/null 2>&1
cmp -s "$tmp/sweep.html" "$tmp/sweep2.html" && pass "sweep: same input, same bytes" || fail "two sweep reports of one trace differ"
if grep -Eq '<(script|img|iframe)[^>]* src=|<link |https?://[a-z]' "$tmp/sweep.html"; then
  fail "the sweep report refers to something outside itself"
else
  pass "sweep report self-contained ($(wc -c <"$tmp/sweep.html") bytes)"
fi
settings=$(grep -o '[0-9]* settings' "$tmp/sweep.txt" | grep -o '[0-9]*')
table_ooms=$(grep -o 'OOM at op' "$tmp/sweep.txt" | wc -l)
recommended=$(grep -o 'recommendation: PYTORCH_CUDA_ALLOC_CONF=[^:]*:[^:]*' "$tmp/sweep.txt" | sed 's/^recommendation: PYTORCH_CUDA_ALLOC_CONF=//')
cat >"$tmp/sweep-probe.js" <<'JS'
var svg = document.getElementById("sweep"), bars = svg.querySelectorAll("rect.bar");
put("bars", bars.length);
var sorted = true, seenOOM = false, last = -1;
bars.forEach(function (r) {
  var p = +r.dataset.peakReserved;
  if (r.dataset.oom === "true") seenOOM = true;
  else if (seenOOM || p < last) sorted = false;
  else last = p;
});
put("sorted", sorted);
var d = svg.querySelector('rect.bar[data-label="defaults"]');
put("defaults", d.dataset.peakReserved);
// drawn to scale: the defaults bar's right end against the lower bound line
var bound = svg.querySelector("g.vl.bound"), line = bound.querySelector("path.vline");
var x0 = box(d).left, lx = box(line).left + box(line).width / 2;
var want = +d.dataset.peakReserved / +bound.dataset.lowerBound, got = (box(d).right - x0) / (lx - x0);
put("scale", Math.abs(got / want - 1) < 0.01 ? "ok" : got.toFixed(4) + " vs " + want.toFixed(4));
put("bound", bound.dataset.lowerBound);
put("line-spans", box(line).top <= box(bars[0]).top && box(line).bottom >= box(bars[bars.length - 1]).bottom);
var rec = svg.querySelector('rect.bar[data-recommended="true"]');
put("recommended", rec ? rec.dataset.label : "");
put("rec-colour", rec ? getComputedStyle(rec).fill : "");
put("marks", svg.querySelectorAll("[data-fits]").length);
put("oom-marks", svg.querySelectorAll('[data-fits="false"]').length);
put("card-heads", Array.prototype.map.call(svg.querySelectorAll("text.cardhead"), function (t) { return t.textContent; }).join(","));
put("title", d.parentNode.querySelector("title").textContent.split("\n")[1]);
put("rec-text", document.querySelector("p.rec").textContent);
JS
page_probe "$tmp/sweep-probe.js" "$tmp/sweep-probe.html"
inject "$tmp/sweep.html" "$tmp/sweep-probe.html" "$tmp/sweep-probed.html"
chrome --window-size=1400,1000 --dump-dom "file://$tmp/sweep-probed.html" >"$tmp/sweep-dom.html"
sd=$tmp/sweep-dom.html
[ -z "$(attr error "$sd")" ] || fail "sweep probe error: $(attr error "$sd")"
[ -n "$settings" ] && [ "$(attr bars "$sd")" = "$settings" ] && pass "sweep: $settings bars, one per setting of the table" ||
  fail "sweep: $(attr bars "$sd") bars, the table has '$settings' settings"
[ "$(attr sorted "$sd")" = true ] && pass "sweep: bars sorted as the table (least reserved first, OOM last)" || fail "sweep: bars out of order"
[ "$(attr defaults "$sd")" = "$peak_reserved" ] && pass "sweep: the defaults bar carries data-peak-reserved $peak_reserved (PyTorch's own peak)" ||
  fail "sweep: defaults bar $(attr defaults "$sd"), want $peak_reserved"
[ "$(attr scale "$sd")" = ok ] && pass "sweep: defaults bar drawn to scale against the lower bound line ($(attr bound "$sd"))" ||
  fail "sweep: defaults bar / lower bound drawn $(attr scale "$sd")"
[ "$(attr line-spans "$sd")" = true ] || fail "sweep: the lower bound line does not cross every bar"
[ -n "$recommended" ] && [ "$(attr recommended "$sd")" = "$recommended" ] && [ "$(attr rec-colour "$sd")" = "rgb(42, 157, 79)" ] &&
  pass "sweep: the recommended bar '$recommended' marked and drawn green" ||
  fail "sweep: recommended '$(attr recommended "$sd")' ($(attr rec-colour "$sd")), the table says '$recommended'"
[ "$(attr marks "$sd")" = $((settings * 2)) ] && [ "$(attr oom-marks "$sd")" = "$table_ooms" ] &&
  pass "sweep: $(attr marks "$sd") card marks ($(attr card-heads "$sd")), $table_ooms of them OOM as in the table" ||
  fail "sweep: $(attr marks "$sd") card marks, $(attr oom-marks "$sd") OOM; the table has $table_ooms OOM"
case "$(attr title "$sd")" in
  "peak reserved 17.98 GiB"*) pass "sweep: defaults bar hover: $(attr title "$sd")" ;;
  *) fail "sweep: defaults bar hover '$(attr title "$sd")'" ;;
esac
[ -n "$(attr rec-text "$sd")" ] && grep -qxF "$(attr rec-text "$sd")" "$tmp/sweep.txt" &&
  pass "sweep: the recommendation is the table's last line" || fail "sweep: recommendation '$(attr rec-text "$sd")'"
chrome --window-size=1300,1100 --screenshot="$shots/sweep.png" "file://$tmp/sweep.html" >/dev/null

echo "== fragcheck --html"
code=0
"$tmp/gpumem" fragcheck "$fixture" testdata/pytorch/seed_frag.pickle --workload free-but-fails \
  --html "$tmp/frag.html" >"$tmp/frag.txt" 2>"$tmp/stderr" || code=$?
[ "$code" = 1 ] && pass "fragcheck exits 1 (over budget) with --html" || fail "fragcheck exit $code"
grep -q "gpumem: wrote $tmp/frag.html" "$tmp/stderr" || fail "fragcheck: no 'wrote' line: $(cat "$tmp/stderr")"
cat >"$tmp/frag-probe.js" <<'JS'
var rows = document.querySelectorAll("tr.case");
put("rows", rows.length);
put("statuses", Array.prototype.map.call(rows, function (r) { return r.dataset.case + "=" + r.dataset.status; }).join(" "));
function row(name) { return document.querySelector('tr.case[data-case="' + name + '"]'); }
var s = row("seed_frag");
put("seed", s.dataset.status + " " + s.dataset.frag + " " + s.dataset.maxFrag);
put("seed-pill", getComputedStyle(s.querySelector(".pill")).backgroundColor);
// the bar runs past the max_frag mark, and is as long as the figure says
var g = s.querySelector("svg.gauge"), fill = g.querySelector("rect.fill"), track = g.querySelector("rect.track");
var mark = g.querySelector("line.lm.fail");
put("seed-crosses", box(fill).right > box(mark).left + box(mark).width / 2);
var scale = parseFloat(document.querySelector("#cases .note").textContent.match(/0 to ([\d.]+)%/)[1]) / 100;
put("seed-width", Math.abs(box(fill).width / box(track).width - (+s.dataset.frag) / scale) < 0.01);
var m = row("gpt2_varlen"), mf = m.querySelector("rect.fill"), mw = m.querySelector("line.lm.warn");
put("gpt2", m.dataset.status + " " + (box(mf).right < box(mw).left) + " " + getComputedStyle(mf).fill);
var f = row("free-but-fails"), tag = f.querySelector(".oomtag");
put("oom", f.dataset.oom + " " + f.dataset.mustFit + " " + (tag ? tag.textContent : ""));
put("verdict", document.getElementById("verdict").dataset.status);
JS
page_probe "$tmp/frag-probe.js" "$tmp/frag-probe.html"
inject "$tmp/frag.html" "$tmp/frag-probe.html" "$tmp/frag-probed.html"
chrome --window-size=1400,1000 --dump-dom "file://$tmp/frag-probed.html" >"$tmp/frag-dom.html"
fd=$tmp/frag-dom.html
[ -z "$(attr error "$fd")" ] || fail "fragcheck probe error: $(attr error "$fd")"
[ "$(attr rows "$fd")" = 3 ] && pass "fragcheck: 3 case rows: $(attr statuses "$fd")" || fail "fragcheck: $(attr rows "$fd") rows"
for c in gpt2_varlen seed_frag free-but-fails; do
  st=$(grep "^│ $c " "$tmp/frag.txt" | awk -F'│' '{gsub(/ /, "", $3); print $3}')
  case " $(attr statuses "$fd") " in
    *" $c=$st "*) ;;
    *) fail "fragcheck: $c is '$st' in the table, not in the report" ;;
  esac
done
case "$(attr seed "$fd")" in
  "fail 0."*" 0.3000") pass "fragcheck: seed_frag has data-status fail, data-frag $(attr seed "$fd" | cut -d' ' -f2) over data-max-frag 0.3000" ;;
  *) fail "fragcheck: seed_frag '$(attr seed "$fd")'" ;;
esac
[ "$(attr seed-pill "$fd")" = "rgb(214, 39, 40)" ] && [ "$(attr seed-crosses "$fd")" = true ] && [ "$(attr seed-width "$fd")" = true ] &&
  pass "fragcheck: seed_frag drawn red, its bar to scale and past the max_frag mark" ||
  fail "fragcheck: seed_frag pill $(attr seed-pill "$fd"), past the mark $(attr seed-crosses "$fd"), to scale $(attr seed-width "$fd")"
[ "$(attr gpt2 "$fd")" = "pass true rgb(42, 157, 79)" ] && pass "fragcheck: gpt2_varlen passes, its green bar short of the warn mark" ||
  fail "fragcheck: gpt2_varlen '$(attr gpt2 "$fd")'"
case "$(attr oom "$fd")" in
  "true 0 out of memory at operation"*) pass "fragcheck: free-but-fails on its own 8 GiB card: $(attr oom "$fd" | cut -d' ' -f3-)" ;;
  *) fail "fragcheck: free-but-fails '$(attr oom "$fd")'" ;;
esac
[ "$(attr verdict "$fd")" = fail ] || fail "fragcheck: verdict $(attr verdict "$fd"), want fail"
chrome --window-size=1300,800 --screenshot="$shots/fragcheck.png" "file://$tmp/frag.html" >/dev/null

echo "== diff --html: two programs' timelines aligned on their optimizer steps"
da=testdata/pytorch/resnet50_fp32.pickle db=testdata/pytorch/oom_survive_resnet.pickle
"$tmp/gpumem" diff "$da" "$db" --html "$tmp/diff.html" >"$tmp/diff.txt" 2>"$tmp/stderr"
grep -qx "gpumem: wrote $tmp/diff.html" "$tmp/stderr" || fail "diff: no 'wrote' line: $(cat "$tmp/stderr")"
# (the one address allowed is SVG's namespace, which the chart script names)
if grep -Eq '<(script|img|iframe)[^>]* src=|<link ' "$tmp/diff.html" ||
  grep -Eo 'https?://[a-z][^" ]*' "$tmp/diff.html" | grep -vqx 'http://www.w3.org/2000/svg'; then
  fail "the diff page refers to something outside itself"
else
  pass "diff page self-contained ($(wc -c <"$tmp/diff.html") bytes)"
fi
# errors the page's own scripts throw or log, caught from the start
cat >"$tmp/catch.html" <<'EOF'
<script>window.gmErrors = []; window.addEventListener("error", function (e) { gmErrors.push(e.message); });
(function () { var ce = console.error; console.error = function () { gmErrors.push([].join.call(arguments, " ")); ce.apply(console, arguments); }; })();</script>
EOF
cat >"$tmp/diff-probe.js" <<'JS'
var t = document.getElementById("diff-timeline"), lines = {};
t.querySelectorAll("path.line").forEach(function (p) { lines[p.getAttribute("class").split(" ")[1]] = Math.round(p.getTotalLength()); });
put("lines", ["a-re", "a-al", "b-re", "b-al"].map(function (k) { return k + "=" + (lines[k] || 0); }).join(" "));
put("colours", getComputedStyle(t.querySelector("path.a-re")).stroke + " " + getComputedStyle(t.querySelector("path.b-re")).stroke);
put("legend", document.querySelector("#timelines .legend").textContent);
var al = document.getElementById("alignment");
put("align", al.dataset.align + " " + (box(al).height > 0) + " " + al.textContent);
put("rows", document.querySelectorAll("#delta tbody tr").length);
put("peak-row", Array.prototype.map.call(document.querySelectorAll('#delta tr[data-key="peak-reserved"] td'), function (c) { return c.textContent; }).join("|"));
var ov = t.querySelector("rect.overlay"), r = box(ov);
function at(f) { return { bubbles: true, clientX: r.left + f * r.width, clientY: r.top + r.height / 2 }; }
ov.dispatchEvent(new MouseEvent("mousemove", at(0.5)));
put("tip", document.getElementById("tip").textContent);
ov.dispatchEvent(new MouseEvent("mousedown", at(0.25)));
ov.dispatchEvent(new MouseEvent("mousemove", at(0.5)));
ov.dispatchEvent(new MouseEvent("mouseup", at(0.5)));
put("zoom", t.querySelector("svg.plot").getAttribute("viewBox"));
ov.dispatchEvent(new MouseEvent("dblclick", at(0.5)));
put("reset", t.querySelector("svg.plot").getAttribute("viewBox"));
put("errors", window.gmErrors.length + ":" + window.gmErrors.join("|"));
JS
page_probe "$tmp/diff-probe.js" "$tmp/diff-probe.html"
awk -v f="$tmp/catch.html" '{print} /<head>/{while((getline l<f)>0)print l}' "$tmp/diff.html" >"$tmp/diff-caught.html"
inject "$tmp/diff-caught.html" "$tmp/diff-probe.html" "$tmp/diff-probed.html"
chrome --window-size=1400,1000 --dump-dom "file://$tmp/diff-probed.html" | tr '\n' ' ' >"$tmp/diff-dom.html"
dd=$tmp/diff-dom.html
[ -z "$(attr error "$dd")" ] || fail "diff probe error: $(attr error "$dd")"
[ "$(attr errors "$dd")" = "0:" ] && pass "diff page: no script errors" || fail "diff page: script errors '$(attr errors "$dd")'"
ok_lines=true
for l in $(attr lines "$dd"); do [ "${l#*=}" -gt 1000 ] || ok_lines=false; done
colours=$(attr colours "$dd")
$ok_lines && [ "${colours%% rgb*}" != "rgb${colours##* rgb}" ] &&
  pass "diff: both runs' reserved and allocated drawn ($(attr lines "$dd")), a and b in two colours ($colours)" ||
  fail "diff: lines '$(attr lines "$dd")', colours '$colours'"
case "$(attr legend "$dd")" in
  *"a reserved"*"a allocated"*"b reserved"*"b allocated"*) pass "diff: the legend names a's and b's curves" ;;
  *) fail "diff: legend '$(attr legend "$dd")'" ;;
esac
case "$(attr align "$dd")" in
  "annotations true aligned on the annotations both runs recorded: "*Optimizer.step#SGD.step*) pass "diff: alignment note shown: $(attr align "$dd" | cut -d' ' -f3-)" ;;
  *) fail "diff: alignment note '$(attr align "$dd")'" ;;
esac
# the table's peak reserved row and its row count, as the terminal shows them
term_peak=$(grep '│ peak reserved' "$tmp/diff.txt" | head -1 | awk -F'│' '{for (i = 2; i < NF; i++) { gsub(/^ +| +$/, "", $i); printf "%s%s", (i > 2 ? "|" : ""), $i }}')
term_rows=$(sed -n '/^├/,/^└/p' "$tmp/diff.txt" | sed '/^└/q' | grep -c '^│')
[ "$(attr peak-row "$dd")" = "$term_peak" ] && [ "$(attr rows "$dd")" = "$term_rows" ] &&
  pass "diff: delta table of $term_rows rows as the terminal's: $term_peak" ||
  fail "diff: delta table '$(attr peak-row "$dd")' ($(attr rows "$dd") rows), terminal '$term_peak' ($term_rows rows)"
case "$(attr tip "$dd")" in
  *"a op"*reserved*allocated*"b op"*reserved*allocated*"b − a"*) pass "diff hover reads both runs: $(attr tip "$dd")" ;;
  *) fail "diff hover: '$(attr tip "$dd")'" ;;
esac
zoom=$(attr zoom "$dd") reset=$(attr reset "$dd")
[ "$zoom" != "$reset" ] && [ "${zoom%% *}" -gt 0 ] && pass "diff: drag zooms to '$zoom', double-click resets to '$reset'" ||
  fail "diff zoom: '$zoom', reset '$reset'"
chrome --window-size=1300,1000 --screenshot="$shots/diff.png" "file://$tmp/diff.html" >/dev/null
[ -s "$shots/diff.png" ] && pass "diff screenshot" || fail "no diff screenshot"

echo "== layout: no text box over another, no line or curve through a label, every axis named"
# On every page above, at two common window sizes: SVG text boxes that
# overlap; mark, card and limit lines and memory curves drawn through a
# label; a chart with ticks and no axis caption, a canvas without its
# aria-label; a word of a fact or recommendation broken across lines.
cat >"$tmp/layout-probe.js" <<'JS'
// layout: text boxes that overlap, and axes without a label
var texts = [];
function visible(e) { var r = e.getBoundingClientRect(); var cs = getComputedStyle(e); return r.width > 0 && r.height > 0 && cs.visibility !== "hidden" && cs.display !== "none" && +cs.opacity !== 0; }
function name(e) { return (e.getAttribute("class") || e.tagName) + ":" + (e.textContent || "").trim().slice(0, 40); }
document.querySelectorAll("svg text").forEach(function (e) { if (visible(e) && e.textContent.trim()) texts.push(e); });
var over = [];
for (var i = 0; i < texts.length; i++) {
  var a = texts[i].getBoundingClientRect();
  for (var j = i + 1; j < texts.length; j++) {
    var b = texts[j].getBoundingClientRect();
    var w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > 1 && h > 1) over.push(name(texts[i]) + " × " + name(texts[j]));
  }
}
put("overlaps", over.length + (over.length ? ": " + over.slice(0, 6).join(" | ") : ""));
// lines and rects drawn over a text: dashed card lines, curves
var crossed = [];
function onPath(p, tb) { // a point of the curve p inside the box tb
  var n = p.getTotalLength(), m = p.getScreenCTM(), pt = p.ownerSVGElement.createSVGPoint();
  for (var k = 0; k <= 400; k++) {
    var q = p.getPointAtLength(n * k / 400); pt.x = q.x; pt.y = q.y; var s = pt.matrixTransform(m);
    if (s.x > tb.left && s.x < tb.right && s.y > tb.top && s.y < tb.bottom) return true;
  }
  return false;
}
document.querySelectorAll("svg line, svg path.line, svg path.vline").forEach(function (l) {
  var cs = getComputedStyle(l), lb = l.getBoundingClientRect();
  if (cs.display === "none" || cs.visibility === "hidden" || lb.width + lb.height === 0 || l.closest("g.xticks, g.yticks, g.ticks, defs") || l.closest(".grid")) return;
  lb = { left: lb.left - 0.5, right: lb.right + 0.5, top: lb.top - 0.5, bottom: lb.bottom + 0.5 };
  texts.forEach(function (t) {
    if (t.closest("g") === l.closest("g") && l.closest("g.mark")) return; // a mark's own label
    if (l.tagName === "path" && /^stroke/.test(getComputedStyle(t).paintOrder)) return; // drawn on a halo that hides a curve
    var tb = t.getBoundingClientRect();
    var w = Math.min(lb.right, tb.right) - Math.max(lb.left, tb.left), h = Math.min(lb.bottom, tb.bottom) - Math.max(lb.top, tb.top);
    if (w > 0.5 && h > 1 && (l.tagName === "line" || onPath(l, tb))) crossed.push(name(t) + " × " + l.tagName + "." + (l.getAttribute("class") || l.parentNode.getAttribute("class") || ""));
  });
});
put("crossed", crossed.length + (crossed.length ? ": " + crossed.slice(0, 12).join(" | ") : ""));
// every chart with ticks names its axes
var bare = [];
document.querySelectorAll("svg").forEach(function (s) {
  if (s.parentNode.closest("svg")) return;
  var hasX = s.querySelector("g.xticks text, g.ticks text"), hasY = s.querySelector("g.yticks text");
  var caps = s.querySelectorAll("text.caption, text.axis-title, text.axis.caption").length;
  if ((hasX || hasY) && caps < (hasX ? 1 : 0) + (hasY ? 1 : 0)) bare.push((s.id || s.parentNode.id || s.getAttribute("class")) + " " + caps + " captions");
});
document.querySelectorAll("canvas").forEach(function (c) { if (visible(c) && !c.getAttribute("aria-label")) bare.push("canvas#" + c.id + " unlabelled"); });
put("bare", bare.length + (bare.length ? ": " + bare.join(" | ") : ""));
// words broken inside: a fact or recommendation that wraps in the middle
// of a setting name (expandable_segme nts)
var broken = [];
document.querySelectorAll(".fact .v, p.rec").forEach(function (e) {
  if (!visible(e)) return;
  var words = e.textContent.split(/\s+/), range = document.createRange(), walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT), n;
  while ((n = walker.nextNode())) {
    var re = /\S+/g, m;
    while ((m = re.exec(n.data))) {
      range.setStart(n, m.index); range.setEnd(n, m.index + m[0].length);
      if (range.getClientRects().length > 1) broken.push(m[0]);
    }
  }
});
put("broken", broken.length + (broken.length ? ": " + broken.join(" | ") : ""));
JS
page_probe "$tmp/layout-probe.js" "$tmp/layout-probe.html"
for page in report oom sites run sweep frag diff; do
  inject "$tmp/$page.html" "$tmp/layout-probe.html" "$tmp/$page-layout.html"
  for size in 1400,1000 1024,768; do
    chrome --window-size=$size --virtual-time-budget=$budget --dump-dom "file://$tmp/$page-layout.html" >"$tmp/layout-dom.html"
    bad=""
    for k in error overlaps crossed bare broken; do
      v=$(attr "$k" "$tmp/layout-dom.html" || true)
      case "$k:$v" in error:) ;; *:0) ;; *) bad="$bad $k=$v" ;; esac
    done
    [ -z "$bad" ] && pass "layout of $page.html at $size" || fail "layout of $page.html at $size:$bad"
  done
done

echo "== the explorer on a million-event snapshot (measured; scripts/bench_html.sh)"
python3 scripts/gen_trace.py "$tmp/big1m.pickle" --events 1000000 >/dev/null
if RUNS=${BENCH_RUNS:-1} bash scripts/bench_html.sh "$tmp/big1m.pickle" >"$tmp/bench.txt" 2>&1; then
  grep -E "^(report|medians|pan and zoom|targets) " "$tmp/bench.txt" | sed 's/^/      /'
  pass "a million-event report opens, pans and zooms without errors"
else
  tail -3 "$tmp/bench.txt"
  fail "the million-event report: see above"
fi
rm -f "$tmp/big1m.pickle"

echo "== screenshot"
chrome --window-size=1400,1000 --screenshot="$shots/report.png" "file://$tmp/report.html" >/dev/null
[ -s "$shots/report.png" ] && pass "report screenshot" || fail "no screenshot"

if [ "$fails" -gt 0 ]; then
  echo "$fails checks failed"
  exit 1
fi
echo "all checks passed"
