"use strict";
(function () {
  // Sortable tables: click a header; numbers sort by their data-k value.
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, col) {
      th.addEventListener("click", function () {
        var asc = !th.classList.contains("asc");
        table.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col], y = b.cells[col];
          var kx = x.dataset.k, ky = y.dataset.k, r;
          if (kx !== undefined && ky !== undefined) { r = parseFloat(kx) - parseFloat(ky); }
          else { r = x.textContent.localeCompare(y.textContent); }
          return asc ? r : -r;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });

  // Long tables: the first rows, the rest one click away (all rows stay in the page: print shows them).
  document.querySelectorAll("table.data.long").forEach(function (table) {
    var n = table.tBodies[0].rows.length, show = parseInt(table.dataset.show || "15", 10);
    table.classList.add("folded");
    var b = document.createElement("button");
    b.className = "more-rows"; b.type = "button";
    b.textContent = "Show all " + n + " rows";
    b.addEventListener("click", function () {
      var folded = table.classList.toggle("folded");
      b.textContent = folded ? "Show all " + n + " rows" : "Show the first " + show + " rows";
    });
    table.parentNode.insertAdjacentElement("afterend", b);
  });
  // Printing opens every folded part (evidence, capture tables, trace details).
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });

  // Timeline on a canvas: lanes of [start, end, kind, nameIndex(, depth)] relative to the capture start.
  var el = document.getElementById("tl-data"), canvas = document.getElementById("tl");
  if (!el || !canvas) { return; }
  var data = JSON.parse(el.textContent), tip = document.getElementById("tl-tip");
  var colors = ["#2f6fdf", "#e67e22", "#8e44ad", "#16a085", "#c0392b", "rgba(192,57,43,0.35)", "#7f8c8d", "#95a5a6"];
  var LANE = 18, LABEL = 170, ctx = canvas.getContext("2d");
  var lanes = data.lanes, span = Math.max(data.span, 1), view = { a: 0, b: span };
  canvas.height = Math.max(60, lanes.length * LANE + 24);
  function fmt(ns) {
    var a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + " ns"; if (a < 1e6) return (ns / 1e3).toFixed(1) + " us";
    if (a < 1e9) return (ns / 1e6).toFixed(2) + " ms"; return (ns / 1e9).toFixed(3) + " s";
  }
  function x(t, w) { return LABEL + (t - view.a) / (view.b - view.a) * (w - LABEL); }
  function draw() {
    var w = canvas.width = canvas.clientWidth * (window.devicePixelRatio || 1);
    var scale = w / canvas.clientWidth;
    canvas.height = (lanes.length * LANE + 24) * scale;
    ctx.setTransform(scale, 0, 0, scale, 0, 0); w = canvas.clientWidth;
    ctx.clearRect(0, 0, w, canvas.height); ctx.font = "11px system-ui, sans-serif";
    lanes.forEach(function (lane, i) {
      var y = i * LANE + 4;
      ctx.fillStyle = i % 2 ? "#f7f8fa" : "#fff"; ctx.fillRect(0, y - 2, w, LANE);
      ctx.fillStyle = "#333"; ctx.fillText(lane.label.slice(0, 28), 4, y + 11);
      if (lane.bins) {
        var bw = lane.bins.width;
        lane.bins.busy.forEach(function (f, j) {
          if (!f) return; var s = lane.bins.start + j * bw, e = s + bw;
          if (e < view.a || s > view.b) return;
          ctx.fillStyle = "rgba(47,111,223," + Math.max(0.15, f) + ")";
          ctx.fillRect(x(s, w), y, Math.max(1, x(e, w) - x(s, w)), LANE - 6);
        });
        return;
      }
      var last = -1;
      (lane.ops || []).forEach(function (op) {
        if (op[1] < view.a || op[0] > view.b) return;
        var x0 = Math.max(LABEL, x(op[0], w)), x1 = Math.min(w, x(op[1], w));
        if (x1 - x0 < 1 && Math.floor(x0) === last) return;  // merge sub-pixel ops
        last = Math.floor(x0);
        var d = op.length > 4 ? Math.min(op[4], 3) : 0;
        ctx.fillStyle = colors[op[2]] || "#555";
        ctx.fillRect(x0, y + d * 2, Math.max(1, x1 - x0), LANE - 6 - d * 2);
      });
    });
    ctx.fillStyle = "#333"; var ty = lanes.length * LANE + 18;
    for (var k = 0; k <= 5; k++) { var t = view.a + (view.b - view.a) * k / 5; ctx.fillText(fmt(t), x(t, w) - (k === 5 ? 50 : 0), ty); }
  }
  function hit(ev) {
    var r = canvas.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
    var lane = lanes[Math.floor((py - 2) / LANE)], w = canvas.clientWidth;
    if (!lane || px < LABEL || !lane.ops) return null;
    var t = view.a + (px - LABEL) / (w - LABEL) * (view.b - view.a), tol = (view.b - view.a) / (w - LABEL) * 2, best = null;
    lane.ops.forEach(function (op) { if (op[0] - tol <= t && t <= op[1] + tol && (!best || op[0] > best[0])) best = op; });
    return best ? { lane: lane, op: best, px: px, py: py } : null;
  }
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var r = canvas.getBoundingClientRect(), w = canvas.clientWidth, px = Math.max(LABEL, ev.clientX - r.left);
    var t = view.a + (px - LABEL) / (w - LABEL) * (view.b - view.a), f = ev.deltaY < 0 ? 0.8 : 1.25;
    var a = t - (t - view.a) * f, b = t + (view.b - t) * f;
    if (b - a < 100) return; view.a = Math.max(-span * 0.05, a); view.b = Math.min(span * 1.05, b); draw();
  }, { passive: false });
  var drag = null;
  canvas.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, a: view.a, b: view.b }; });
  window.addEventListener("mouseup", function () { drag = null; });
  canvas.addEventListener("mousemove", function (ev) {
    if (drag) {
      var dt = (ev.clientX - drag.x) / (canvas.clientWidth - LABEL) * (drag.b - drag.a);
      view.a = drag.a - dt; view.b = drag.b - dt; draw(); return;
    }
    var h = hit(ev);
    if (!h) { tip.hidden = true; return; }
    tip.hidden = false;
    tip.textContent = data.names[h.op[3]] + "  start " + fmt(h.op[0]) + "  dur " + fmt(h.op[1] - h.op[0]) + "  (" + h.lane.label + ")";
    tip.style.left = Math.min(h.px + 12, canvas.clientWidth - 300) + "px"; tip.style.top = (h.py + 12) + "px";
  });
  canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
  canvas.addEventListener("dblclick", function () { view.a = 0; view.b = span; draw(); });
  window.addEventListener("resize", draw);
  window.nsysanTimeline = { view: view, draw: draw, lanes: lanes };
  draw();
})();
