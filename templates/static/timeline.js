"use strict";
// The canvas timeline (data built by nsysan/report/timeline.py): one lane per GPU stream, idle-gap
// device, NVTX thread and CUDA API thread. Every op is shipped (deflated varint columns) and drawn:
// an op at least 2 px wide is a rectangle; where smaller ops share a pixel column the column's
// height is the fraction of it they cover, so a 5%-busy lane never looks solid. Trace strings are
// drawn on the canvas or set as textContent, never parsed as HTML.
(function () {
  var el = document.getElementById("tl-data"), canvas = document.getElementById("tl");
  if (!el || !canvas) { return; }
  var data = JSON.parse(el.textContent), tip = document.getElementById("tl-tip"), wrap = document.getElementById("tl-wrap");
  var KIND_NAMES = ["kernel", "copy H2D", "memset", "CUDA Graph", "copy D2H", "GPU idle", "NVTX range",
    "CUDA API call", "communication", "copy"];
  var COLORS = ["#2f6fdf", "#0f9d58", "#8e44ad", "#16a085", "#c0392b", "#e8a0a0", "#7f8c8d", "#9aa5b1", "#d97706", "#27ae60"];
  // the lane labels' column: 270 px on a wide screen, under a third of a narrow one (set at each draw)
  var LABEL = 270, ROW = 14, PAD = 4, AXIS = 24;
  function labelWidth() { return Math.round(Math.max(96, Math.min(270, canvas.clientWidth * 0.3))); }
  var span = Math.max(data.span, 1), names = data.names;
  var view = { a: data.initial[0], b: Math.max(data.initial[1], data.initial[0] + 100) };
  var state = { highlight: null, query: "", matchName: null, matches: [], cur: -1, ready: false, error: "" };
  var lanes = data.lanes.map(function (l) {
    return { label: l.label, group: l.group, n: l.n, rows: Math.max(1, l.rows), busy: l.busy, data: l.data };
  });
  var ML = window.nsysanMetricLanes;  // GPU-metrics lanes (metrics_lane.js), below the others
  if (ML && data.metrics) lanes = lanes.concat(ML.lanes(data.metrics));
  var y = AXIS;
  lanes.forEach(function (l) { l.y = y; l.h = l.rows * ROW + PAD; y += l.h; });
  var totalH = y + 4, ctx = canvas.getContext("2d");
  // colours from the page's theme (light or dark: report.css), read at each draw
  function theme() {
    var cs = getComputedStyle(document.documentElement);
    function v(name, dflt) { return (cs.getPropertyValue(name) || "").trim() || dflt; }
    return { bg: v("--bg", "#fff"), alt: v("--panel", "#f7f8fa"), fg: v("--fg", "#222"), rule: v("--rule", "#e3e6ea") };
  }

  // ---- toolbar and styles (made here: the template only holds the canvas) ----
  var css = document.createElement("style");
  css.textContent = ".tlx-bar{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin:.4em 0;font-size:13px}" +
    ".tlx-bar button{font:inherit;padding:2px 8px;border:1px solid var(--line,#b8c0cc);border-radius:4px;background:var(--panel2,#f5f7fa);color:var(--fg,#222);cursor:pointer}" +
    ".tlx-bar button.on{background:#2f6fdf;color:#fff;border-color:#2f6fdf}.tlx-bar input{font:inherit;padding:2px 6px;width:16em;max-width:100%;background:var(--bg,#fff);color:var(--fg,#222);border:1px solid var(--line,#b8c0cc)}" +
    ".tlx-win{color:var(--muted,#555);margin-left:auto}.tlx-count{color:var(--muted,#555);min-width:7em}" +
    "[data-t0]{cursor:pointer}[data-t0]:hover{background:rgba(245,179,1,.25)}[data-t0] td:first-child::before{content:\"\\23F5  \";color:#2f6fdf}";
  document.head.appendChild(css);
  var bar = document.createElement("div");
  bar.className = "tlx-bar";
  function button(text, title, fn) {
    var b = document.createElement("button"); b.type = "button"; b.textContent = text; b.title = title;
    b.addEventListener("click", fn); bar.appendChild(b); return b;
  }
  var bInit = button(data.initial_label, "the view the timeline opened on", function () { zoomTo(data.initial[0], data.initial[1]); });
  var bSteady = button("steady state", "the steady window the findings judge: " + data.steady_label,
    function () { zoomTo(data.steady[0], data.steady[1]); });
  var bAll = button("whole capture", "from the capture start to its end", function () { zoomTo(0, span); });
  var search = document.createElement("input");
  search.type = "search"; search.placeholder = "search op names"; search.setAttribute("aria-label", "search op names");
  bar.appendChild(search);
  var bPrev = button("\u25C0", "previous match", function () { step(-1); });
  var bNext = button("\u25B6", "next match", function () { step(1); });
  var count = document.createElement("span"); count.className = "tlx-count"; bar.appendChild(count);
  var winText = document.createElement("span"); winText.className = "tlx-win"; bar.appendChild(winText);
  wrap.parentNode.insertBefore(bar, wrap);
  bPrev.disabled = bNext.disabled = true;

  // ---- decoding ----
  function bytes(b64) {
    var bin = atob(b64), n = bin.length, u = new Uint8Array(n);
    for (var i = 0; i < n; i++) { u[i] = bin.charCodeAt(i); }
    return u;
  }
  function inflate(u8) {
    var ds = new DecompressionStream("deflate");
    return new Response(new Blob([u8]).stream().pipeThrough(ds)).arrayBuffer();
  }
  function decode(lane, buf) {
    var b = new Uint8Array(buf), p = 0, n = lane.n;
    function col(arr) {
      for (var i = 0; i < n; i++) {
        var v = 0, mul = 1, c;
        do { c = b[p++]; v += (c & 127) * mul; mul *= 128; } while (c & 128);
        arr[i] = v;
      }
    }
    var s = new Float64Array(n), e = new Float64Array(n), nm = new Int32Array(n), kd = new Uint8Array(n), dp = new Uint16Array(n);
    col(s); col(e); col(nm); col(kd); col(dp);
    var pend = new Float64Array(n), acc = 0, mx = -Infinity;
    for (var i = 0; i < n; i++) { acc += s[i]; s[i] = acc; e[i] = acc + e[i]; mx = Math.max(mx, e[i]); pend[i] = mx; }
    lane.s = s; lane.e = e; lane.name = nm; lane.kind = kd; lane.depth = dp; lane.pend = pend;
    delete lane.data;
  }
  var ready = (typeof DecompressionStream === "undefined")
    ? Promise.reject(new Error("this browser cannot inflate the timeline (it needs DecompressionStream: " +
        "Chrome 80, Firefox 113, Safari 16.4 or later)"))
    : Promise.all(lanes.map(function (l) {
      return l.metric ? ML.decode(l, inflate, bytes) : inflate(bytes(l.data)).then(function (buf) { decode(l, buf); });
    }));
  ready = ready.then(function () { state.ready = true; draw(); return true; }, function (err) {
    state.error = String(err && err.message || err); draw(); return false;
  });

  // ---- helpers ----
  function lowerBound(arr, v, n) { var lo = 0, hi = n; while (lo < hi) { var m = (lo + hi) >> 1; if (arr[m] < v) lo = m + 1; else hi = m; } return lo; }
  function upperBound(arr, v, n) { var lo = 0, hi = n; while (lo < hi) { var m = (lo + hi) >> 1; if (arr[m] <= v) lo = m + 1; else hi = m; } return lo; }
  function fmt(ns) {
    var a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + " ns"; if (a < 1e6) return (ns / 1e3).toFixed(a < 1e4 ? 2 : 1) + " us";
    if (a < 1e9) return (ns / 1e6).toFixed(a < 1e7 ? 3 : 2) + " ms"; return (ns / 1e9).toFixed(4) + " s";
  }
  function plotW() { return Math.max(10, Math.floor(canvas.clientWidth - LABEL)); }
  function xOf(t) { return LABEL + (t - view.a) / (view.b - view.a) * plotW(); }
  function clampView() {
    var w = view.b - view.a;
    if (w < 50) { var m = (view.a + view.b) / 2; view.a = m - 25; view.b = m + 25; w = 50; }
    if (w > span * 1.1) { view.a = -span * 0.05; view.b = span * 1.05; return; }
    if (view.a < -span * 0.05) { view.b += -span * 0.05 - view.a; view.a = -span * 0.05; }
    if (view.b > span * 1.05) { view.a -= view.b - span * 1.05; view.b = span * 1.05; }
  }
  function zoomTo(a, b, hl) {
    view.a = a; view.b = Math.max(b, a + 50); clampView();
    if (hl !== undefined) state.highlight = hl;
    draw();
  }
  function ellipsize(text, w) {
    if (ctx.measureText(text).width <= w) return text;
    var lo = 0, hi = text.length;
    while (lo < hi) { var m = (lo + hi + 1) >> 1; if (ctx.measureText(text.slice(0, m) + "\u2026").width <= w) lo = m; else hi = m - 1; }
    return text.slice(0, lo) + "\u2026";
  }

  // ---- drawing ----
  var cov = new Float32Array(0), cnt = new Int32Array(0), best = new Float32Array(0), col = new Uint8Array(0), hit = new Uint8Array(0);
  function scratch(w) {
    if (cov.length < w) { cov = new Float32Array(w); cnt = new Int32Array(w); best = new Float32Array(w); col = new Uint8Array(w); hit = new Uint8Array(w); }
  }
  function drawLane(lane, W) {
    if (lane.metric) { ML.draw(ctx, lane, W, view, LABEL, ROW, span); return; }
    var n = lane.n, s = lane.s, e = lane.e, kd = lane.kind, dp = lane.depth, nm = lane.name, mn = state.matchName;
    var k = W / (view.b - view.a), i0 = lowerBound(lane.pend, view.a, n), i1 = upperBound(s, view.b, n);
    var curOp = state.cur >= 0 ? state.matches[state.cur] : null;
    for (var r = 0; r < lane.rows; r++) {
      var y0 = lane.y + 2 + r * ROW, h = ROW - 2;
      scratch(W); cov.fill(0, 0, W); cnt.fill(0, 0, W); best.fill(0, 0, W); hit.fill(0, 0, W);
      var labels = [];
      for (var i = i0; i < i1; i++) {
        if (dp[i] !== r || e[i] < view.a) continue;
        var x0 = (s[i] - view.a) * k, x1 = (e[i] - view.a) * k, m = mn !== null && mn[nm[i]] === 1;
        if (x1 - x0 >= 2) {  // an op of its own
          var a0 = Math.max(x0, -2), a1 = Math.min(x1, W + 2);
          ctx.fillStyle = COLORS[kd[i]] || "#555";
          ctx.fillRect(LABEL + a0, y0, a1 - a0, h);
          if (m) { ctx.strokeStyle = "#f5b301"; ctx.lineWidth = 2; ctx.strokeRect(LABEL + a0 + 1, y0 + 1, a1 - a0 - 2, h - 2); }
          if (curOp && curOp[0] === lane && curOp[1] === i) { ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.strokeRect(LABEL + a0, y0 - 1, a1 - a0, h + 2); }
          if (a1 - a0 > 40) labels.push([a0, a1, i]);
          continue;
        }
        var b0 = x0 < 0 ? 0 : x0, b1 = x1 > W ? W : x1;
        if (b1 < b0) continue;
        var p0 = Math.min(W - 1, Math.floor(b0)), p1 = Math.min(W - 1, Math.floor(b1)), c = b1 - b0;
        if (p0 === p1) { cov[p0] += c; } else { cov[p0] += p0 + 1 - b0; cov[p1] += b1 - p1; for (var p = p0 + 1; p < p1; p++) cov[p] += 1; }
        for (var q = p0; q <= p1; q++) {
          cnt[q]++; if (c >= best[q]) { best[q] = c; col[q] = kd[i]; }
          if (m) hit[q] = 1;
          if (curOp && curOp[0] === lane && curOp[1] === i) hit[q] = 2;
        }
      }
      // pixel columns shared by small ops: height = covered fraction (at least 1 px: every op shows)
      var last = -1;
      for (var px = 0; px < W; px++) {
        if (!cnt[px]) continue;
        var f = cov[px] > 1 ? 1 : cov[px], hh = Math.max(1, f * h);
        if (col[px] !== last) { ctx.fillStyle = COLORS[col[px]] || "#555"; last = col[px]; }
        ctx.fillRect(LABEL + px, y0 + h - hh, 1, hh);
      }
      for (px = 0; px < W; px++) {
        if (!hit[px]) continue;
        ctx.fillStyle = hit[px] === 2 ? "#000" : "#f5b301"; ctx.fillRect(LABEL + px - 1, y0 - 2, 3, 3); last = -1;
      }
      ctx.fillStyle = "#fff";
      labels.forEach(function (lb) {
        var t = names[nm[lb[2]]] || "";
        ctx.save(); ctx.beginPath(); ctx.rect(LABEL + lb[0], y0, lb[1] - lb[0], h); ctx.clip();
        ctx.fillText(ellipsize(t, lb[1] - lb[0] - 6), LABEL + Math.max(lb[0], 0) + 3, y0 + h - 3);
        ctx.restore();
      });
    }
  }
  function niceStep(w, px) {
    // a tick every 110 px, every 80 on a phone
    var raw = w / Math.max(1, px / (px < 500 ? 80 : 110)), p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }
  function tickLabel(t, stepNs) {
    var u = stepNs < 1e3 ? [1, "ns"] : stepNs < 1e6 ? [1e3, "us"] : stepNs < 1e9 ? [1e6, "ms"] : [1e9, "s"];
    var dec = Math.max(0, Math.ceil(-Math.log10(stepNs / u[0]) + 1e-9));
    return (t / u[0]).toFixed(Math.min(dec, 6)) + " " + u[1];
  }
  function draw() {
    var dpr = window.devicePixelRatio || 1, cw = canvas.clientWidth;
    LABEL = labelWidth();
    canvas.width = Math.round(cw * dpr); canvas.height = Math.round(totalH * dpr);
    canvas.style.height = totalH + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    var W = plotW();
    var th = theme();
    ctx.clearRect(0, 0, cw, totalH); ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "alphabetic";
    ctx.fillStyle = th.bg; ctx.fillRect(0, 0, cw, AXIS);
    lanes.forEach(function (lane, i) {
      ctx.fillStyle = i % 2 ? th.alt : th.bg; ctx.fillRect(0, lane.y, cw, lane.h);
    });
    // the steady window, faintly
    var sx0 = Math.max(LABEL, xOf(data.steady[0])), sx1 = Math.min(cw, xOf(data.steady[1]));
    if (sx1 > sx0) { ctx.fillStyle = "rgba(47,111,223,0.05)"; ctx.fillRect(sx0, AXIS - 4, sx1 - sx0, 4); }
    // axis with round ticks
    var stepNs = niceStep(view.b - view.a, W);
    ctx.fillStyle = th.fg; ctx.strokeStyle = th.rule; ctx.lineWidth = 1;
    // far from 0 at a fine step, ticks count from a round base shown at the left ("3.8776 s +")
    var base = Math.abs(view.a) / stepNs > 1000 ? Math.floor(view.a / (stepNs * 10)) * stepNs * 10 : 0;
    if (base) {
      var u = Math.abs(base) >= 1e9 ? [1e9, "s"] : Math.abs(base) >= 1e6 ? [1e6, "ms"] : [1e3, "us"];
      var dec = Math.max(0, Math.min(9, Math.ceil(Math.log10(u[0] / (stepNs * 10)) - 1e-9)));
      var bt = "time: " + (base / u[0]).toFixed(dec) + " " + u[1] + " +";
      ctx.fillText(bt, 4, 12);
    }
    var lastRight = base ? 4 + ctx.measureText(bt).width : 0;
    for (var t = Math.ceil(view.a / stepNs) * stepNs; t <= view.b; t += stepNs) {
      var tx = Math.round(xOf(t)) + 0.5;
      if (tx < LABEL) continue;
      ctx.beginPath(); ctx.moveTo(tx, AXIS - 6); ctx.lineTo(tx, totalH); ctx.stroke();
      var tl = (base ? "+" : "") + tickLabel(t - base, stepNs), tw = ctx.measureText(tl).width;
      // a label that would run past the right edge goes left of its tick; one that would then touch
      // its neighbour is left out (the tick stays): never clipped, never overlapping
      var lx = tx + 3 + tw > cw - 2 ? tx - 3 - tw : tx + 3;
      if (lx < lastRight + 6) continue;
      ctx.fillText(tl, lx, 12); lastRight = lx + tw;
    }
    ctx.save(); ctx.beginPath(); ctx.rect(LABEL, 0, W, totalH); ctx.clip();
    if (state.ready) lanes.forEach(function (lane) { drawLane(lane, W); });
    if (state.highlight) {
      var h0 = xOf(state.highlight[0]), h1 = xOf(state.highlight[1]);
      ctx.fillStyle = "rgba(245,179,1,0.22)"; ctx.fillRect(h0, AXIS, Math.max(2, h1 - h0), totalH - AXIS);
      ctx.strokeStyle = "#d48c00"; ctx.lineWidth = 1.5;
      ctx.beginPath(); ctx.moveTo(h0, AXIS); ctx.lineTo(h0, totalH); ctx.moveTo(h1, AXIS); ctx.lineTo(h1, totalH); ctx.stroke();
    }
    ctx.restore();
    // lane labels over a white column
    ctx.fillStyle = th.bg; ctx.fillRect(0, AXIS, LABEL - 2, totalH - AXIS);
    lanes.forEach(function (lane, i) {
      ctx.fillStyle = i % 2 ? th.alt : th.bg; ctx.fillRect(0, lane.y, LABEL - 2, lane.h);
      ctx.fillStyle = th.fg; ctx.fillText(ellipsize(lane.label, LABEL - 10), 4, lane.y + 12);
    });
    if (!state.ready) { ctx.fillStyle = "#a00"; ctx.fillText(state.error || "decoding the timeline\u2026", LABEL + 6, AXIS + 12); }
    winText.textContent = "showing " + fmt(view.a) + " \u2013 " + fmt(view.b) + " (" + fmt(view.b - view.a) + ")";
    var near = function (a, b) { return Math.abs(view.a - a) + Math.abs(view.b - b) < (view.b - view.a) * 1e-6 + 1; };
    bInit.classList.toggle("on", near(data.initial[0], data.initial[1]));
    bSteady.classList.toggle("on", near(data.steady[0], data.steady[1]));
    bAll.classList.toggle("on", near(0, span));
  }

  // ---- search ----
  function runSearch(text) {
    state.query = text; state.matches = []; state.cur = -1; state.matchName = null;
    var q = text.toLowerCase();
    if (q && state.ready) {
      var mn = new Uint8Array(names.length);
      for (var j = 0; j < names.length; j++) { if (names[j].toLowerCase().indexOf(q) >= 0) mn[j] = 1; }
      state.matchName = mn;
      lanes.forEach(function (lane) { for (var i = 0; i < lane.n && lane.name; i++) { if (mn[lane.name[i]]) state.matches.push([lane, i]); } });
      state.matches.sort(function (x, y) { return x[0].s[x[1]] - y[0].s[y[1]]; });
    }
    count.textContent = q ? state.matches.length.toLocaleString() + " match" + (state.matches.length === 1 ? "" : "es") : "";
    bPrev.disabled = bNext.disabled = state.matches.length === 0;
    draw();
    return state.matches.length;
  }
  function step(d) {
    var m = state.matches;
    if (!m.length) return;
    if (state.cur < 0) {  // the first match at or after the view's middle
      var mid = (view.a + view.b) / 2, j = 0;
      while (j < m.length && m[j][0].s[m[j][1]] < mid) j++;
      state.cur = d > 0 ? j % m.length : (j - 1 + m.length) % m.length;
    } else state.cur = (state.cur + d + m.length) % m.length;
    var lane = m[state.cur][0], i = m[state.cur][1], w = Math.max(lane.e[i] - lane.s[i], 1000) * 8;
    count.textContent = (state.cur + 1).toLocaleString() + " of " + m.length.toLocaleString();
    zoomTo(lane.s[i] - w / 2, lane.e[i] + w / 2);
  }
  search.addEventListener("input", function () { runSearch(search.value); });
  search.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { ev.preventDefault(); step(ev.shiftKey ? -1 : 1); } });

  // ---- hover, zoom, pan ----
  function at(ev) {
    var r = canvas.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top, lane = null;
    for (var i = 0; i < lanes.length; i++) { if (py >= lanes[i].y && py < lanes[i].y + lanes[i].h) { lane = lanes[i]; break; } }
    return { px: px, py: py, lane: lane };
  }
  function hover(ev) {
    var h = at(ev), lane = h.lane;
    if (!lane) return null;
    if (h.px < LABEL) return [lane.label, lane.metric ? lane.n.toLocaleString() + " samples: " + lane.metric.series.map(function (s) { return s.label; }).join(", ") + " (% of peak)"
      : lane.n.toLocaleString() + " ops, busy " + (lane.busy * 100).toFixed(2) + "% of the capture"];
    if (!state.ready) return null;
    var row = Math.min(lane.rows - 1, Math.max(0, Math.floor((h.py - lane.y - 2) / ROW)));
    var nsPerPx = (view.b - view.a) / plotW(), t = view.a + (h.px - LABEL) * nsPerPx, tol = nsPerPx * 1.5;
    if (lane.metric) return ML.hover(lane, row, t, t + nsPerPx, fmt);
    var hi = upperBound(lane.s, t + tol, lane.n), lo = lowerBound(lane.pend, t - tol, lane.n), pick = -1, n = 0, busy = 0;
    for (var i = hi - 1; i >= lo; i--) {
      if (lane.depth[i] !== row || lane.e[i] < t - tol) continue;
      n++; busy += Math.min(lane.e[i], t + tol) - Math.max(lane.s[i], t - tol);
      if (pick < 0 || (lane.s[i] <= t && lane.e[i] >= t && !(lane.s[pick] <= t && lane.e[pick] >= t))) pick = i;
    }
    if (pick < 0) return null;
    var lines = [names[lane.name[pick]] || "",
      KIND_NAMES[lane.kind[pick]] + " \u00b7 " + lane.label,
      "start " + fmt(lane.s[pick]) + " \u00b7 duration " + fmt(lane.e[pick] - lane.s[pick])];
    if (n > 1) lines.push(n + " ops within this pixel column, busy " + Math.min(100, busy / (2 * tol) * 100).toFixed(0) + "%");
    return lines;
  }
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var r = canvas.getBoundingClientRect(), px = Math.max(LABEL, ev.clientX - r.left);
    var t = view.a + (px - LABEL) / plotW() * (view.b - view.a), f = Math.pow(1.0015, ev.deltaY);
    view.a = t - (t - view.a) * f; view.b = t + (view.b - t) * f; clampView(); draw();
  }, { passive: false });
  var drag = null;
  canvas.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, a: view.a, b: view.b }; });
  window.addEventListener("mouseup", function () { drag = null; });
  canvas.addEventListener("mousemove", function (ev) {
    if (drag) {
      var dt = (ev.clientX - drag.x) / plotW() * (drag.b - drag.a);
      view.a = drag.a - dt; view.b = drag.b - dt; clampView(); draw(); tip.hidden = true; return;
    }
    var lines = hover(ev);
    if (!lines) { tip.hidden = true; return; }
    tip.hidden = false; tip.style.whiteSpace = "pre-wrap";
    tip.textContent = lines.join("\n");
    var h = at(ev);
    tip.style.left = Math.max(0, Math.min(h.px + 12, canvas.clientWidth - 420)) + "px"; tip.style.top = (h.py + 14) + "px";
  });
  canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
  // touch screens: one finger drags the view sideways (the page still scrolls up and down), two pinch
  var touches = {}, pinch = null;
  canvas.style.touchAction = "pan-y";
  function touchList() { return Object.keys(touches).map(function (k) { return touches[k]; }); }
  function pinchStart() {
    var p = touchList();
    if (p.length === 1) pinch = { x: p[0].x, a: view.a, b: view.b };
    else if (p.length === 2) {
      var r = canvas.getBoundingClientRect(), mid = (p[0].x + p[1].x) / 2 - r.left;
      pinch = { d: Math.max(8, Math.abs(p[0].x - p[1].x)), a: view.a, b: view.b,
        t: view.a + (Math.max(LABEL, mid) - LABEL) / plotW() * (view.b - view.a) };
    } else pinch = null;
  }
  canvas.addEventListener("pointerdown", function (ev) {
    if (ev.pointerType !== "touch") return;
    touches[ev.pointerId] = { x: ev.clientX }; pinchStart();
  });
  canvas.addEventListener("pointermove", function (ev) {
    if (ev.pointerType !== "touch" || !touches[ev.pointerId] || !pinch) return;
    touches[ev.pointerId].x = ev.clientX;
    var p = touchList();
    if (p.length === 1 && pinch.x !== undefined) {
      var dt = (p[0].x - pinch.x) / plotW() * (pinch.b - pinch.a);
      view.a = pinch.a - dt; view.b = pinch.b - dt;
    } else if (p.length === 2 && pinch.d !== undefined) {
      var f = pinch.d / Math.max(8, Math.abs(p[0].x - p[1].x));
      view.a = pinch.t - (pinch.t - pinch.a) * f; view.b = pinch.t + (pinch.b - pinch.t) * f;
    } else return;
    clampView(); draw(); tip.hidden = true;
  });
  function touchEnd(ev) { if (ev.pointerType === "touch") { delete touches[ev.pointerId]; pinchStart(); } }
  canvas.addEventListener("pointerup", touchEnd);
  canvas.addEventListener("pointercancel", touchEnd);
  var hint = document.getElementById("tl-hint");
  if (hint && window.matchMedia && window.matchMedia("(pointer: coarse)").matches) {
    hint.textContent = "Pinch to zoom, drag sideways to pan, tap for details, double-tap to reset; " +
      "the buttons above show the steady state or the whole capture. Times are relative to the capture start.";
  }
  canvas.addEventListener("dblclick", function () { zoomTo(data.initial[0], data.initial[1], null); });
  window.addEventListener("resize", draw);

  // ---- evidence rows of the findings: click to see them on the timeline ----
  document.querySelectorAll("[data-t0]").forEach(function (row) {
    row.title = "show on the timeline";
    row.addEventListener("click", function () {
      var t0 = parseFloat(row.getAttribute("data-t0")), t1 = parseFloat(row.getAttribute("data-t1"));
      if (!isFinite(t0)) return;
      if (!isFinite(t1) || t1 < t0) t1 = t0;
      var w = Math.max(t1 - t0, 20000), m = w * 0.6;
      var nav = document.querySelector("nav");  // a sticky header would cover the toolbar
      bar.style.scrollMarginTop = ((nav ? nav.getBoundingClientRect().height : 0) + 8) + "px";
      bar.scrollIntoView({ block: "start" });
      zoomTo(t0 - m, t0 + w + m, [t0, t1]);
    });
  });

  window.nsysanTimeline = {
    view: view, draw: draw, lanes: lanes, names: names, data: data, ready: ready, zoomTo: zoomTo,
    search: function (text) { search.value = text; return runSearch(text); }, next: function () { step(1); },
    prev: function () { step(-1); }, state: state, geometry: function () { return { label: LABEL, plotW: Math.floor(canvas.clientWidth - LABEL), row: ROW }; }
  };
  draw();
})();
