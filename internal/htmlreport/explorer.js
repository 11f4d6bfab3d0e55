(function () {
  "use strict";
  // Run by node (the tests' harness, testdata/decode_explorer.js), the
  // file only hands over how the page reads its data; a page has a
  // window (and no module) and goes on.
  if (typeof module !== "undefined" && module.exports && typeof window === "undefined") {
    module.exports = { decodeDevices: decodeDevices, decodeMessage: decodeMessage, takeColumns: takeColumns, stateAt: stateAt, keyList: keyList };
    return;
  }
  // The page parses only the small part of the data, draws its first view
  // from it (a preview of the bands, made by gpumem, and the segment map
  // where the scrubber starts), and leaves the columns to a worker.
  var started = performance.now(), ALL = JSON.parse(document.getElementById("explorer-data").textContent);
  if (!ALL) return;
  var $ = function (id) { return document.getElementById(id); };
  // the read-out box and number formats the page's charts share (chart.js)
  var bytes = gmChart.bytes, esc = gmChart.esc, commas = gmChart.commas, show = gmChart.show, hide = gmChart.hide;

  // decodeDevices turns each device's columns (msg.bins: a JSON list of
  // base64 strings of deflated zigzag LEB128 varints; msg.devs: where each
  // column lies) into typed arrays and hands them to post, a device at a
  // time. It runs in a Web Worker made from its own source text, so that
  // the page stays free meanwhile, and uses nothing from outside itself.
  function decodeDevices(msg, post) {
    "use strict";
    function bytesOf(b64) {
      if (Uint8Array.fromBase64) return Uint8Array.fromBase64(b64);
      var s = atob(b64), u8 = new Uint8Array(s.length);
      for (var i = 0; i < s.length; i++) u8[i] = s.charCodeAt(i);
      return u8;
    }
    // the browser's own inflate: no library, no network
    function inflate(u8) {
      return new Response(new Blob([u8]).stream().pipeThrough(new DecompressionStream("deflate-raw"))).arrayBuffer()
        .then(function (buf) { return new Uint8Array(buf); });
    }
    // col decodes column c of b into out (a Float64Array unless given):
    // integer arithmetic while a value fits 28 bits, running sums when delta.
    function col(b, c, delta, out) {
      out = out || new Float64Array(c[2]);
      for (var k = 0, i = c[0], n = c[2], prev = 0; k < n; k++) {
        var x = b[i++], u = x & 127;
        if (x & 128) {
          x = b[i++]; u |= (x & 127) << 7;
          if (x & 128) {
            x = b[i++]; u |= (x & 127) << 14;
            if (x & 128) {
              x = b[i++]; u |= (x & 127) << 21;
              for (var m = 268435456; x & 128; m *= 128) { x = b[i++]; u += (x & 127) * m; }
            }
          }
        }
        var v = u % 2 ? -(u + 1) / 2 : u / 2;
        if (delta) v = prev += v;
        out[k] = v;
      }
      return out;
    }
    // a block list's columns; a block's address comes from its segment
    // record (first blocks) or the block before it (block in the page).
    // A block's state and band are one value, 8 band + state; made(i) is
    // the bands made by block i's list, whose bands count back from the
    // newest, or from the first plus one when abs (a key's). A used block's
    // size is written less its band's size in units (rounded up).
    function blockCols(b, d, p, made, abs, bandSize) {
      var cs = d.cols, sz = col(b, cs[p + "size"], false), sb = col(b, cs[p + "state"], false), sg = col(b, cs[p + "seg"], false);
      var n = sz.length, st = new Int32Array(n), bd = new Int32Array(n), segAt = new Int32Array(n), f = 0, i;
      for (i = 0; i < n; i++) {
        var v = sb[i], s = v % 8, k = (v - s) / 8;
        st[i] = s;
        if (k) {
          var m = made(i);
          if (abs) k = m - k + 1;
          bd[i] = k;
          sz[i] += Math.ceil(bandSize[m - k] / d.unit);
        }
      }
      for (i = 0; i < n; i++) { segAt[i] = f; if (st[i] & 4) f += 2; }
      // the segment records (address, size) are in units, the addresses
      // deltas among themselves
      for (i = 0; i < sg.length; i++) sg[i] *= d.unit;
      for (i = 2, f = sg[0]; i < sg.length; i += 2) { f += sg[i]; sg[i] = f; }
      return { size: sz, state: st, band: bd, seg: sg, segAt: segAt };
    }
    function device(d, b) {
      var n = d.bands, ops = d.ops, cs = d.cols, o = {}, i, j, acc;
      var start = o.start = col(b, cs.start, true, new Int32Array(n));
      var len = col(b, cs.len, false, new Int32Array(n)), rel = col(b, cs.rel, false, new Int32Array(n));
      var end = o.end = new Int32Array(n);
      o.rel = new Int32Array(n);
      for (i = 0; i < n; i++) { end[i] = start[i] + len[i]; o.rel[i] = end[i] + rel[i]; }
      var size = o.size = col(b, cs.size, false);
      o.addr = col(b, cs.addr, true); o.stream = col(b, cs.stream, true);
      for (i = 0; i < n; i++) o.addr[i] *= d.unit; // written in units
      o.stack = col(b, cs.stack, true, new Int32Array(n));
      o.cat = cs.cat && cs.cat[2] ? col(b, cs.cat, false, new Int32Array(n)) : null;
      o.time = cs.time[2] ? col(b, cs.time, true) : null;
      // live bytes after each op: the aggregate, and it plus the bands
      var agg = o.agg = new Float64Array(ops), tot = new Float64Array(ops + 1), total = o.total = new Float64Array(ops);
      if (d.aggregated) col(b, cs.agg, false, agg);
      for (i = 0, acc = 0; i < ops; i++) { acc += agg[i]; agg[i] = acc; }
      for (i = 0; i < n; i++) { tot[start[i]] += size[i]; tot[end[i]] -= size[i]; }
      o.ymax = 1;
      for (i = 0, acc = 0; i < ops; i++) { acc += tot[i]; total[i] = acc + agg[i]; if (total[i] > o.ymax) o.ymax = total[i]; }
      // bands in order of their end, by counting sort
      var cnt = new Int32Array(ops + 2), byEnd = o.byEnd = new Int32Array(n);
      for (i = 0; i < n; i++) cnt[end[i] + 1]++;
      for (i = 1; i < cnt.length; i++) cnt[i] += cnt[i - 1];
      for (i = 0; i < n; i++) byEnd[cnt[end[i]]++] = i;
      // the block list's changes and keys
      // each op's blocks deleted and inserted: 4 del + ins, an ins of 3 or
      // more adding the next of column insx
      o.pos = col(b, cs.pos, true, new Int32Array(ops));
      var id = col(b, cs.insdel, false), ix = col(b, cs.insx, false), del = o.del = new Int32Array(ops), insAt = o.insAt = new Float64Array(ops + 1);
      for (i = 0, j = 0; i < ops; i++) {
        var v = id[i], ins = v % 4;
        del[i] = (v - ins) / 4;
        if (ins === 3) ins += ix[j++];
        insAt[i + 1] = insAt[i] + ins;
      }
      // bands made by the first k ops
      var madeBy = o.madeBy = new Int32Array(ops + 1);
      for (i = 0, j = 0; i <= ops; i++) { while (j < n && start[j] < i) j++; madeBy[i] = j; }
      // op j's blocks, made by its first j + 1 ops
      j = 0;
      o.bc = blockCols(b, d, "b", function (i) { while (insAt[j + 1] <= i) j++; return madeBy[j + 1]; }, false, size);
      var kl = col(b, cs.klen), keyAt = o.keyAt = new Float64Array(kl.length + 1);
      for (i = 0; i < kl.length; i++) keyAt[i + 1] = keyAt[i] + kl[i];
      // key j's, by its first keys[j] ops
      j = 0;
      o.kc = blockCols(b, d, "k", function (i) { while (keyAt[j + 1] <= i) j++; return madeBy[d.keys[j]]; }, true, size);
      return o;
    }
    function buffers(o, list) {
      for (var key in o) {
        var v = o[key];
        if (v && v.buffer instanceof ArrayBuffer) list.push(v.buffer);
        else if (v && typeof v === "object") buffers(v, list);
      }
      return list;
    }
    var bins = JSON.parse(msg.bins);
    (function next(k) {
      if (k >= bins.length) return;
      var t0 = performance.now();
      inflate(bytesOf(bins[k])).then(function (b) {
        var t1 = performance.now(), o = device(msg.devs[k], b);
        post({ k: k, data: o, inflateMs: t1 - t0, decodeMs: performance.now() - t1 }, buffers(o, []));
        next(k + 1);
      }).catch(function (e) { post({ error: String(e) }, []); });
    })(0);
  }
  function block(d, c, i, prev, made) {
    var s = c.state[i], first = (s & 4) !== 0, size = c.size[i] * d.unit;
    var addr = first ? c.seg[c.segAt[i]] : prev ? prev[0] + prev[1] : 0;
    return [addr, size, s & 3, first, first ? c.seg[c.segAt[i] + 1] : 0, c.band[i] ? made - c.band[i] : -1];
  }
  // keyList builds key j's block list the first time it is needed
  function keyList(d, j) {
    if (!d.keyLists[j]) {
      var list = [], made = d.madeBy[d.keys[j]];
      for (var i = d.keyAt[j]; i < d.keyAt[j + 1]; i++) list.push(block(d, d.kc, i, list[list.length - 1], made));
      d.keyLists[j] = list;
    }
    return d.keyLists[j];
  }
  // the blocks after the first k ops: the last key at or before k, and the
  // changes since; until the columns are in, only where the scrubber starts
  function stateAt(d, k) {
    if (!d.ready) return d.first.op === k ? d.first.blocks.slice() : [];
    var j = -1, lo = 0, hi = d.keys.length - 1;
    while (lo <= hi) { var m = (lo + hi) >> 1; if (d.keys[m] <= k) { j = m; lo = m + 1; } else hi = m - 1; }
    var st = j >= 0 ? keyList(d, j).slice() : [], op = j >= 0 ? d.keys[j] : 0;
    for (; op < k; op++) {
      var a = d.insAt[op], b = d.insAt[op + 1], pos = d.pos[op], made = d.madeBy[op + 1], ins = [];
      for (var i = a; i < b; i++) ins.push(block(d, d.bc, i, ins.length ? ins[ins.length - 1] : st[pos - 1], made));
      st.splice.apply(st, [pos, d.del[op]].concat(ins));
    }
    return st;
  }
  var STATES = ["free", "inactive split", "allocated", "pending free"];
  var SCOL = ["#c9d1db", "#f2c6a0", "#3a6ea5", "#e8871e"];

  // sites: the first `depth` user frames of a stack (all frames when none is the user's)
  function siteKey(d, st, depth) {
    if (st < 0) return "(no stack recorded)";
    var fr = d.stacks[st], out = [];
    for (var i = 0; i < fr.length && out.length < depth; i++) if (d.user[fr[i]]) out.push(d.frames[fr[i]]);
    for (i = 0; i < fr.length && out.length < depth; i++) if (!d.user[fr[i]]) out.push(d.frames[fr[i]]);
    return out.join("\n");
  }
  function buildSites(d, depth) {
    var byKey = {}, list = [];
    d.siteOf = new Int32Array(d.stacks ? d.stacks.length + 1 : 1);
    for (var s = -1; s < (d.stacks ? d.stacks.length : 0); s++) {
      var k = siteKey(d, s, depth);
      if (!(k in byKey)) { byKey[k] = list.length; list.push({ key: k }); }
      d.siteOf[s + 1] = byKey[k];
    }
    d.sites = list;
    d.colors = new Uint32Array(list.length);
    for (var i = 0; i < list.length; i++) {
      var h = 0; for (var j = 0; j < list[i].key.length; j++) h = (h * 31 + list[i].key.charCodeAt(j)) >>> 0;
      list[i].color = list[i].key === "(no stack recorded)" ? "hsl(40,22%,74%)" : "hsl(" + (h % 360) + ",62%," + (44 + (h >> 9) % 18) + "%)";
      d.colors[i] = rgba(list[i].color);
    }
  }
  // categories: the colours of the profiler's memory timeline where it has them
  var CATCOL = { parameter: "#2e7d32", buffer: "#8bc34a", gradient: "#1f4fd1", optimizer_state: "#daa520", activation: "#d62728",
    temporary: "#9370db", input: "#37474f", workspace: "#8c564b", unknown: "#9e9e9e" };
  function buildCats(d) {
    d.catList = (d.cats || []).map(function (name) { return { key: name, color: CATCOL[name] || "#9e9e9e" }; });
    d.catColors = new Uint32Array(d.catList.length);
    for (var i = 0; i < d.catList.length; i++) d.catColors[i] = rgba(d.catList[i].color);
  }
  var probeCtx = document.createElement("canvas").getContext("2d");
  function rgba(css) {
    probeCtx.fillStyle = css; probeCtx.fillRect(0, 0, 1, 1);
    var p = probeCtx.getImageData(0, 0, 1, 1).data;
    return (255 << 24 | p[2] << 16 | p[1] << 8 | p[0]) >>> 0;
  }
  var GREY = rgba("#8a949e"), HI = rgba("#111111"), DIM = rgba("#e9edf1");

  var D = null, view = { x0: 0, x1: 1 }, mode = "op", scrub = 0, pinned = -1, selSite = -1, depth = 2, colorBy = "site";
  // byCat says the bands are coloured by category, the sites table lists categories
  function byCat() { return colorBy === "category" && D.cat && D.catList && D.catList.length > 0; }
  function bandKey(bi) { return byCat() ? D.cat[bi] - 1 : D.siteOf[D.stack[bi] + 1]; }
  function keys() { return byCat() ? D.catList : D.sites; }
  var cv = $("bands"), ctx = cv.getContext("2d"), off = document.createElement("canvas"), offView = null, offSrc = off;
  var samples = null; // the op drawn in each column of the last exact render
  var W = 0, H = 0;

  function fit() {
    W = Math.max(200, Math.floor(cv.clientWidth)); H = +cv.getAttribute("height");
    cv.width = W; off.width = W; off.height = H;
  }
  // op at fraction f of the view, by the chosen axis
  function opAt(f) {
    if (mode === "time" && D.time) {
      var t = D.time[Math.floor(view.x0)] + f * (D.time[Math.min(Math.ceil(view.x1), D.ops) - 1] - D.time[Math.floor(view.x0)]);
      var lo = Math.floor(view.x0), hi = Math.min(Math.ceil(view.x1), D.ops) - 1;
      while (lo < hi) { var m = (lo + hi) >> 1; if (D.time[m] < t) lo = m + 1; else hi = m; }
      return lo;
    }
    return view.x0 + f * (view.x1 - view.x0);
  }
  function xOf(op) {
    if (mode === "time" && D.time) {
      var a = D.time[Math.floor(view.x0)], b = D.time[Math.min(Math.ceil(view.x1), D.ops) - 1];
      return b > a ? (D.time[Math.min(Math.max(Math.round(op), 0), D.ops - 1)] - a) / (b - a) * W : 0;
    }
    return (op - view.x0) / (view.x1 - view.x0) * W;
  }

  // render draws the bands of the view exactly: each pixel column shows the
  // live allocations, stacked in allocation order, after the op of the
  // column where the most bytes were live; bands under a pixel tall share
  // grey pixels so that the column's height stays the exact total.
  function render() {
    if (!D.ready) { drawPreview(); return; }
    var n = D.bands, img = ctx.createImageData(W, H), px = new Uint32Array(img.data.buffer);
    var start = D.start, end = D.end, size = D.size, stack = D.stack, byEnd = D.byEnd, total = D.total, agg = D.agg;
    var siteOf = D.siteOf, colors = D.colors, cats = byCat() ? D.cat : null, catColors = D.catColors;
    var fen = new Float64Array(n + 1), LOG = 1;
    while (LOG * 2 <= n) LOG *= 2;
    function add(i, v) { for (i++; i <= n; i += i & -i) fen[i] += v; }
    function find(v) { // the first band whose prefix sum exceeds v
      var p = 0;
      for (var s = LOG; s > 0; s >>= 1) if (p + s <= n && fen[p + s] <= v) { p += s; v -= fen[p]; }
      return p;
    }
    function prefix(i) { var s = 0; for (i++; i > 0; i -= i & -i) s += fen[i]; return s; }
    samples = new Int32Array(W);
    var lo = 0;
    for (var c = 0; c < W; c++) {
      var a = Math.max(0, Math.floor(opAt(c / W))), b = Math.min(D.ops, Math.max(a + 1, Math.floor(opAt((c + 1) / W))));
      if (c === W - 1) b = Math.min(D.ops, Math.max(a + 1, Math.ceil(view.x1)));
      var best = Math.min(a, D.ops - 1);
      for (var o = a; o < b; o++) if (total[o] > total[best]) best = o;
      samples[c] = best;
    }
    // the live set at the first sample
    var s0 = samples[0], pa = 0, pe = 0, i;
    for (i = 0; i < n; i++) if (start[i] <= s0 && end[i] > s0) fen[i + 1] += size[i];
    for (i = 1; i <= n; i++) { var j = i + (i & -i); if (j <= n) fen[j] += fen[i]; }
    while (pa < n && start[pa] <= s0) pa++;
    while (pe < n && end[byEnd[pe]] <= s0) pe++;
    var prev = s0, k2b = H / D.ymax;
    for (c = 0; c < W; c++) {
      var s = samples[c];
      if (s !== prev) {
        for (; pa < n && start[pa] <= s; pa++) if (end[pa] > s) add(pa, size[pa]);
        for (; pe < n && end[byEnd[pe]] <= s; pe++) { var k = byEnd[pe]; if (start[k] <= prev) add(k, -size[k]); }
        prev = s;
      }
      var base = agg[s], y = H;
      if (base > 0) { var top = H - base * k2b; for (var r = Math.max(0, Math.round(top)); r < y; r++) px[r * W + c] = GREY; y = Math.round(top); }
      var total = fen.length > 1 ? prefix(n - 1) : 0, pos = 0;
      while (pos < total) {
        var bi = find(pos), hiB = prefix(bi), loB = hiB - size[bi];
        var yTop = H - (base + hiB) * k2b, yBot = H - (base + loB) * k2b, col;
        if (yBot - yTop >= 1) {
          var key = cats ? cats[bi] - 1 : siteOf[stack[bi] + 1];
          col = bi === pinned ? HI : selSite >= 0 ? (key === selSite ? HI : DIM) : cats ? (key >= 0 ? catColors[key] : GREY) : colors[key];
          for (r = Math.max(0, Math.round(yTop)); r < Math.round(yBot); r++) px[r * W + c] = col;
          pos = hiB;
        } else { // a pixel of bands too small to see
          var row = Math.floor(yBot - 1e-9), rowLo = (H - row - 1) / k2b - base;
          if (row >= 0 && row < H) px[row * W + c] = bi === pinned ? HI : GREY;
          pos = Math.max(hiB, rowLo + 1 / k2b);
        }
      }
    }
    ctx.putImageData(img, 0, 0);
    drawArea();
    off.getContext("2d").clearRect(0, 0, W, H);
    off.getContext("2d").drawImage(cv, 0, 0);
    offSrc = off; offView = { x0: view.x0, x1: view.x1, mode: mode, exact: true };
    overlay();
    cv.dataset.rendered = String(+cv.dataset.rendered + 1 || 1);
  }
  // drawArea draws what each category held over the view, stacked, from
  // the samples gpumem embeds (bytes as asked; every allocation, also
  // those drawn together in grey above); hidden without categories
  function drawArea() {
    var area = $("catarea");
    if (!area) return;
    if (!D.cats || !D.catOps || !D.catOps.length) { area.style.display = "none"; return; }
    area.style.display = ""; area.width = W;
    var a = area.getContext("2d"), AH = +area.getAttribute("height"), ops = D.catOps, by = D.catBytes, ymax = 1, i, c;
    for (i = 0; i < ops.length; i++) { var t = 0; for (c = 0; c < by[i].length; c++) t += by[i][c]; if (t > ymax) ymax = t; }
    a.clearRect(0, 0, W, AH);
    var lo = 0; while (lo < ops.length - 1 && ops[lo + 1] < view.x0) lo++;
    var hi = ops.length - 1; while (hi > 0 && ops[hi - 1] > view.x1) hi--;
    var base = new Float64Array(hi - lo + 1);
    for (c = 0; c < D.cats.length; c++) {
      if (selSite >= 0 && byCat() && c !== selSite) { for (i = lo; i <= hi; i++) base[i - lo] += by[i][c]; continue; }
      a.beginPath();
      for (i = lo; i <= hi; i++) a.lineTo(xOf(ops[i]), AH - (base[i - lo] + by[i][c]) / ymax * AH);
      for (i = hi; i >= lo; i--) { a.lineTo(xOf(ops[i]), AH - base[i - lo] / ymax * AH); base[i - lo] += by[i][c]; }
      a.closePath(); a.fillStyle = CATCOL[D.cats[c]] || "#9e9e9e"; a.fill();
    }
    area.dataset.drawn = String(+area.dataset.drawn + 1 || 1);
  }
  // drawPreview draws the whole trace from the preview gpumem embeds: the
  // image render makes at that width, column after column, each a column
  // k back that it copies from (0 none) and runs of its rows: 0 the
  // copied pixels, else 1 + a palette entry (0 nothing, 1 grey, 2+k the
  // site of stack k-1). Columns fill the rows of a transposed image,
  // turned back when drawn.
  function drawPreview() {
    var P = D.previewW, PH = D.previewH, tc = document.createElement("canvas"), tctx = tc.getContext("2d");
    tc.width = PH; tc.height = P;
    var img = tctx.createImageData(PH, P), px = new Uint32Array(img.data.buffer), b = bytesOf(D.preview), i = 0;
    function next() { // a zigzag varint
      for (var u = 0, m = 1, x = 128; x & 128; m *= 128) { x = b[i++]; u += (x & 127) * m; }
      return u / 2;
    }
    for (var at = 0; at < px.length && i < b.length;) {
      for (var from = next() * PH, end = at + PH; at < end && i < b.length;) {
        var p = next(), len = next();
        if (p === 0) px.copyWithin(at, at - from, at - from + len);
        else if (p > 1) px.fill(p === 2 ? GREY : D.colors[D.siteOf[p - 3]], at, at + len);
        at += len;
      }
    }
    tctx.putImageData(img, 0, 0);
    var pc = document.createElement("canvas"), pctx = pc.getContext("2d");
    pc.width = P; pc.height = PH;
    pctx.setTransform(0, 1, 1, 0, 0, 0); // (x, y) to (y, x)
    pctx.drawImage(tc, 0, 0);
    offSrc = pc; offView = { x0: 0, x1: D.ops, mode: mode, exact: false };
    quick();
  }
  function bytesOf(b64) {
    if (Uint8Array.fromBase64) return Uint8Array.fromBase64(b64);
    var s = atob(b64), u8 = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) u8[i] = s.charCodeAt(i);
    return u8;
  }
  // quick draws the last exact render moved and stretched to the view: what
  // a frame of panning or zooming shows until the exact render catches up.
  var timer = 0;
  function quick() {
    if (offView && offView.mode === mode && mode !== "time") {
      var SW = offSrc.width, sx = (view.x0 - offView.x0) / (offView.x1 - offView.x0) * SW, sw = (view.x1 - view.x0) / (offView.x1 - offView.x0) * SW;
      ctx.clearRect(0, 0, W, H);
      ctx.drawImage(offSrc, sx, 0, sw, offSrc.height, 0, 0, W, H);
      overlay();
      clearTimeout(timer);
      if (D.ready && (sx !== 0 || sw !== SW || !offView.exact)) timer = setTimeout(render, 150);
    } else if (D.ready) render();
  }
  // overlay: the scrubber, the peak and OOM, the annotated spans, the axis
  var axis = $("axis"), spansEl = $("spans");
  function overlay() {
    ctx.fillStyle = "#7b4fa0"; ctx.fillRect(Math.round(xOf(D.peak)), 0, 1, H);
    if (D.oom >= 0) { ctx.fillStyle = "#d62728"; ctx.fillRect(Math.round(xOf(D.oom)), 0, 2, H); }
    ctx.fillStyle = "#111"; ctx.fillRect(Math.round(xOf(scrub - 1)), 0, 1, H);
    // the y axis: bytes live, ticks at round binary sizes from the foot
    var unit = 1, names = ["B", "KiB", "MiB", "GiB", "TiB"], ui = 0;
    while (D.ymax / unit >= 1024 && ui < names.length - 1) { unit *= 1024; ui++; }
    var ystep = gmChart.nice(D.ymax / unit / 4) * unit, yticks = 0;
    ctx.font = "11px system-ui,sans-serif";
    for (var yv = ystep; yv <= D.ymax; yv += ystep) {
      var yy = Math.round(H - yv / D.ymax * H), lab = +(yv / unit).toFixed(2) + " " + names[ui];
      ctx.fillStyle = "rgba(255,255,255,.85)"; ctx.fillRect(0, yy - 12, ctx.measureText(lab).width + 10, 14);
      ctx.fillStyle = "#66707a"; ctx.fillRect(0, yy, 6, 1); ctx.fillText(lab, 8, yy - 2); yticks++;
    }
    cv.dataset.yTicks = yticks;
    // axis ticks
    var ax = axis.getContext("2d"); axis.width = W; ax.clearRect(0, 0, W, 40); ax.fillStyle = "#66707a"; ax.font = "11px system-ui,sans-serif";
    var ticks = [];
    if (mode === "steps" && D.spans && D.spans.length) {
      D.spans.forEach(function (s, i) { ticks.push([xOf(s[0]), s[2]]); });
    } else if (mode === "time" && D.time) {
      var t0 = D.time[Math.floor(view.x0)], t1 = D.time[Math.min(Math.ceil(view.x1), D.ops) - 1];
      for (var q = 0; q <= 8; q++) ticks.push([q / 8 * W, ((t0 + q / 8 * (t1 - t0) - D.time[0]) / 1000).toFixed(1) + " ms"]);
    } else { // whole, round operation numbers (eighths of the view fell at 74,999)
      var step = gmChart.nice((view.x1 - view.x0) / 8);
      for (var v = Math.ceil(view.x0 / step) * step; v <= view.x1; v += step) ticks.push([xOf(v), commas(v)]);
    }
    var lastX = -1e9, drawn = 0;
    ticks.forEach(function (t) {
      if (t[0] < 0 || t[0] > W || t[0] - lastX < 60) return;
      ax.fillRect(Math.round(t[0]), 0, 1, 5); ax.fillText(t[1], Math.min(t[0] + 2, W - 60), 16); lastX = t[0]; drawn++;
    });
    axis.dataset.ticks = drawn;
    // annotated spans as labelled bars
    var sp = spansEl.getContext("2d"); spansEl.width = W; sp.clearRect(0, 0, W, 18); sp.font = "11px system-ui,sans-serif";
    var shown = 0;
    (D.spans || []).forEach(function (s, i) {
      var x0 = xOf(s[0]), x1 = Math.max(xOf(s[1]), x0 + 2);
      if (x1 < 0 || x0 > W) return;
      sp.fillStyle = i % 2 ? "#b9c7d8" : "#cfd9e6"; sp.fillRect(x0, 2, x1 - x0, 14);
      // a label at its size, cut with an ellipsis to its bar (squeezed to fit, it was unreadable)
      var room = Math.min(x1, W) - Math.max(x0, 0) - 6, label = s[2];
      if (room > 30) {
        while (label.length > 1 && sp.measureText(label).width > room) label = label.slice(0, -2) + "…";
        sp.fillStyle = "#1d2329"; sp.fillText(label, Math.max(x0, 0) + 3, 13);
      }
      shown++;
    });
    spansEl.dataset.spans = shown;
  }

  // band under a point: the live set after op s, stacked in allocation order
  function bandAt(s, bytesUp) {
    var cum = D.agg[s];
    if (bytesUp < cum) return -1;
    for (var i = 0; i < D.bands && D.start[i] <= s; i++) {
      if (D.end[i] <= s) continue;
      cum += D.size[i];
      if (cum > bytesUp) return i;
    }
    return -1;
  }
  function hex(a) { return "0x" + a.toString(16); }
  function when(op) { return "op " + commas(op) + (D.time ? " (" + ((D.time[Math.min(op, D.ops - 1)] - D.time[0]) / 1000).toFixed(3) + " ms)" : ""); }
  function bandText(i) {
    var st = D.stack[i], fr = st >= 0 ? D.stacks[st].map(function (f) { return D.frames[f]; }) : [];
    var end = D.end[i] >= D.ops ? "still live at the end" : "freed at " + when(D.end[i]);
    var rel = D.rel[i] > D.end[i] && D.rel[i] < D.ops ? "<br>block held for another stream until op " + commas(D.rel[i]) : "";
    return "<b>" + bytes(D.size[i]) + "</b> at " + hex(D.addr[i]) + " &middot; stream " + D.stream[i] +
      "<br>allocated at " + when(D.start[i]) + ", " + end + " (" + commas(D.end[i] - D.start[i]) + " ops)" + rel +
      (fr.length ? "<pre class=\"frames\">" + esc(fr.join("\n")) + "</pre>" : "<br>no stack recorded");
  }
  function bandUnder(e) {
    var r = cv.getBoundingClientRect(), c = Math.min(W - 1, Math.max(0, Math.floor((e.clientX - r.left) / r.width * W)));
    var y = (e.clientY - r.top) / r.height * H, s = samples ? samples[c] : Math.floor(opAt(c / W));
    return { op: s, band: bandAt(s, (H - y) / H * D.ymax) };
  }
  cv.addEventListener("mousemove", function (e) {
    if (drag) return;
    if (!D.ready) { show("decoding the allocations&hellip;", e); return; }
    var h = bandUnder(e);
    if (h.band < 0) { show("op " + commas(h.op) + "<br>live " + bytes(D.total[h.op]) + (D.agg[h.op] ? " (" + bytes(D.agg[h.op]) + " aggregated)" : ""), e); cv.dataset.hover = ""; return; }
    cv.dataset.hover = h.band;
    show(bandText(h.band), e);
  });
  cv.addEventListener("mouseleave", hide);
  var drag = null;
  cv.addEventListener("mousedown", function (e) { drag = { x: e.clientX, x0: view.x0, x1: view.x1, moved: false }; e.preventDefault(); });
  window.addEventListener("mousemove", function (e) {
    if (!drag) return;
    var dx = (e.clientX - drag.x) / cv.getBoundingClientRect().width * (drag.x1 - drag.x0);
    if (Math.abs(e.clientX - drag.x) > 3) drag.moved = true;
    if (drag.moved) { setView(drag.x0 - dx, drag.x1 - dx); hide(); }
  });
  window.addEventListener("mouseup", function (e) {
    if (!drag) return;
    var d = drag; drag = null;
    if (d.moved || !D.ready) return;
    var h = bandUnder(e); // a click pins the band and moves the scrubber there
    pin(h.band);
    setScrub(h.op + 1);
  });
  cv.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = cv.getBoundingClientRect(), f = (e.clientX - r.left) / r.width, at = view.x0 + f * (view.x1 - view.x0);
    var k = Math.exp(e.deltaY * 0.002);
    setView(at - (at - view.x0) * k, at + (view.x1 - at) * k);
  }, { passive: false });
  cv.addEventListener("dblclick", function () { setView(0, D.ops); });
  function setView(a, b) {
    var w = Math.min(Math.max(b - a, 8), D.ops);
    a = Math.min(Math.max(a, 0), D.ops - w);
    view.x0 = a; view.x1 = a + w;
    cv.dataset.view = Math.round(view.x0) + " " + Math.round(view.x1);
    quick();
  }
  function pin(i) {
    if (!D.ready) return;
    pinned = i;
    var p = $("pinned");
    p.innerHTML = i >= 0 ? "<b>pinned</b> " + bandText(i) : "";
    p.dataset.band = i;
    render();
  }

  // the segment map after the first k ops
  var sm = $("segmap-live"), smx = sm.getContext("2d");
  function drawMap(k) {
    var st = stateAt(D, k), segs = [], cur = null, i;
    for (i = 0; i < st.length; i++) {
      if (st[i][3]) { cur = { addr: st[i][0], size: st[i][4], blocks: [] }; segs.push(cur); }
      cur.blocks.push(st[i]);
    }
    var MW = Math.max(200, Math.floor(sm.clientWidth)), total = 0, maxSeg = 1, largest = null, sums = [0, 0, 0, 0], counts = [0, 0, 0, 0];
    segs.forEach(function (s) { total += s.size; maxSeg = Math.max(maxSeg, s.size); });
    st.forEach(function (b) { sums[b[2]] += b[1]; counts[b[2]]++; if (b[2] < 2 && (!largest || b[1] > largest[1])) largest = b; });
    var oomHere = D.oom >= 0 && k === D.oom + 1;
    var need = oomHere ? D.oomRounded : 0;
    var scale = Math.max(maxSeg / MW, (total + need) / (MW * 12), 1), x = 0, y = 0, rects = [];
    segs.forEach(function (s) {
      var w = Math.max(s.size / scale, 3);
      if (x > 0 && x + w > MW) { x = 0; y += 26; }
      s.x = x; s.y = y; s.w = w; x += w + 3;
    });
    var oomX = x, oomY = y;
    if (oomHere) { var ow = Math.max(need / scale, 3); if (oomX > 0 && oomX + ow > MW) { oomX = 0; oomY += 26; } }
    sm.width = MW; sm.height = (oomHere ? oomY : y) + 30;
    smx.clearRect(0, 0, MW, sm.height);
    segs.forEach(function (s) {
      var off = 0;
      s.blocks.forEach(function (b) {
        var bx = s.x + off / s.size * s.w, bw = Math.max(b[1] / s.size * s.w, 0.5);
        smx.fillStyle = SCOL[b[2]]; smx.fillRect(bx, s.y + 4, bw, 18);
        rects.push([bx, s.y + 4, bw, b]);
        off += b[1];
      });
      smx.strokeStyle = "#9aa4ae"; smx.lineWidth = 0.6; smx.strokeRect(s.x + 0.5, s.y + 4.5, s.w - 1, 17);
    });
    if (largest) {
      rects.forEach(function (r) { if (r[3] === largest) { smx.strokeStyle = "#d62728"; smx.lineWidth = 2.5; smx.strokeRect(r[0] - 1.5, r[1] - 2, Math.max(r[2], 2) + 3, 22); } });
    }
    if (oomHere) {
      smx.setLineDash([4, 3]); smx.strokeStyle = "#d62728"; smx.lineWidth = 2; smx.strokeRect(oomX + 1, oomY + 5, Math.max(need / scale, 3) - 2, 16); smx.setLineDash([]);
    }
    sm.rects = rects;
    var ds = sm.dataset;
    ds.op = k; ds.segments = segs.length; ds.blocks = st.length; ds.reserved = total;
    ds.allocated = sums[2]; ds.active = sums[2] + sums[3]; ds.splitBytes = sums[1]; ds.split = counts[1];
    ds.largestFree = largest ? largest[1] : 0;
    ds.digest = segs.map(function (s) { return hex(s.addr) + ":" + s.size + "[" + s.blocks.map(function (b) { return b[1] + STATES[b[2]][0]; }).join(",") + "]"; }).join(" ");
    // in the order and words of the static maps' legends below
    $("segmap-legend").innerHTML = [2, 3, 1, 0].map(function (q) {
      return "<span><i class=\"sq\" style=\"background:" + SCOL[q] + "\"></i>" + STATES[q] + " " + bytes(sums[q]) + " in " + counts[q] + " blocks</span>";
    }).join("") + (largest ? "<span><i class=\"sq largest\"></i>largest free block " + bytes(largest[1]) + "</span>" : "") +
      (oomHere ? "<span><i class=\"sq oomreq\"></i>the request that failed: " + bytes(D.oomSize) + " (rounded " + bytes(D.oomRounded) + ")</span>" : "");
    $("segmap-title").textContent = "Segments after " + commas(k) + " of " + commas(D.ops) + " operations" +
      (k === D.peak + 1 ? " (the peak)" : "") + (oomHere ? " (the out-of-memory, after its release steps)" : "");
  }
  sm.addEventListener("mousemove", function (e) {
    if (!sm.rects) return;
    var r = sm.getBoundingClientRect(), x = (e.clientX - r.left) * sm.width / r.width, y = (e.clientY - r.top) * sm.height / r.height;
    for (var i = 0; i < sm.rects.length; i++) {
      var q = sm.rects[i];
      if (x >= q[0] && x < q[0] + Math.max(q[2], 1) && y >= q[1] && y < q[1] + 18) {
        var b = q[3];
        show("<b>" + STATES[b[2]] + "</b> " + bytes(b[1]) + " at " + hex(b[0]) + (b[5] >= 0 && D.ready ? "<br>" + bandText(b[5]) : ""), e);
        return;
      }
    }
    hide();
  });
  sm.addEventListener("mouseleave", hide);

  // sites: bytes live after the peak, the OOM and the scrubber's op
  function liveBySite(op) {
    var out = new Float64Array(keys().length);
    if (op < 0) return out;
    for (var i = 0; i < D.bands && D.start[i] <= op; i++) if (D.end[i] > op) { var k = bandKey(i); if (k >= 0) out[k] += D.size[i]; }
    return out;
  }
  function drawSites() {
    var atPeak = liveBySite(D.peak), atOOM = D.oom >= 0 ? liveBySite(D.oom - 1) : null, atScrub = liveBySite(scrub - 1);
    var list = keys();
    var idx = list.map(function (_, i) { return i; }).filter(function (i) { return atPeak[i] || atScrub[i] || (atOOM && atOOM[i]); });
    idx.sort(function (a, b) { return atScrub[b] - atScrub[a] || atPeak[b] - atPeak[a]; });
    $("sites-oom-head").style.display = atOOM ? "" : "none";
    var rows = idx.slice(0, 40).map(function (i) {
      var s = list[i];
      return "<tr class=\"xsite" + (i === selSite ? " sel" : "") + "\" data-site=\"" + i + "\" data-peak=\"" + atPeak[i] + "\" data-scrub=\"" + atScrub[i] + "\">" +
        "<td><i class=\"sq\" style=\"background:" + s.color + "\"></i></td><td class=\"n\">" + bytes(atPeak[i]) + "</td>" +
        (atOOM ? "<td class=\"n\">" + bytes(atOOM[i]) + "</td>" : "") + "<td class=\"n\">" + bytes(atScrub[i]) + "</td><td><pre>" + esc(s.key) + "</pre></td></tr>";
    });
    $("xsites-body").innerHTML = rows.join("");
    $("xsites").dataset.sites = idx.length;
  }
  $("xsites-body").addEventListener("click", function (e) {
    var tr = e.target.closest("tr.xsite");
    if (!tr) return;
    selSite = +tr.dataset.site === selSite ? -1 : +tr.dataset.site;
    drawSites(); render();
  });
  $("depth").addEventListener("change", function () {
    depth = +this.value; buildSites(D, depth); selSite = -1;
    if (D.ready) drawSites();
    render();
  });

  var range = $("scrub"), ex = $("explorer");
  function setScrub(k) {
    if (!D.ready) return; // until the columns are in, the map stays where it starts
    scrub = Math.min(Math.max(1, Math.round(k)), D.ops);
    range.value = scrub;
    label();
    drawSites();
    if (offView) quick();
    drawMap(scrub);
  }
  function label() {
    $("scrub-label").textContent = "after op " + commas(scrub - 1) + (D.time ? " · " + ((D.time[scrub - 1] - D.time[0]) / 1000).toFixed(3) + " ms" : "");
  }
  range.addEventListener("input", function () { setScrub(+range.value); });
  var scrubTo = document.querySelectorAll("#explorer [data-scrub-to]");
  scrubTo.forEach(function (b) {
    b.addEventListener("click", function () { setScrub(b.dataset.scrubTo === "oom" ? D.oom + 1 : D.peak + 1); });
  });
  var colorSel = $("colorby");
  if (colorSel) colorSel.addEventListener("change", function () {
    colorBy = colorSel.value; selSite = -1;
    if (D.ready) drawSites();
    render();
  });
  var modeSel = $("xmode");
  modeSel.addEventListener("change", function () { mode = modeSel.value; render(); });

  // useDevice shows device k: its first view until its columns are in
  // (live then finishes it), all of it after.
  function useDevice(k) {
    D = ALL[k];
    if (!D.sites) buildSites(D, depth);
    if (!D.catList) buildCats(D);
    if (colorSel) {
      colorSel.parentNode.style.display = D.cats && D.cats.length ? "" : "none";
      if (!(D.cats && D.cats.length)) { colorBy = "site"; colorSel.value = "site"; }
    }
    ex.dataset.device = D.device;
    $("oom-btn").style.display = D.oom >= 0 ? "" : "none";
    modeSel.querySelector('[value="steps"]').disabled = !(D.spans && D.spans.length);
    range.max = D.ops; pinned = -1; selSite = -1; $("pinned").innerHTML = "";
    fit(); view.x0 = 0; view.x1 = D.ops; offView = null;
    scrub = D.first.op;
    range.value = scrub;
    if (D.ready) { live(); return; }
    modeSel.querySelector('[value="time"]').disabled = true;
    if (mode !== "op") { mode = "op"; modeSel.value = "op"; }
    range.disabled = true;
    scrubTo.forEach(function (b) { b.disabled = true; });
    $("agg-note").textContent = "decoding " + commas(D.bands + D.aggregated) + " allocations…";
    label();
    drawPreview();
    drawMap(scrub);
  }
  // live makes the current device's view whole once its columns are in
  function live() {
    $("agg-note").textContent = D.aggregated ? "The " + commas(D.bands) + " largest allocations are drawn as bands; " + commas(D.aggregated) +
      " smaller ones are drawn together as the grey area at the bottom (the size limit, --html-max-bands)." : "";
    modeSel.querySelector('[value="time"]').disabled = !D.time;
    if ((mode === "time" && !D.time) || (mode === "steps" && !(D.spans && D.spans.length))) { mode = "op"; modeSel.value = "op"; }
    range.disabled = false;
    scrubTo.forEach(function (b) { b.disabled = false; });
    render();
    setScrub(scrub);
  }
  var devSel = $("device");
  if (ALL.length > 1) {
    devSel.innerHTML = ALL.map(function (d, i) { return "<option value=\"" + i + "\">device " + d.device + "</option>"; }).join("");
    devSel.parentNode.style.display = "";
    devSel.disabled = true;
    devSel.addEventListener("change", function () { useDevice(+devSel.value); });
  }
  window.addEventListener("resize", function () { if (D) { fit(); render(); drawMap(scrub); } });

  // attach takes a device's decoded columns from decodeDevices; the
  // explorer is ready (data-ready) once every device's are in.
  var decoded = 0, timing = [];
  // takeColumns gives device d its decoded columns (decodeDevices' data)
  function takeColumns(d, data) {
    for (var key in data) d[key] = data[key];
    d.keyLists = []; d.ready = true;
  }
  function attach(m) {
    if (m.error) { ex.dataset.error = m.error; return; }
    var d = ALL[m.k], t0 = performance.now();
    if (d.ready) return;
    takeColumns(d, m.data);
    if (d === D) live();
    timing.push("device " + d.device + ": inflate " + Math.round(m.inflateMs) + " decode " + Math.round(m.decodeMs) + " show " + Math.round(performance.now() - t0));
    if (++decoded < ALL.length) return;
    devSel.disabled = false;
    ex.dataset.timing = timing.join(", ");
    ex.dataset.readyAt = Math.round(performance.now());
    ex.dataset.ready = "true";
  }
  // decodeMessage is what decodeDevices is handed: the columns (bins, the
  // text of script explorer-bin) and of each device what places them
  function decodeMessage(all, bins) {
    return { bins: bins, devs: all.map(function (d) { return { cols: d.cols, bands: d.bands, ops: d.ops, aggregated: d.aggregated, unit: d.unit, keys: d.keys }; }) };
  }
  function startDecoding() {
    var msg = decodeMessage(ALL, $("explorer-bin").textContent);
    function inPage() { decodeDevices(msg, attach); }
    try {
      var src = "\"use strict\";\nvar decodeDevices = " + decodeDevices + ";\nonmessage = function (e) { decodeDevices(e.data, function (m, t) { postMessage(m, t); }); };";
      var w = new Worker(URL.createObjectURL(new Blob([src], { type: "text/javascript" })));
      w.onmessage = function (e) { attach(e.data); };
      w.onerror = function (e) { e.preventDefault(); w.terminate(); inPage(); }; // a browser without workers for local files
      w.postMessage(msg);
    } catch (e) { inPage(); }
  }
  try {
    useDevice(0);
    ex.dataset.startedAt = Math.round(started);
    ex.dataset.drawnAt = Math.round(performance.now()); // the bands and the map drawn: the page's first view
    // the worker starts after the first frame, which it would only delay
    // (a tab opened in the background draws none until it is shown), and
    // once the parser has read the columns, which end the page
    requestAnimationFrame(function () {
      setTimeout(function () {
        if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", startDecoding);
        else startDecoding();
      }, 0);
    });
  } catch (e) { ex.dataset.error = String(e); }
  // for checks and scripting: the state after k ops, and the view
  window.gpumemExplorer = { device: useDevice, scrub: setScrub, view: setView, pin: pin, render: render, preview: drawPreview,
    state: function (k) { return stateAt(D, k); }, data: function () { return D; } };
})();
