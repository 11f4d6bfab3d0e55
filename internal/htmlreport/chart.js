// What the pages' zoomable SVG charts share (the replay report and the
// diff): the hover read-out box, number formats, and zooming. Every
// svg.zoomable of a page shows the same stretch of operations: drag
// across one to zoom, double-click or a reset button to go back.
var gmChart = (function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var tip = document.getElementById("tip");
  var units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function bytes(n) {
    if (n === null) return "n/a";
    var v = Math.abs(n), u = 0;
    if (v < 1024) return n + " B";
    while (v >= 1024 - 0.005 && u < units.length - 1) { v /= 1024; u++; }
    return (n < 0 ? "-" : "") + v.toFixed(2) + " " + units[u];
  }
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return "&#" + c.charCodeAt(0) + ";"; }); }
  function commas(n) { return String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  function show(html, e) {
    tip.innerHTML = html;
    tip.style.display = "block";
    var x = e.clientX + 14, y = e.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth) x = Math.max(0, e.clientX - tip.offsetWidth - 14);
    if (y + tip.offsetHeight > window.innerHeight) y = Math.max(0, e.clientY - tip.offsetHeight - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function hide() { tip.style.display = "none"; }
  function nice(raw) {
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var ms = p >= 10 ? [1, 2, 2.5, 5, 10] : [1, 2, 5, 10];
    for (var i = 0; i < ms.length; i++) if (ms[i] * p >= raw * (1 - 1e-9)) return Math.max(ms[i] * p, 1);
    return Math.max(10 * p, 1);
  }

  // zoomable drives the page's charts over operations x0 to x1;
  // readout(x, e) shows the read-out for the pointer at x and returns
  // where the crosshair goes.
  function zoomable(x0, x1, readout) {
    var charts = Array.prototype.slice.call(document.querySelectorAll("svg.zoomable"));
    var z0 = x0, z1 = x1;
    function layout() {
      charts.forEach(function (c) {
        var px = +c.dataset.plotX, pw = +c.dataset.plotW, top = +c.dataset.plotY, h = +c.dataset.plotH;
        var pos = function (op) { return px + (op - z0) / (z1 - z0) * pw; };
        c.querySelector("svg.plot").setAttribute("viewBox", z0 + " 0 " + (z1 - z0) + " 1000");
        c.querySelectorAll("[data-op]").forEach(function (el) {
          var op = +el.dataset.op;
          el.setAttribute("transform", "translate(" + pos(op).toFixed(1) + " 0)");
          el.style.display = op < z0 || op > z1 ? "none" : "";
        });
        var g = c.querySelector("g.xticks");
        while (g.firstChild) g.removeChild(g.firstChild);
        var step = nice((z1 - z0) / 8);
        for (var v = Math.ceil(z0 / step) * step; v <= z1; v += step) {
          var t = document.createElementNS(NS, "g");
          t.setAttribute("transform", "translate(" + pos(v).toFixed(1) + " 0)");
          var l = document.createElementNS(NS, "line");
          l.setAttribute("y1", top + h); l.setAttribute("y2", top + h + 5);
          var s = document.createElementNS(NS, "text");
          s.setAttribute("y", top + h + 18); s.setAttribute("text-anchor", "middle");
          s.textContent = commas(v);
          t.appendChild(l); t.appendChild(s); g.appendChild(t);
        }
      });
    }
    function opAt(c, e) {
      var r = c.querySelector("rect.overlay").getBoundingClientRect();
      var f = Math.min(Math.max((e.clientX - r.left) / r.width, 0), 1);
      return z0 + f * (z1 - z0);
    }
    function cross(op) {
      charts.forEach(function (c) {
        var l = c.querySelector("line.cross");
        if (op === null) { l.style.display = "none"; return; }
        var x = +c.dataset.plotX + (op - z0) / (z1 - z0) * +c.dataset.plotW;
        l.setAttribute("transform", "translate(" + x.toFixed(1) + " 0)");
        l.style.display = "";
      });
    }
    var drag = null;
    charts.forEach(function (c) {
      var ov = c.querySelector("rect.overlay"), sel = c.querySelector("rect.sel");
      ov.addEventListener("mousemove", function (e) {
        cross(readout(opAt(c, e), e));
        if (drag && drag.c === c) {
          var r = ov.getBoundingClientRect(), k = +c.dataset.plotW / r.width;
          var a = Math.min(drag.x, e.clientX), b = Math.max(drag.x, e.clientX);
          sel.setAttribute("x", (+c.dataset.plotX + (a - r.left) * k).toFixed(1));
          sel.setAttribute("width", ((b - a) * k).toFixed(1));
          sel.style.display = "";
        }
      });
      ov.addEventListener("mouseleave", function () { hide(); cross(null); });
      ov.addEventListener("mousedown", function (e) { e.preventDefault(); drag = { c: c, x: e.clientX, op: opAt(c, e) }; });
      ov.addEventListener("dblclick", reset);
    });
    window.addEventListener("mouseup", function (e) {
      if (!drag) return;
      var d = drag, a = d.op, b = opAt(d.c, e);
      drag = null;
      d.c.querySelector("rect.sel").style.display = "none";
      if (Math.abs(e.clientX - d.x) < 5) return;
      z0 = Math.floor(Math.min(a, b)); z1 = Math.max(Math.ceil(Math.max(a, b)), z0 + 1);
      layout();
    });
    function reset() { z0 = x0; z1 = x1; layout(); }
    document.querySelectorAll("button.reset").forEach(function (b) { b.addEventListener("click", reset); });
  }

  return { bytes: bytes, esc: esc, commas: commas, show: show, hide: hide, zoomable: zoomable, nice: nice };
})();
