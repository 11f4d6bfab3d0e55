// decode_explorer.js PAGE [EVERY]: reads a report page's explorer data as
// the page does, with explorer.js's own functions, and prints what they
// decode as JSON, one object per device (TestExplorerDecodedByPage reads
// it): the bands' columns, each op's change to the block list (its blocks
// as the page shows them: address, size, state, first of its segment,
// segment size, band or -1), the key lists, and the whole list after
// every EVERY-th op and the last.
"use strict";
const fs = require("fs");
const path = require("path");
const ex = require(path.join(__dirname, "..", "explorer.js"));

const page = fs.readFileSync(process.argv[2], "utf8");
const every = Number(process.argv[3] || 1);
// a script element's text, as the page's textContent reads it
function script(id) {
  const m = page.match(new RegExp('<script type="application/json" id="' + id + '">([\\s\\S]*?)</script>'));
  if (!m) throw new Error("no script " + id);
  return m[1];
}
const all = JSON.parse(script("explorer-data"));
const msg = ex.decodeMessage(all, script("explorer-bin"));
const arr = (a) => (a ? Array.from(a) : null);
// a block as the page shows it, its "first" a number
const blocks = (bs) => bs.map((b) => [b[0], b[1], b[2], b[3] ? 1 : 0, b[4], b[5]]);

let decoded = 0;
ex.decodeDevices(msg, (m) => {
  if (m.error) throw new Error(m.error);
  const d = all[m.k];
  ex.takeColumns(d, m.data);
  const out = {
    device: d.device, unit: d.unit, ops: d.ops, bands: d.bands,
    start: arr(d.start), end: arr(d.end), rel: arr(d.rel), size: arr(d.size), addr: arr(d.addr),
    stream: arr(d.stream), stack: arr(d.stack), cat: arr(d.cat), time: arr(d.time), agg: arr(d.agg),
    keys: d.keys, keyLists: d.keys.map((_, j) => blocks(ex.keyList(d, j))),
    pos: arr(d.pos), del: arr(d.del), ins: [], states: {},
  };
  for (let op = 0; op < d.ops; op++) {
    const n = d.insAt[op + 1] - d.insAt[op];
    out.ins.push(blocks(ex.stateAt(d, op + 1).slice(d.pos[op], d.pos[op] + n)));
  }
  for (let k = 0; k <= d.ops; k++) {
    if (k % every === 0 || k === d.ops) out.states[k] = blocks(ex.stateAt(d, k));
  }
  process.stdout.write(JSON.stringify(out) + "\n");
  if (++decoded === all.length) process.exitCode = 0;
});
process.exitCode = 1; // until every device is decoded
