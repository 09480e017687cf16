// Line plots against step, drawn as SVG. Written for this page: no library, nothing from a CDN.
// Every label goes through textContent, so no data is ever parsed as markup.
"use strict";

const Plot = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#db2777"];
  const W = 440, H = 210, M = { l: 62, r: 10, t: 8, b: 32 };
  const MAX_Y_TICKS = 6;

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

  function fmt(v, digits) {
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(Math.max(0, Math.min(digits - 1, 3)));
    return String(+v.toPrecision(digits));
  }

  // Tick labels that differ from each other: more digits until they do (a tight range such as
  // 0.99995 .. 1.00005 printed with 4 digits was "1" five times).
  function labels(values) {
    for (let d = 3; d <= 12; d++) {
      const out = values.map((v) => fmt(v, d));
      if (new Set(out).size === out.length) return out;
    }
    return values.map((v) => String(v));
  }

  // Scales map data to a plotting coordinate; null means "no place on this axis" (a gap).
  // log: positive values only. symlog: sign(y) * log10(1 + |y| / c), linear within c of 0, so
  // zero and negative values are drawn; c is the smallest non-zero magnitude in the data.
  function scaleOf(kind, values) {
    if (kind === "log" && values.some((v) => v > 0)) {
      return { kind, f: (v) => (v > 0 ? Math.log10(v) : null), inv: (t) => Math.pow(10, t) };
    }
    if (kind === "symlog" || kind === "log") {
      const mags = values.filter((v) => v !== 0).map(Math.abs);
      const c = mags.length ? Math.pow(10, Math.floor(Math.log10(Math.min(...mags)))) : 1;
      return { kind: "symlog", c, f: (v) => Math.sign(v) * Math.log10(1 + Math.abs(v) / c),
               inv: (t) => Math.sign(t) * c * (Math.pow(10, Math.abs(t)) - 1) };
    }
    return { kind: "linear", f: (v) => v, inv: (t) => t };
  }

  function thin(values, n) {
    if (values.length <= n) return values;
    const stride = Math.ceil(values.length / n);
    return values.filter((_, i) => i % stride === 0);
  }

  // Ticks in plotting coordinates: at most MAX_Y_TICKS whatever the range (1e-6 .. 1e22 used to
  // print 30 labels on top of each other).
  function yTicks(scale, lo, hi) {
    if (scale.kind === "linear") return ticks(lo, hi, 4);
    if (scale.kind === "log") {
      const out = [];
      for (let e = Math.ceil(lo); e <= Math.floor(hi); e++) out.push(e);
      if (out.length < 2) return ticks(Math.pow(10, lo), Math.pow(10, hi), 4).filter((v) => v > 0).map(Math.log10);
      return thin(out, MAX_Y_TICKS);
    }
    const out = [];  // symlog: 0 and +-c*10^k
    const c = scale.c;
    for (const sign of [-1, 1]) {
      for (let k = 0; k < 40; k++) {
        const t = scale.f(sign * c * Math.pow(10, k));
        if (t >= lo && t <= hi) out.push(t);
      }
    }
    if (lo <= 0 && hi >= 0) out.push(0);
    out.sort((a, b) => a - b);
    return out.length >= 2 ? thin(out, MAX_Y_TICKS) : ticks(lo, hi, 4);
  }

  // series: [{label, name, description, points: [[step, value or null], ...]}]
  // opts: {scale, unit, xDomain: [first, last], onPick(step)}
  function draw(series, opts) {
    const o = opts || {};
    const scale = scaleOf(o.scale || "linear", series.flatMap((s) => s.points.map((p) => p[1]).filter((v) => v !== null)));
    const mapped = series.map((s) => s.points.map((p) => [p[0], p[1] === null ? null : scale.f(p[1])]));
    const svg = el("svg", { class: "plot", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", "data-scale": scale.kind });
    const pts = mapped.flat().filter((p) => p[1] !== null);
    if (!pts.length) {
      el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "no-data" }, svg).textContent = "no data";
      return svg;
    }
    let [x0, x1] = o.xDomain || [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
    let [y0, y1] = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
    const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
    const sx = (x) => M.l + ((x - x0) / (x1 - x0)) * (W - M.l - M.r);
    const sy = (y) => H - M.b - ((y - y0) / (y1 - y0)) * (H - M.t - M.b);
    const yt = yTicks(scale, y0, y1);
    labels(yt.map((t) => (scale.kind === "linear" ? t : +scale.inv(t).toPrecision(12)))).forEach((text, i) => {
      el("line", { class: "grid-line", x1: M.l, x2: W - M.r, y1: sy(yt[i]), y2: sy(yt[i]) }, svg);
      el("text", { x: M.l - 4, y: sy(yt[i]) + 3, "text-anchor": "end", class: "y-tick" }, svg).textContent = text;
    });
    for (const v of ticks(x0, x1, 5).filter(Number.isInteger)) {
      el("text", { x: sx(v), y: H - M.b + 12, "text-anchor": "middle", class: "x-tick" }, svg).textContent = String(v);
    }
    el("text", { x: W - M.r, y: H - 3, "text-anchor": "end", class: "axis-label x-label" }, svg).textContent = "step";
    if (o.unit) {
      el("text", { x: 10, y: M.t + (H - M.t - M.b) / 2, "text-anchor": "middle", class: "axis-label y-label",
                   transform: `rotate(-90 10 ${M.t + (H - M.t - M.b) / 2})` }, svg).textContent = o.unit;
    }
    el("line", { class: "axis", x1: M.l, x2: M.l, y1: M.t, y2: H - M.b }, svg);
    el("line", { class: "axis", x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b }, svg);
    mapped.forEach((points, i) => drawSeries(svg, series[i], points, COLORS[i % COLORS.length], sx, sy));
    if (o.onPick) pickable(svg, sx, x0, x1, o.onPick);
    return svg;
  }

  // A missing or undrawable value breaks the line: no segment bridges a gap.
  function drawSeries(svg, s, points, color, sx, sy) {
    let d = "", run = [];
    const flush = () => {
      if (run.length === 1) el("circle", { class: "lone", cx: sx(run[0][0]), cy: sy(run[0][1]), r: 2, fill: color }, svg);
      run = [];
    };
    for (const p of points) {
      if (p[1] === null) { flush(); continue; }
      d += `${run.length ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`;
      run.push(p);
    }
    flush();
    if (!d) return;
    const path = el("path", { class: "series", d, stroke: color }, svg);
    path.setAttribute("data-label", s.label);
    el("title", {}, path).textContent = (s.name || s.label) + (s.description ? " — " + s.description : "");
  }

  // Clicking the plot picks the step under the pointer.
  function pickable(svg, sx, x0, x1, onPick) {
    svg.classList.add("pickable");
    svg.addEventListener("click", (e) => {
      const box = svg.getBoundingClientRect();
      const x = ((e.clientX - box.left) / box.width) * W;
      const step = Math.round(x0 + ((x - M.l) / (W - M.l - M.r)) * (x1 - x0));
      onPick(Math.min(Math.max(step, x0), x1));
    });
  }

  function legend(series) {
    const div = document.createElement("div");
    div.className = "legend";
    series.forEach((s, i) => {
      const span = document.createElement("span");
      span.style.setProperty("--c", COLORS[i % COLORS.length]);
      span.textContent = s.name || s.label;
      span.title = s.label + (s.description ? " — " + s.description : "");
      div.appendChild(span);
    });
    return div;
  }

  return { draw, legend };
})();
