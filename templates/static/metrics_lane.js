"use strict";
// GPU-metrics lanes of the timeline (data: nsysan/report/metrics_view.py lanes). One lane per device,
// one row per series (SMs active, tensor active, DRAM bandwidth), each a bar per pixel column whose
// height is the mean of the samples in that column at the current zoom (zoomed in past the sampling
// period: the sample covering the column). Device-memory lanes (resources_view.py memory_lanes) use
// the same form: live memory sampled evenly, in % of its peak. Used by timeline.js, which owns the canvas.
window.nsysanMetricLanes = (function () {
  var COLORS = { sm_active: "#2f6fdf", tensor_active: "#8e44ad", dram: "#d97706", memory: "#0f766e" };
  function lanes(list) {
    return (list || []).map(function (m) {
      return { label: m.label, group: "metrics", n: m.n, rows: m.series.length, busy: 0, metric: m };
    });
  }
  function varints(b, n) {
    var out = new Float64Array(n), p = 0;
    for (var i = 0; i < n; i++) {
      var v = 0, mul = 1, c;
      do { c = b[p++]; v += (c & 127) * mul; mul *= 128; } while (c & 128);
      out[i] = v;
    }
    return out;
  }
  function decode(lane, inflate, bytes) {
    var m = lane.metric;
    return Promise.all([inflate(bytes(m.t))].concat(m.series.map(function (s) { return inflate(bytes(s.data)); })))
      .then(function (bufs) {
        var t = varints(new Uint8Array(bufs[0]), m.n), acc = m.first;
        for (var i = 0; i < m.n; i++) { acc += t[i]; t[i] = acc; }
        lane.t = t;
        lane.series = m.series.map(function (s, k) { return { key: s.key, label: s.label, v: new Uint8Array(bufs[k + 1]) }; });
      });
  }
  function lowerBound(arr, v) { var lo = 0, hi = arr.length; while (lo < hi) { var m = (lo + hi) >> 1; if (arr[m] < v) lo = m + 1; else hi = m; } return lo; }
  // the mean of series ``s`` over [ta, tb), or the sample covering it; -1 when none
  function valueAt(lane, s, ta, tb) {
    var t = lane.t, v = s.v, lo = lowerBound(t, ta), hi = lowerBound(t, tb), sum = 0, n = 0;
    for (var i = lo; i < hi; i++) { if (v[i] !== 255) { sum += v[i]; n++; } }
    if (n) return [sum / n, n];
    if (lo < t.length && t[lo] - lane.metric.period <= tb && v[lo] !== 255) return [v[lo], 0];
    return [-1, 0];
  }
  // Device memory zoomed in (less than 90% of the capture in view) is drawn on the scale of what is in
  // view, from its lowest to its highest value, and the lane says so: on % of the whole run's peak a
  // leak of 128 MiB a step is flat over three iterations.
  function draw(ctx, lane, W, view, LABEL, ROW, span) {
    if (!lane.t) return;
    var k = (view.b - view.a) / W, zoomed = span && (view.b - view.a) < 0.9 * span;
    lane.zoom = null;
    lane.series.forEach(function (s, r) {
      var y0 = lane.y + 2 + r * ROW, h = ROW - 2, vals = new Float32Array(W), lo = Infinity, hi = -Infinity;
      for (var px = 0; px < W; px++) {
        var got = valueAt(lane, s, view.a + px * k, view.a + (px + 1) * k);
        vals[px] = got[0];
        if (got[0] >= 0) { lo = Math.min(lo, got[0]); hi = Math.max(hi, got[0]); }
      }
      var rescale = s.key === "memory" && zoomed && hi > lo;
      if (s.key === "memory" && zoomed && hi >= lo) lane.zoom = [lo, hi];
      ctx.fillStyle = COLORS[s.key] || "#555";
      for (px = 0; px < W; px++) {
        var v = vals[px];
        if (v < 0) continue;
        var f = rescale ? 0.15 + 0.85 * (v - lo) / (hi - lo) : v / 100;
        var hh = Math.max(v > 0 ? 1 : 0, f * h);
        if (hh > 0) ctx.fillRect(LABEL + px, y0 + h - hh, 1, hh);
      }
      if (s.key === "memory" && zoomed && hi >= lo) {
        var note = "zoomed: " + (hi > lo ? lo.toFixed(0) + "\u2013" + hi.toFixed(0) : lo.toFixed(0)) + "% of peak" +
          (W > 420 ? " in view (whole capture: the trend)" : "");
        ctx.font = "10px system-ui, sans-serif";
        var tw = ctx.measureText(note).width, x = LABEL + Math.max(2, W - tw - 6);
        ctx.fillStyle = "rgba(127,127,127,0.25)"; ctx.fillRect(x - 3, y0, tw + 6, h);
        ctx.fillStyle = getComputedStyle(document.documentElement).getPropertyValue("--fg") || "#222";
        ctx.fillText(note, x, y0 + h - 2);
        ctx.font = "11px system-ui, sans-serif";
      }
    });
  }
  function hover(lane, row, ta, tb, fmt) {
    if (!lane.t) return null;
    var s = lane.series[Math.min(row, lane.series.length - 1)], got = valueAt(lane, s, ta, tb);
    if (got[0] < 0) return [s.label + ": not sampled here", lane.label];
    return [s.label + ": " + got[0].toFixed(1) + "% of peak", lane.label + (lane.zoom && s.key === "memory" ?
      " (zoomed: drawn from " + lane.zoom[0].toFixed(0) + "% to " + lane.zoom[1].toFixed(0) + "% of peak)" : ""),
      (got[1] ? "mean of " + got[1] + " sample" + (got[1] > 1 ? "s" : "") + " in this pixel column" :
        "the sample covering this time") + " \u00b7 one sample every " + fmt(lane.metric.period)];
  }
  return { lanes: lanes, decode: decode, draw: draw, hover: hover, colors: COLORS };
})();
