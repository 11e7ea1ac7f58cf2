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
  function draw(ctx, lane, W, view, LABEL, ROW) {
    if (!lane.t) return;
    var k = (view.b - view.a) / W;
    lane.series.forEach(function (s, r) {
      var y0 = lane.y + 2 + r * ROW, h = ROW - 2;
      ctx.fillStyle = COLORS[s.key] || "#555";
      for (var px = 0; px < W; px++) {
        var got = valueAt(lane, s, view.a + px * k, view.a + (px + 1) * k);
        if (got[0] < 0) continue;
        var hh = Math.max(got[0] > 0 ? 1 : 0, got[0] / 100 * h);
        if (hh > 0) ctx.fillRect(LABEL + px, y0 + h - hh, 1, hh);
      }
    });
  }
  function hover(lane, row, ta, tb, fmt) {
    if (!lane.t) return null;
    var s = lane.series[Math.min(row, lane.series.length - 1)], got = valueAt(lane, s, ta, tb);
    if (got[0] < 0) return [s.label + ": not sampled here", lane.label];
    return [s.label + ": " + got[0].toFixed(1) + "% of peak", lane.label,
      (got[1] ? "mean of " + got[1] + " sample" + (got[1] > 1 ? "s" : "") + " in this pixel column" :
        "the sample covering this time") + " \u00b7 one sample every " + fmt(lane.metric.period)];
  }
  return { lanes: lanes, decode: decode, draw: draw, hover: hover, colors: COLORS };
})();
