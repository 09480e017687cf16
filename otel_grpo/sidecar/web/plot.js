// Step charts on uPlot (vendor/uPlot.iife.min.js, MIT; served by the sidecar, nothing from a CDN).
// uPlot draws the lines on a canvas; what is text (the hover box, alert marks, legends) is DOM,
// set through textContent only, so no data is ever parsed as markup. Here: a chart's series from
// its lines (gaps, bridges), exponential smoothing (the raw line stays, faded, behind the smoothed
// one), colours (a colour per run when runs are overlaid), legends. Its scale and ticks:
// scales.js; what the pointer, a finger or the keyboard does to it, and its marks: interact.js.
"use strict";

const Plot = (() => {
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#db2777"];
  // A colour per run when runs are compared (the columns of a chart then differ by dash).
  const RUN_COLORS = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#db2777", "#0891b2", "#a16207", "#4b5563"];
  const DASHES = [[], [6, 3], [2, 2], [8, 3, 2, 3], [4, 4], [1, 3]];
  const HEIGHT = 220;
  const RAW_ALPHA = 0.28;  // the raw line behind a smoothed one
  const { DRAG_PX } = PlotTouch;
  const { scaleOf, yTicks, yRange, labels } = PlotScales;
  const { displayName } = PlotInteract;
  const SYNC = "otel-grpo-steps";  // every chart of the page shares its cursor
  const X_INCRS = [1, 2, 5].flatMap((m) => Array.from({ length: 13 }, (_, e) => m * 10 ** e)).sort((a, b) => a - b);
  const shown = new WeakMap();  // chart element -> what it draws (inspect)

  // Exponential moving average with TensorBoard's debiasing (the first points are not pulled to
  // 0), taken on the chart's scale (a log chart averages logs: one spike does not hold the line up
  // for the next 30 steps); a gap (null) restarts it. The smoothed value of each point.
  function smooth(points, weight, scale) {
    let acc = 0, n = 0;
    return points.map(([, y]) => {
      const t = y === null || scale.place(y) === null ? null : scale.f(y);
      if (t === null) { acc = 0; n = 0; return null; }
      acc = weight * acc + (1 - weight) * t;
      n += 1;
      return scale.inv(acc / (1 - Math.pow(weight, n)));
    });
  }

  function withAlpha(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  function colorOf(line, compare) {
    return compare ? RUN_COLORS[(line.runIndex || 0) % RUN_COLORS.length] : COLORS[(line.colorIndex || 0) % COLORS.length];
  }

  function dashOf(line, compare) {
    return compare ? DASHES[(line.colorIndex || 0) % DASHES.length] : [];
  }

  // uPlot's columns: the steps of every line, and per line a value per step: a number, null (a
  // gap: a non-finite value, or no place on a log scale) or undefined (no entry: bridged, so a
  // metric logged every other step is one line). Laid out once per chart; a smoothing weight then
  // only fills new columns.
  function layout(lines, scale, compare) {
    const xs = [...new Set(lines.flatMap((l) => l.points.map((p) => p[0])))].sort((a, b) => a - b);
    const at = new Map(xs.map((x, i) => [x, i]));
    const cols = lines.map((l) => {
      const idx = l.points.map((p) => at.get(p[0]));
      const raw = new Array(xs.length).fill(undefined);
      l.points.forEach(([, y], i) => { raw[idx[i]] = y === null ? null : scale.place(y); });
      return { line: l, color: colorOf(l, compare), dash: dashOf(l, compare), values: new Map(l.points), idx, raw };
    });
    return { xs, at, cols };
  }

  // The series drawn: a line, or with smoothing two: the raw values, faded, then the smoothed ones.
  function seriesOf(laid, scale, weight) {
    const out = [];
    for (const c of laid.cols) {
      if (!weight) { out.push({ ...c, raw: false, ys: c.raw }); continue; }
      const ys = new Array(laid.xs.length).fill(undefined);
      smooth(c.line.points, weight, scale).forEach((v, i) => { ys[c.idx[i]] = v; });
      out.push({ ...c, raw: true, ys: c.raw }, { ...c, raw: false, ys, smoothed: true });
    }
    return out;
  }

  // A point between two gaps (or a line of one point) would draw nothing: it gets a dot. Asked at
  // every draw, found once per column.
  const lone = new WeakMap();
  function lonePoints(ys) {
    if (lone.has(ys)) return lone.get(ys);
    const out = [];
    let prev = null;  // the last value that was not undefined
    for (let i = 0; i < ys.length; i++) {
      if (ys[i] === undefined) continue;
      if (ys[i] !== null && prev === null) {
        let j = i + 1;
        while (j < ys.length && ys[j] === undefined) j++;
        if (j >= ys.length || ys[j] === null) out.push(i);
      }
      prev = ys[i];
    }
    lone.set(ys, out);
    return out;
  }

  // chart: {lines: [{name, label, prometheus, description, run, runIndex, colorIndex,
  //                  points: [[step, value or null], ...]}], scale, unit, xDomain: [first, last],
  //         smooth: 0..0.99, compare, marks: [{step, kind, label, name, runbook, onOpen}],
  //         onPick(step), onZoom([lo, hi] or null)}
  // Returns {element, mount(width), focusAt(step), destroy()}: uPlot needs the width it is given, known once the
  // element is in the page.
  function chart(c) {
    const element = h("div", { class: "plot-wrap" });
    const values = c.lines.flatMap((l) => l.points.map((p) => p[1]).filter((v) => v !== null));
    const scale = scaleOf(c.scale || "linear", values);
    element.dataset.scale = scale.kind;
    const laid = layout(c.lines, scale, !!c.compare);
    const drawn = { xs: laid.xs, out: seriesOf(laid, scale, c.smooth || 0) };  // a new smoothing replaces out
    let weight = c.smooth || 0;
    let [x0, x1] = c.xDomain || [drawn.xs[0], drawn.xs[drawn.xs.length - 1]];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    const ticks = { x: [], y: [] };
    const info = () => ({ scale: scale.kind, xLabel: "step", yLabel: c.unit || "", ticks, steps: drawn.xs, xRange: [x0, x1],
                          series: drawn.out.map((s) => ({ name: s.line.name || s.line.label, run: s.line.run, raw: s.raw,
                                                          color: s.color, stroke: s.raw ? withAlpha(s.color, RAW_ALPHA) : s.color,
                                                          dash: s.dash, values: s.ys.map((v) => (v === undefined ? "absent"
                                                                                                 : v === null ? "gap" : v)) })) });
    let u = null, keys = null;
    shown.set(element, { info, cursor: () => (u && u.cursor.idx !== null && u.cursor.idx !== undefined && u.cursor.left >= 0
                                                ? u.data[0][u.cursor.idx] : null) });
    return {
      element,
      mount(width) {
        u = new uPlot(options(c, scale, drawn.out, ticks, [x0, x1], width), [drawn.xs, ...drawn.out.map((s) => s.ys)], element);
        keys = PlotInteract.bind(u, element, c, () => [drawn.out, laid.at], [x0, x1]);
      },
      // The keyboard's focus on this chart, its cursor at `step` (null: none): `PlotInteract`'s focusAt.
      focusAt(step) { if (keys) keys.focusAt(step); },
      // Another smoothing weight, drawn on the same chart (no new canvas), where the series stay
      // the same: raw and smoothed, or raw alone. False where the chart has to be built again.
      smooth(w) {
        if (!u || (w > 0) !== (weight > 0)) return false;
        drawn.out = seriesOf(laid, scale, w);
        weight = w;
        u.setData([drawn.xs, ...drawn.out.map((s) => s.ys)]);  // the x range stays (not auto); y follows the values
        return true;
      },
      resize(width) { if (u && Math.abs(u.width - width) >= 1) u.setSize({ width, height: HEIGHT }); },
      destroy() { if (u) u.destroy(); u = null; },
    };
  }

  function options(c, scale, out, ticks, domain, width) {
    const axisFont = "11px system-ui, -apple-system, 'Segoe UI', sans-serif";
    const axis = { stroke: "#6b7280", font: axisFont, labelFont: axisFont, grid: { stroke: "#f1f5f9", width: 1 },
                   ticks: { stroke: "#9ca3af", width: 1, size: 4 } };
    return {
      width, height: HEIGHT,
      legend: { show: false },
      scales: { x: { time: false, auto: false, range: domain }, y: { ...scale.uplot, range: (u, lo, hi) => yRange(scale, lo, hi) } },
      axes: [
        { ...axis, label: "step", labelSize: 14, size: 28, incrs: X_INCRS, space: 50,
          values: (u, splits) => (ticks.x = splits.map((v) => (Number.isInteger(v) ? String(v) : ""))) },
        { ...axis, label: c.unit || undefined, labelSize: c.unit ? 14 : 0, size: 56,
          splits: (u, i, lo, hi) => yTicks(scale, lo, hi), filter: (u, splits) => splits,
          values: (u, splits) => (ticks.y = labels(splits)) },
      ],
      series: [{ label: "step" }, ...out.map((s) => ({
        label: displayName(s.line) + (s.raw ? " (raw)" : ""), spanGaps: false, dash: s.dash,
        stroke: s.raw ? withAlpha(s.color, RAW_ALPHA) : s.color, width: s.raw ? 1 : 1.6,
        points: { show: true, size: 5, fill: s.color, stroke: s.color, filter: (u, si) => lonePoints(u.data[si]) } }))],
      cursor: { y: false, sync: { key: SYNC, setSeries: false }, drag: { x: true, y: false, setScale: false, dist: DRAG_PX },
                points: { show: false }, bind: { dblclick: () => null } },
      select: { show: true },
    };
  }

  // One entry per column: its catalog name (the API's column too), the Prometheus name beside it;
  // overlaid runs share it (the run legend says which colour is which run). Compared runs: the
  // swatch is the column's dash.
  function legend(lines, compare) {
    const first = lines.filter((l, i) => lines.findIndex((o) => o.label === l.label) === i);
    return h("div", { class: "legend" }, ...first.map((l) => h("span", l.description ? { title: l.description } : {},
      swatch(compare ? "#374151" : colorOf(l, false), dashOf(l, compare)), l.name || l.label,
      ...(l.prometheus ? [" ", h("code", { class: "prom", text: l.prometheus })] : []))));
  }

  function swatch(color, dash) {
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 24 6");
    svg.setAttribute("class", "swatch");
    const line = document.createElementNS("http://www.w3.org/2000/svg", "line");
    for (const [k, v] of Object.entries({ x1: 0, x2: 24, y1: 3, y2: 3, stroke: color, "stroke-width": 2.5,
                                          "stroke-dasharray": dash.join(" ") })) line.setAttribute(k, v);
    svg.appendChild(line);
    return svg;
  }

  // What a chart draws, for a test or a curious console: scale, ticks, each series' values.
  function inspect(element) {
    const chart = shown.get(element.classList.contains("plot-wrap") ? element : element.querySelector(".plot-wrap"));
    return chart ? { ...JSON.parse(JSON.stringify(chart.info())), cursor: chart.cursor() } : null;
  }

  return { chart, legend, swatch, inspect, RUN_COLORS };
})();
