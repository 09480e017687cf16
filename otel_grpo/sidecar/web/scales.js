// The numbers of a step chart (plot.js): its y scale (linear, log, symlog), ticks at most
// MAX_Y_TICKS whatever the range, tick labels that tell the ticks apart, values written short.
"use strict";

const PlotScales = (() => {
  const MAX_Y_TICKS = 6;

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

  return { fmt, labels, scaleOf, yTicks, yRange };
})();
