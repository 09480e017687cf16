// Line plots against step, drawn as SVG. Written for this page: no library, nothing from a CDN.
// Every label goes through textContent, so no data is ever parsed as markup.
// Interactions: hover shows every series' value at the step under the pointer; a click picks that
// step (once no second click follows); a horizontal drag zooms to the dragged steps (the caller redraws every panel), a double
// click zooms out. On a touch screen: tap, one-finger drag or pinch, double tap, alike. Optional: exponential smoothing, vertical marks (alerts, the picked step), and
// series of other runs drawn dashed (overlay, aligned by step).
"use strict";

const Plot = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#db2777"];
  const DASHES = ["", "6 3", "2 2", "8 3 2 3"];  // run 0 (the page's run) solid, overlaid runs dashed
  const W = 440, H = 210, M = { l: 62, r: 10, t: 8, b: 32 };
  const MAX_Y_TICKS = 6;
  const DRAG_PX = 6;  // a pointer move shorter than this is a click, not a zoom
  const DOUBLE_CLICK_MS = 300;  // a click waits this long for a second one (a double click zooms out)
  let pendingPick = null;  // shared by every plot: a redraw replaces them
  let lastTap = null;  // when the last single tap ended (event time), for a double tap

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
    // Counted, not `v += step` until hi: a step below the float resolution of v never got there.
    const first = Math.ceil(lo / step);
    for (let i = 0; i <= n * 3 && (first + i) * step <= hi + step * 1e-9; i++) out.push(+((first + i) * step).toPrecision(12));
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

  // Exponential moving average with TensorBoard's debiasing (the first points are not pulled to 0);
  // a gap (null) restarts it. weight 0: the raw values.
  function smooth(points, weight) {
    if (!weight) return points;
    let acc = 0, n = 0;
    return points.map(([x, y]) => {
      if (y === null) { acc = 0; n = 0; return [x, null]; }
      acc = weight * acc + (1 - weight) * y;
      n += 1;
      return [x, acc / (1 - Math.pow(weight, n))];
    });
  }

  // series: [{label, name, prometheus, description, run, runIndex, points: [[step, value or null], ...]}]
  //   A step a series has no entry for (logged every other step) is bridged; a null is a gap.
  // opts: {scale, unit, xDomain: [first, last], smooth: 0..0.99, marks: [{step, label, kind}],
  //        onPick(step), onZoom([lo, hi] or null)}
  function draw(series, opts) {
    const o = opts || {};
    const wrap = document.createElement("div");
    wrap.className = "plot-wrap";
    const values = series.map((s) => smooth(s.points, o.smooth || 0));
    const scale = scaleOf(o.scale || "linear", series.flatMap((s) => s.points.map((p) => p[1]).filter((v) => v !== null)));
    const mapped = values.map((pts) => pts.map((p) => [p[0], p[1] === null ? null : scale.f(p[1])]));
    const svg = el("svg", { class: "plot", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", "data-scale": scale.kind }, wrap);
    const all = mapped.flat().filter((p) => p[1] !== null);
    if (!all.length) {
      el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "no-data" }, svg).textContent = "no data";
      return wrap;
    }
    let [x0, x1] = o.xDomain || [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
    const inView = all.filter((p) => p[0] >= x0 && p[0] <= x1);
    const pts = inView.length ? inView : all;
    let [y0, y1] = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    // Flat (smoothing leaves a constant a few ulps apart): a band around it, not a 1e-17 range.
    if (y1 - y0 <= Math.abs(y0) * 1e-9) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
    const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
    const frame = { x0, x1, sx: (x) => M.l + ((x - x0) / (x1 - x0)) * (W - M.l - M.r),
                    sy: (y) => H - M.b - ((y - y0) / (y1 - y0)) * (H - M.t - M.b) };
    axes(svg, frame, scale, y0, y1, o.unit);
    const clip = "clip-" + Math.random().toString(36).slice(2);
    el("rect", { x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b }, el("clipPath", { id: clip }, svg));
    const body = el("g", { "clip-path": `url(#${clip})` }, svg);
    for (const mark of o.marks || []) drawMark(body, mark, frame);
    mapped.forEach((points, i) => drawSeries(body, series[i], points, colorOf(series[i], i), frame));
    interactive(wrap, svg, series, values, frame, o);
    return wrap;
  }

  function colorOf(s, i) {
    return COLORS[(s.colorIndex ?? i) % COLORS.length];
  }

  function axes(svg, frame, scale, y0, y1, unit) {
    const { sx, sy, x0, x1 } = frame;
    const yt = yTicks(scale, y0, y1);
    labels(yt.map((t) => (scale.kind === "linear" ? t : +scale.inv(t).toPrecision(12)))).forEach((text, i) => {
      el("line", { class: "grid-line", x1: M.l, x2: W - M.r, y1: sy(yt[i]), y2: sy(yt[i]) }, svg);
      el("text", { x: M.l - 4, y: sy(yt[i]) + 3, "text-anchor": "end", class: "y-tick" }, svg).textContent = text;
    });
    for (const v of ticks(x0, x1, 5).filter(Number.isInteger)) {
      el("text", { x: sx(v), y: H - M.b + 12, "text-anchor": "middle", class: "x-tick" }, svg).textContent = String(v);
    }
    el("text", { x: W - M.r, y: H - 3, "text-anchor": "end", class: "axis-label x-label" }, svg).textContent = "step";
    if (unit) {
      const mid = M.t + (H - M.t - M.b) / 2;
      el("text", { x: 10, y: mid, "text-anchor": "middle", class: "axis-label y-label", transform: `rotate(-90 10 ${mid})` },
         svg).textContent = unit;
    }
    el("line", { class: "axis", x1: M.l, x2: M.l, y1: M.t, y2: H - M.b }, svg);
    el("line", { class: "axis", x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b }, svg);
  }

  // A vertical line at a step: an alert ("alert"), the step whose samples are shown ("picked").
  function drawMark(svg, mark, frame) {
    const x = frame.sx(mark.step);
    const line = el("line", { class: "mark mark-" + mark.kind, x1: x, x2: x, y1: M.t, y2: H - M.b, "data-step": mark.step }, svg);
    el("title", {}, line).textContent = mark.label;
  }

  // A null breaks the line (no segment bridges a non-finite value); steps without an entry are
  // not points at all, so a metric logged every other step is one line.
  function drawSeries(svg, s, points, color, frame) {
    let d = "", run = [];
    const flush = () => {
      if (run.length === 1) el("circle", { class: "lone", cx: frame.sx(run[0][0]), cy: frame.sy(run[0][1]), r: 2, fill: color }, svg);
      run = [];
    };
    for (const p of points) {
      if (p[1] === null) { flush(); continue; }
      d += `${run.length ? "L" : "M"}${frame.sx(p[0]).toFixed(1)},${frame.sy(p[1]).toFixed(1)}`;
      run.push(p);
    }
    flush();
    if (!d) return;
    const dash = DASHES[(s.runIndex || 0) % DASHES.length];
    const path = el("path", { class: "series", d, stroke: color, ...(dash ? { "stroke-dasharray": dash } : {}) }, svg);
    path.setAttribute("data-label", s.label);
    if (s.run !== undefined) path.setAttribute("data-run", s.run);
    el("title", {}, path).textContent = displayName(s) + (s.description ? " — " + s.description : "");
  }

  function displayName(s) {
    return (s.name || s.label) + (s.runIndex ? ` [${s.run}]` : "");
  }

  // The point of `points` (sorted by step) nearest to `step`, or null.
  function nearest(points, step) {
    let lo = 0, hi = points.length - 1;
    if (hi < 0) return null;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (points[mid][0] < step) lo = mid + 1; else hi = mid;
    }
    const cands = [points[lo], points[lo - 1]].filter(Boolean);
    return cands.reduce((a, b) => (Math.abs(b[0] - step) < Math.abs(a[0] - step) ? b : a));
  }

  // Hover: a guide line and a box with each series' value at the nearest step; click: pick; drag: zoom.
  // Touch does the same with plain touch events (touchInput). Returns nothing; the listeners hold it.
  function interactive(wrap, svg, series, smoothed, frame, o) {
    const guide = el("line", { class: "guide", y1: M.t, y2: H - M.b, visibility: "hidden" }, svg);
    const band = el("rect", { class: "zoom-band", y: M.t, height: H - M.t - M.b, width: 0, visibility: "hidden" }, svg);
    const tip = document.createElement("div");
    tip.className = "plot-tip";
    tip.hidden = true;
    wrap.appendChild(tip);
    const steps = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b).map((x) => [x]);
    const svgX = (clientX) => {
      const box = svg.getBoundingClientRect();
      return ((clientX - box.left) / box.width) * W;
    };
    const toStep = (clientX) => frame.x0 + ((svgX(clientX) - M.l) / (W - M.l - M.r)) * (frame.x1 - frame.x0);
    const clamp = (s) => Math.min(Math.max(s, frame.x0), frame.x1);
    let dragFrom = null;  // where the press (mouse button or finger) began: {px, step}

    const input = {
      svgX, toStep,
      press(clientX) { dragFrom = { px: clientX, step: toStep(clientX) }; },
      cancel() { dragFrom = null; band.setAttribute("visibility", "hidden"); },
      pressedAt() { return dragFrom && dragFrom.px; },
      hide() { guide.setAttribute("visibility", "hidden"); tip.hidden = true; },
      hover(clientX, clientY) {
        const at = nearest(steps, toStep(clientX));
        if (!at) return;
        guide.setAttribute("x1", frame.sx(at[0]));
        guide.setAttribute("x2", frame.sx(at[0]));
        guide.setAttribute("visibility", "visible");
        showTip(tip, at[0], series, smoothed, o.smooth);
        const box = wrap.getBoundingClientRect();
        const left = clientX - box.left + 12;
        tip.style.left = (left + tip.offsetWidth > box.width ? Math.max(0, left - tip.offsetWidth - 24) : left) + "px";
        tip.style.top = (clientY - box.top + 12) + "px";
        if (dragFrom !== null) {
          const a = Math.min(dragFrom.px, clientX), b = Math.max(dragFrom.px, clientX);
          band.setAttribute("x", svgX(a));
          band.setAttribute("width", svgX(b) - svgX(a));
          band.setAttribute("visibility", b - a >= DRAG_PX ? "visible" : "hidden");
        }
      },
      // Steps a..b (data coordinates) as the view: within this one, or all steps when as wide or wider.
      zoomTo(a, b) {
        if (!o.onZoom) return;
        if (a <= frame.x0 && b >= frame.x1) o.onZoom(null);
        else if (Math.ceil(clamp(a)) < Math.floor(clamp(b))) o.onZoom([Math.ceil(clamp(a)), Math.floor(clamp(b))]);
      },
      // The end of a press: a drag zooms, a double press shows all steps, a single one picks its
      // step once no second press follows (the pick scrolls to the samples, which would take a
      // double press's second one off the plot).
      release(clientX, double) {
        if (dragFrom === null) return;
        const from = dragFrom;
        input.cancel();
        clearTimeout(pendingPick);
        if (double && o.onZoom) {
          o.onZoom(null);
        } else if (Math.abs(clientX - from.px) >= DRAG_PX) {
          input.zoomTo(Math.min(from.step, toStep(clientX)), Math.max(from.step, toStep(clientX)));
        } else if (o.onPick) {
          const step = clamp(Math.round(toStep(clientX)));
          pendingPick = setTimeout(() => o.onPick(step), DOUBLE_CLICK_MS);
        }
      },
    };
    svg.classList.add("pickable");
    svg.addEventListener("mousemove", (e) => input.hover(e.clientX, e.clientY));
    svg.addEventListener("mouseleave", input.hide);
    svg.addEventListener("mousedown", (e) => { input.press(e.clientX); e.preventDefault(); });
    svg.addEventListener("mouseup", (e) => input.release(e.clientX, e.detail >= 2));
    touchInput(svg, input);
  }

  // Fingers do what the mouse does: a tap shows the values and picks the step, a one-finger
  // horizontal drag zooms (vertical swipes scroll the page: touch-action pan-y), a pinch zooms to
  // the view that keeps the steps first under the fingers under them (pinching in to the whole
  // view or more: all steps), a double tap shows all steps.
  function touchInput(svg, input) {
    let pinch = null;  // {ids, steps: the steps first under each finger, px: where each finger is now}
    const finger = (e, id) => [...e.touches].find((t) => t.identifier === id);
    svg.addEventListener("touchstart", (e) => {
      if (e.touches.length === 1) {
        input.press(e.touches[0].clientX);
        input.hover(e.touches[0].clientX, e.touches[0].clientY);
      } else if (e.touches.length === 2) {
        const [a, b] = e.touches;
        input.cancel();
        pinch = { ids: [a.identifier, b.identifier], steps: [input.toStep(a.clientX), input.toStep(b.clientX)],
                  px: [a.clientX, b.clientX] };
      }
    }, { passive: true });
    svg.addEventListener("touchmove", (e) => {
      if (pinch) {
        pinch.px = pinch.ids.map((id, i) => (finger(e, id) || { clientX: pinch.px[i] }).clientX);
      } else if (input.pressedAt() !== null && e.touches.length === 1) {
        input.hover(e.touches[0].clientX, e.touches[0].clientY);
        if (e.cancelable) e.preventDefault();  // a horizontal drag is ours (touch-action lets pan-y through)
      }
    }, { passive: false });
    svg.addEventListener("touchend", (e) => {
      if (e.cancelable) e.preventDefault();  // no mouse events emulated after it: the touch was handled
      if (pinch) {
        if (e.touches.length < 2) pinchEnd();
        return;
      }
      const t = e.changedTouches[0], from = input.pressedAt();
      if (!t || from === null) return;
      const tap = Math.abs(t.clientX - from) < DRAG_PX;
      const double = tap && lastTap !== null && e.timeStamp - lastTap < DOUBLE_CLICK_MS;
      lastTap = tap && !double ? e.timeStamp : null;
      input.release(t.clientX, double);
    }, { passive: false });
    svg.addEventListener("touchcancel", () => { pinch = null; input.cancel(); });

    function pinchEnd() {
      const { steps: [sa, sb], px: [pa, pb] } = pinch;
      pinch = null;
      const perStep = (input.svgX(pb) - input.svgX(pa)) / (sb - sa);  // svg units per step, after the pinch
      if (!(perStep > 0)) return;  // fingers crossed, or both on one step: no view
      const first = sa - (input.svgX(pa) - M.l) / perStep;
      input.zoomTo(first, first + (W - M.l - M.r) / perStep);
    }
  }

  function showTip(tip, step, series, smoothed, weight) {
    const rows = [];
    series.forEach((s, i) => {
      const raw = s.points.find((p) => p[0] === step);
      if (!raw) return;
      const sm = smoothed[i].find((p) => p[0] === step);
      const value = raw[1] === null ? "not finite" : fmt(raw[1], 5) +
        (weight && sm && sm[1] !== null ? ` (smoothed ${fmt(sm[1], 5)})` : "");
      rows.push([displayName(s), value, colorOf(s, i)]);
    });
    const head = document.createElement("div");
    head.className = "tip-step";
    head.textContent = "step " + step;
    const lines = rows.map(([name, value, color]) => {
      const line = document.createElement("div");
      line.style.setProperty("--c", color);
      const n = document.createElement("span");
      n.textContent = name + " ";
      const v = document.createElement("b");
      v.textContent = value;
      line.append(n, v);
      return line;
    });
    tip.replaceChildren(head, ...lines);
    tip.hidden = false;
  }

  // One entry per signal: its catalog name (the API's column too), the Prometheus name beside it;
  // overlaid runs share it.
  function legend(series) {
    const div = document.createElement("div");
    div.className = "legend";
    const seen = new Set();
    series.forEach((s, i) => {
      if (seen.has(s.label)) return;
      seen.add(s.label);
      const span = document.createElement("span");
      span.style.setProperty("--c", colorOf(s, i));
      span.textContent = s.name || s.label;
      if (s.prometheus) {
        const prom = document.createElement("code");
        prom.className = "prom";
        prom.textContent = s.prometheus;
        span.append(" ", prom);
      }
      if (s.description) span.title = s.description;
      div.appendChild(span);
    });
    return div;
  }

  return { draw, legend, smooth, DASHES };
})();
