#!/usr/bin/env bash
# Checks the HTML report in a real browser: writes the report of a shared
# fixture with `gpumem replay --html`, opens it in headless Chromium, reads
# the rendered DOM for the figures it must show, drives hover and zoom
# through the page's own script, times a million-point report, and takes
# the README screenshot (docs/report.png).
#
# Installs Debian's chromium when /usr/bin/chromium is missing (needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"

fixture=testdata/pytorch/gpt2_varlen.pickle
# the peak PyTorch itself reported for the fixture (19304284160)
peak_reserved=$(grep -o '"reserved_bytes.all.peak": *[0-9]*' "${fixture%.pickle}.truth.json" | grep -o '[0-9]*$')

if [ ! -x /usr/bin/chromium ]; then
  echo "== installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
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
    var m = document.getElementById("segmap-peak"), sum = 0, n = 0;
    m.querySelectorAll("rect[data-state]").forEach(function (r) {
      sum += +r.dataset.size; n++;
      if (r.getBBox().width <= 0) put("error", "a block has no width");
    });
    put("rects", n);
    put("rects-declared", m.dataset.rects);
    put("seg-bytes", sum);
    put("largest", m.querySelectorAll("rect.largest").length + "/" + m.querySelectorAll("rect[data-largest]").length);
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
    var blk = m.querySelector("rect[data-largest]");
    blk.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: 10, clientY: 10 }));
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
rects=$(grep -o '<rect class="b [a-z]*"' "$dom" | wc -l)
[ "$rects" -gt 0 ] && pass "$rects block rectangles in the segment maps" || fail "no segment rectangles"
[ -z "$(attr error "$probe")" ] || fail "probe error: $(attr error "$probe")"
[ "$(attr peak "$probe")" = "$peak_reserved" ] && pass "rendered timeline reads peak $peak_reserved" || fail "probe read peak $(attr peak "$probe")"
[ "$(attr paths "$probe")" = 3 ] && [ "$(attr path-length "$probe")" -gt 1000 ] &&
  pass "3 memory lines drawn (longest $(attr path-length "$probe") px)" || fail "memory lines: $(attr paths "$probe"), length $(attr path-length "$probe")"
[ "$(attr seg-bytes "$probe")" = "$peak_reserved" ] &&
  pass "blocks of the peak map add up to peak reserved ($(attr rects "$probe") blocks)" ||
  fail "blocks of the peak map add up to $(attr seg-bytes "$probe"), want $peak_reserved"
[ "$(attr rects "$probe")" = "$(attr rects-declared "$probe")" ] || fail "peak map: $(attr rects "$probe") rects drawn, $(attr rects-declared "$probe") declared"
[ "$(attr largest "$probe")" = "1/1" ] && pass "largest free block outlined" || fail "largest free block: $(attr largest "$probe")"
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
  free*MiB*largest*segment*) pass "block hover: $(attr block-tip "$probe")" ;;
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
HTMLREPORT_LARGE="$tmp/large.html" go test -count=1 -run '^TestLargeTimeline$' ./pkg/htmlreport/ >/dev/null
probe "$tmp/large.html" "$tmp/large-probe.html"
chrome --window-size=1400,1000 --dump-dom "file://$tmp/large-probe.html" >"$tmp/large-dom.html"
ms=$(attr ms "$tmp/large-dom.html")
[ -n "$ms" ] && [ "$ms" -lt 1000 ] && pass "opened and scripted in $ms ms ($(wc -c <"$tmp/large.html") bytes)" || fail "million-point report took '${ms}' ms"

echo "== screenshot"
mkdir -p docs
chrome --window-size=1400,1000 --screenshot=docs/report.png "file://$tmp/report.html" >/dev/null
[ -s docs/report.png ] && pass "docs/report.png" || fail "no screenshot"

if [ "$fails" -gt 0 ]; then
  echo "$fails checks failed"
  exit 1
fi
echo "all checks passed"
