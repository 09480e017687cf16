// Step charts on uPlot (vendor/uPlot.iife.min.js, MIT; served by the sidecar, nothing from a CDN).
// uPlot draws the lines on a canvas; what is text (the hover box, alert marks, legends) is DOM,
// set through textContent only, so no data is ever parsed as markup.
// Interactions: hover shows every line's value at the step under the pointer, and every chart's
// cursor follows it (uPlot's sync); a click picks that step (once no second click follows); a
// horizontal drag zooms to the dragged steps (the caller redraws every chart), a double click
// shows all steps. On a touch screen (touch.js): tap, one-finger drag or pinch, double tap, alike.
// Optional: exponential smoothing (the raw line stays, faded, behind the smoothed one), marks
// (alerts, labelled and linked; the picked step), other runs overlaid (a colour per run).
"use strict";

const Plot = (() => {
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#db2777"];
  // A colour per run when runs are compared (the columns of a chart then differ by dash).
  const RUN_COLORS = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#db2777", "#0891b2", "#a16207", "#4b5563"];
  const DASHES = [[], [6, 3], [2, 2], [8, 3, 2, 3], [4, 4], [1, 3]];
  const HEIGHT = 220;
  const RAW_ALPHA = 0.28;  // the raw line behind a smoothed one
  const FLAG_PX = 150;  // room an alert's label takes right of its line
  const MAX_Y_TICKS = 6;
  const { DRAG_PX, DOUBLE_CLICK_MS } = PlotTouch;
  const SYNC = "otel-grpo-steps";  // every chart of the page shares its cursor
  const X_INCRS = [1, 2, 5].flatMap((m) => Array.from({ length: 13 }, (_, e) => m * 10 ** e)).sort((a, b) => a - b);
  const shown = new WeakMap();  // chart element -> what it draws (inspect)
  let pendingPick = null;  // shared by every chart: a redraw replaces them

  function fmt(v, digits) {
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(Math.max(0, Math.min(digits - 1, 3)));
    return String(+v.toPrecision(digits));
  }

  // Tick labels: the fewest digits that write every tick exactly and tell them apart (a tight range
  // such as 0.99995 .. 1.00005 printed with 4 digits was "1" five times).
  function labels(values) {
    if (values.some((v) => typeof v !== "number")) return values.map((v) => (typeof v === "number" ? fmt(v, 6) : ""));
    const exact = (v, s) => Math.abs(+s - v) <= 1e-9 * Math.abs(v);
    for (let d = 1; d <= 12; d++) {
      const out = values.map((v) => fmt(v, d));
      if (new Set(out).size === out.length && out.every((s, i) => exact(values[i], s))) return out;
    }
    return values.map((v) => String(v));
  }

  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => raw <= s);
    const out = [];
    // Counted, not `v += step` until hi: a step below the float resolution of v never got there.
    const first = Math.ceil(lo / step);
    for (let i = 0; i <= n * 3 && (first + i) * step <= hi + step * 1e-9; i++) out.push(+((first + i) * step).toPrecision(12));
    return out;
  }

  function thin(values, n) {
    if (values.length <= n) return values;
    const stride = Math.ceil(values.length / n);
    return values.filter((_, i) => i % stride === 0);
  }

  // The y scale. log: positive values only (others have no place: a gap). symlog: uPlot's asinh
  // scale, linear within c of 0, so zero and negative values are drawn; c is the smallest non-zero
  // magnitude in the data. A log chart without a positive value is drawn symlog.
  function scaleOf(kind, values) {
    if (kind === "log" && values.some((v) => v > 0)) {
      return { kind, uplot: { distr: 3, log: 10 }, place: (v) => (v > 0 ? v : null), f: Math.log10, inv: (t) => 10 ** t };
    }
    if (kind === "symlog" || kind === "log") {
      const mags = values.filter((v) => v !== 0).map(Math.abs);
      const c = mags.length ? Math.pow(10, Math.floor(Math.log10(Math.min(...mags)))) : 1;
      return { kind: "symlog", c, uplot: { distr: 4, asinh: c }, place: (v) => v,
               f: (v) => Math.sign(v) * Math.log10(1 + Math.abs(v) / c), inv: (t) => Math.sign(t) * c * (10 ** Math.abs(t) - 1) };
    }
    return { kind: "linear", uplot: { distr: 1 }, place: (v) => v, f: (v) => v, inv: (t) => t };
  }

  // At most MAX_Y_TICKS ticks whatever the range (1e-6 .. 1e22 used to print 30 labels on top of
  // each other): decades on a log scale, 0 and +-c*10^k on a symlog one, nice numbers otherwise.
  function yTicks(scale, lo, hi) {
    if (!(hi > lo)) return [lo];
    if (scale.kind === "linear") return niceTicks(lo, hi, 4);
    if (scale.kind === "log") {
      const out = [];
      for (let e = Math.ceil(Math.log10(lo) - 1e-9); e <= Math.floor(Math.log10(hi) + 1e-9); e++) out.push(10 ** e);
      return out.length >= 2 ? thin(out, MAX_Y_TICKS) : niceTicks(lo, hi, 4).filter((v) => v > 0);
    }
    const out = [];
    for (const sign of [-1, 1]) {
      for (let k = 0; k < 40; k++) {
        const v = sign * scale.c * 10 ** k;
        if (v >= lo && v <= hi) out.push(v);
      }
    }
    out.sort((a, b) => a - b);
    const kept = out.length >= 2 ? thin(out, MAX_Y_TICKS) : niceTicks(lo, hi, 4);
    return lo <= 0 && hi >= 0 && !kept.includes(0) ? [...kept, 0].sort((a, b) => a - b) : kept;  // 0 always has a tick
  }

  // The y range of the steps in view: theirs, padded by 5% on the scale (a flat line gets a band
  // around it, not a 1e-17 range). uPlot's own log range snaps to whole decades, which flattened IS
  // weights between 0.99998 and 1.00005 onto one line.
  function yRange(scale, lo, hi) {
    if (lo === null || hi === null || !Number.isFinite(lo) || !Number.isFinite(hi)) return [scale.kind === "log" ? 0.1 : 0, 1];
    let [t0, t1] = [scale.f(lo), scale.f(hi)];
    if (t1 - t0 <= Math.abs(t0) * 1e-9) { const d = Math.abs(t0) * 0.1 || 1; t0 -= d; t1 += d; }
    const pad = (t1 - t0) * 0.05;
    return [scale.inv(t0 - pad), scale.inv(t1 + pad)];
  }

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

  function displayName(line) {
    return (line.name || line.label) + (line.runIndex ? ` [${line.run}]` : "");
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
  // Returns {element, mount(width), destroy()}: uPlot needs the width it is given, known once the
  // element is in the page.
  function chart(c) {
    const element = document.createElement("div");
    element.className = "plot-wrap";
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
    let u = null;
    shown.set(element, { info, cursor: () => (u && u.cursor.idx !== null && u.cursor.idx !== undefined && u.cursor.left >= 0
                                                ? u.data[0][u.cursor.idx] : null) });
    return {
      element,
      mount(width) {
        u = new uPlot(options(c, scale, drawn.out, ticks, [x0, x1], width), [drawn.xs, ...drawn.out.map((s) => s.ys)], element);
        interactive(u, element, c, () => [drawn.out, laid.at], [x0, x1]);
      },
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

  // Hover box, pick, zoom and the marks, around uPlot's cursor and selection.
  function interactive(u, element, c, series, [x0, x1]) {
    const tip = document.createElement("div");
    tip.className = "plot-tip";
    tip.hidden = true;
    element.appendChild(tip);
    const layer = document.createElement("div");
    layer.className = "marks";
    u.over.appendChild(layer);
    let here = false;  // the pointer (or a finger) is on this chart: its box shows
    const stepAt = (clientX) => u.posToVal(clientX - u.over.getBoundingClientRect().left, "x");
    const clamp = (s) => Math.min(Math.max(s, x0), x1);
    const showTip = () => {
      const idx = u.cursor.idx;
      if (!here || idx === null || idx === undefined || u.cursor.left < 0) { tip.hidden = true; return; }
      fillTip(tip, u.data[0][idx], ...series());
      const box = element.getBoundingClientRect(), over = u.over.getBoundingClientRect();
      const left = over.left - box.left + u.cursor.left + 12;
      tip.style.left = (left + tip.offsetWidth > box.width ? Math.max(0, left - tip.offsetWidth - 24) : left) + "px";
      tip.style.top = (over.top - box.top + Math.max(0, u.cursor.top) + 12) + "px";
    };
    u.hooks.setCursor = [showTip];
    u.hooks.draw = [() => placeMarks(u, layer, c.marks || [])];
    placeMarks(u, layer, c.marks || []);
    u.hooks.setSelect = [() => {
      const { left, width } = u.select;
      if (width >= DRAG_PX) zoomTo(u.posToVal(left, "x"), u.posToVal(left + width, "x"));
      u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
    }];
    u.over.addEventListener("mouseenter", () => { here = true; });
    u.over.addEventListener("mouseleave", () => { here = false; tip.hidden = true; });
    let pressed = null;
    u.over.addEventListener("mousedown", (e) => { pressed = e.clientX; });
    u.over.addEventListener("mouseup", (e) => {
      if (pressed === null) return;
      const moved = Math.abs(e.clientX - pressed) >= DRAG_PX;
      pressed = null;
      if (!moved) release(e.clientX, e.detail >= 2);
    });
    // Steps a..b as the view: within this one, or all steps when as wide or wider.
    function zoomTo(a, b) {
      if (!c.onZoom) return;
      if (a <= x0 && b >= x1) c.onZoom(null);
      else if (Math.ceil(clamp(a)) < Math.floor(clamp(b))) c.onZoom([Math.ceil(clamp(a)), Math.floor(clamp(b))]);
    }
    // A press that did not move: a double press shows all steps, a single one picks its step once
    // no second press follows (the pick scrolls to the samples, which would take a double press's
    // second one off the chart).
    function release(clientX, double) {
      clearTimeout(pendingPick);
      if (double && c.onZoom) c.onZoom(null);
      else if (!double && c.onPick) {
        const step = clamp(Math.round(stepAt(clientX)));
        pendingPick = setTimeout(() => c.onPick(step), DOUBLE_CLICK_MS);
      }
    }
    PlotTouch.bind(u.over, { stepAt, zoomTo, release, hover(clientX, clientY) {
      here = true;
      const over = u.over.getBoundingClientRect();
      u.setCursor({ left: clientX - over.left, top: clientY - over.top });
    } });
  }

  function fillTip(tip, step, out, at) {
    const head = document.createElement("div");
    head.className = "tip-step";
    head.textContent = "step " + step;
    const lines = [];
    for (const s of out) {
      if (s.raw || !s.values.has(step)) continue;
      const raw = s.values.get(step), sm = s.smoothed ? s.ys[at.get(step)] : null;
      const line = document.createElement("div");
      line.style.setProperty("--c", s.color);
      const n = document.createElement("span");
      n.textContent = displayName(s.line) + " ";
      const v = document.createElement("b");
      v.textContent = raw === null ? "not finite" : fmt(raw, 5) + (sm !== null && sm !== undefined ? ` (smoothed ${fmt(sm, 5)})` : "");
      line.append(n, v);
      lines.push(line);
    }
    tip.replaceChildren(head, ...lines);
    tip.hidden = false;
  }

  // Marks at steps: an alert (its name, a link to its row in the alerts table and to its runbook),
  // the step whose samples are shown. Labels close to each other stack downwards.
  function placeMarks(u, layer, marks) {
    const width = parseFloat(u.over.style.width);  // as uPlot set it: reading the layout here forced one per chart
    const key = [width, u.scales.x.min, u.scales.x.max].join();
    if (layer.dataset.at === key) return;  // a draw with new values only (smoothing): the marks stand
    layer.dataset.at = key;
    const placed = [];
    layer.replaceChildren(...marks.flatMap((m) => {
      const x = u.valToPos(m.step, "x");
      if (!(x >= 0 && x <= width)) return [];
      const mark = document.createElement("div");
      mark.className = "mark mark-" + m.kind;
      mark.dataset.step = String(m.step);
      mark.title = m.label;
      mark.style.left = x + "px";
      if (m.kind === "alert") {
        const row = placed.filter((p) => Math.abs(p - x) < 90).length;
        placed.push(x);
        const flag = document.createElement("span");
        flag.className = "mark-flag" + (x > width - FLAG_PX ? " flip" : "");  // near the right edge: to the line's left
        flag.style.top = row * 17 + "px";
        const name = document.createElement("button");
        name.type = "button";
        name.className = "mark-label";
        name.textContent = m.name;
        name.title = m.label + ": show it in the alerts table";
        name.addEventListener("click", () => m.onOpen && m.onOpen());
        flag.appendChild(name);
        if (m.runbook) {
          const link = document.createElement("a");
          link.className = "mark-runbook";
          link.href = m.runbook;
          link.target = "_blank";
          link.rel = "noopener noreferrer";
          link.textContent = "runbook";
          flag.appendChild(link);
        }
        for (const kind of ["mousedown", "touchstart"]) flag.addEventListener(kind, (e) => e.stopPropagation(), { passive: true });
        mark.appendChild(flag);
      }
      return [mark];
    }));
  }

  // One entry per column: its catalog name (the API's column too), the Prometheus name beside it;
  // overlaid runs share it (the run legend says which colour is which run). Compared runs: the
  // swatch is the column's dash.
  function legend(lines, compare) {
    const div = document.createElement("div");
    div.className = "legend";
    const seen = new Set();
    for (const l of lines) {
      if (seen.has(l.label)) continue;
      seen.add(l.label);
      const span = document.createElement("span");
      span.appendChild(swatch(compare ? "#374151" : colorOf(l, false), dashOf(l, compare)));
      span.append(l.name || l.label);
      if (l.prometheus) {
        const prom = document.createElement("code");
        prom.className = "prom";
        prom.textContent = l.prometheus;
        span.append(" ", prom);
      }
      if (l.description) span.title = l.description;
      div.appendChild(span);
    }
    return div;
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
