// The dashboard's charts, drawn with uPlot (vendored). Each chart keeps its uPlot
// instance and is given new data on every snapshot; it follows its box's width.
"use strict";
const Charts = (() => {
  const colors = {
    success: "#2e7d32", failure: "#c62828", timeout: "#ef6c00", denied: "#6a1b9a",
    spend: "#1565c0", projection: "#1565c0", ceiling: "#c62828",
    p50: "#1565c0", p99: "#ef6c00", target: "#9e9e9e", rate: "#c62828", threshold: "#9e9e9e",
  };
  const size = (el) => {
    const width = Math.max(240, el.clientWidth || 320);
    return { width, height: Math.round(Math.min(220, Math.max(150, width * 0.38))) };
  };
  function chart(el, series, axes, scales) {
    let u = null;
    return {
      set(data) {
        if (!u) {
          u = new uPlot(Object.assign(size(el), { series, axes, scales, legend: { live: false } }), data, el);
          if (window.ResizeObserver) new ResizeObserver(() => u.setSize(size(el))).observe(el);
        } else {
          u.setData(data);
        }
      },
    };
  }
  const line = (label, stroke, extra) => Object.assign({ label, stroke, width: 2, spanGaps: false }, extra || {});
  const dash = (label, stroke) => ({ label, stroke, width: 1, dash: [6, 4], points: { show: false } });

  function throughput(el) {
    const c = chart(el, [
      {},
      line("success", colors.success),
      line("failure", colors.failure),
      line("timeout", colors.timeout),
      line("denied", colors.denied),
    ], [{}, { label: "per hour" }], { x: { time: true } });
    return { set: (t) => c.set([t.hours, t.success, t.failure, t.timeout, t.denied]) };
  }

  // Cumulative spend, then a straight line from now to the moment the ceiling is reached
  // at the current burn rate (drawn at most a week ahead), and the ceiling itself.
  function budget(el) {
    const c = chart(el, [
      {},
      line("spent", colors.spend),
      Object.assign(dash("projection", colors.projection), { spanGaps: true }),
      dash("ceiling", colors.ceiling),
    ], [{}, { label: "spend" }], { x: { time: true } });
    return {
      set(b) {
        const x = b.t.slice();
        const spent = b.cumulative.slice();
        const proj = x.map(() => null);
        const ceiling = b.ceiling === null || b.ceiling === undefined ? null : Number(b.ceiling);
        const now = x[x.length - 1];
        const last = spent[spent.length - 1];
        if (b.exhausted_at && ceiling !== null) {
          const end = Date.parse(b.exhausted_at) / 1000;
          const horizon = now + 7 * 86400;
          const at = Math.min(end, horizon);
          const value = end <= horizon ? ceiling : last + (ceiling - last) * ((at - now) / (end - now));
          proj[proj.length - 1] = last;
          x.push(at); spent.push(null); proj.push(value);
        }
        c.set([x, spent, proj, x.map(() => ceiling)]);
      },
    };
  }

  function latency(el) {
    const c = chart(el, [
      {},
      line("p50", colors.p50),
      line("p99", colors.p99),
      dash("target p50", colors.target),
      dash("target p99", colors.threshold),
    ], [{}, { label: "ms (log)", size: 80 }], { x: { time: true }, y: { distr: 3 } });
    return {
      set(l) { c.set([l.t, l.p50, l.p99, l.t.map(() => l.target_p50_ms), l.t.map(() => l.target_p99_ms)]); },
    };
  }

  function errors(el) {
    const c = chart(el, [
      {},
      line("error rate %", colors.rate),
      dash("alert threshold", colors.threshold),
    ], [{}, { label: "%" }], { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(100 * 0.25, max)] } });
    return {
      set(e) {
        c.set([e.t, e.series.map((v) => (v === null ? null : v * 100)), e.t.map(() => e.threshold * 100)]);
      },
    };
  }
  return { throughput, budget, latency, errors };
})();
