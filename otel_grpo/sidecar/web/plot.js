// Line plots against step, drawn as SVG. Written for this page: no library, nothing from a CDN.
// Every label goes through textContent, so no data is ever parsed as markup.
"use strict";

const Plot = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#db2777"];
  const W = 440, H = 200, M = { l: 52, r: 10, t: 8, b: 22 };

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  function ticks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => raw <= s);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }

  function fmt(v) {
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(1);
    return String(+v.toPrecision(4));
  }

  // Log axis: values go through log10 and only positive ones can be drawn (a KL of exactly 0,
  // the first step's, has no place on it). Ticks at decades, or at 1-2-5 when under one decade.
  function toLog(series) {
    return series.map((s) => ({ ...s, points: s.points.filter((p) => p[1] > 0).map((p) => [p[0], Math.log10(p[1])]) }));
  }

  function logTicks(lo, hi) {
    const out = [];
    for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
      for (const m of hi - lo < 1.5 ? [1, 2, 5] : [1]) {
        const t = e + Math.log10(m);
        if (t >= lo && t <= hi) out.push(t);
      }
    }
    return out.length ? out : [lo];
  }

  // series: [{label, description, points: [[step, value], ...]}]; scale: "linear" or "log"
  function draw(series, scale) {
    const log = scale === "log" && series.some((s) => s.points.some((p) => p[1] > 0));
    if (log) series = toLog(series);
    const svg = el("svg", { class: "plot", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none",
                            "data-scale": log ? "log" : "linear" });
    const pts = series.flatMap((s) => s.points);
    if (!pts.length) {
      const t = el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "no-data" }, svg);
      t.textContent = "no data";
      return svg;
    }
    let [x0, x1] = [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
    let [y0, y1] = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
    const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
    const sx = (x) => M.l + ((x - x0) / (x1 - x0)) * (W - M.l - M.r);
    const sy = (y) => H - M.b - ((y - y0) / (y1 - y0)) * (H - M.t - M.b);
    for (const v of log ? logTicks(y0, y1) : ticks(y0, y1, 4)) {
      el("line", { class: "grid-line", x1: M.l, x2: W - M.r, y1: sy(v), y2: sy(v) }, svg);
      el("text", { x: M.l - 4, y: sy(v) + 3, "text-anchor": "end", class: "y-tick" }, svg).textContent =
        fmt(log ? +Math.pow(10, v).toPrecision(12) : v);
    }
    for (const v of ticks(x0, x1, 5).filter(Number.isInteger)) {
      el("text", { x: sx(v), y: H - 6, "text-anchor": "middle" }, svg).textContent = String(v);
    }
    el("line", { class: "axis", x1: M.l, x2: M.l, y1: M.t, y2: H - M.b }, svg);
    el("line", { class: "axis", x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b }, svg);
    series.forEach((s, i) => {
      if (!s.points.length) return;
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
      const path = el("path", { class: "series", d, stroke: COLORS[i % COLORS.length] }, svg);
      path.setAttribute("data-label", s.label);
      el("title", {}, path).textContent = s.label + (s.description ? " — " + s.description : "");
      if (s.points.length === 1) {
        el("circle", { cx: sx(s.points[0][0]), cy: sy(s.points[0][1]), r: 2.5, fill: COLORS[i % COLORS.length] }, svg);
      }
    });
    return svg;
  }

  function legend(series) {
    const div = document.createElement("div");
    div.className = "legend";
    series.forEach((s, i) => {
      const span = document.createElement("span");
      span.style.setProperty("--c", COLORS[i % COLORS.length]);
      span.textContent = s.label;
      span.title = s.description || "";
      div.appendChild(span);
    });
    return div;
  }

  return { draw, legend };
})();
