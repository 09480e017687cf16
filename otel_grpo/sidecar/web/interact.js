// What a user does to a step chart (plot.js draws it on uPlot): hover (or a finger: touch.js) shows
// every line's value at the step under the pointer in a box, and every chart's cursor follows it
// (uPlot's sync); a click picks that step (once no second click follows); a horizontal drag zooms
// to the dragged steps (the caller redraws every chart), a double click shows all steps. From the
// keyboard: the chart takes the focus (Tab), Left/Right move its cursor a step, Home/End to the
// first/last step in view, with the same box; Enter picks the step. Marks at steps: alerts
// (labelled, linked) and the picked step. All text is set through textContent.
"use strict";

const PlotInteract = (() => {
  const FLAG_PX = 150;  // room an alert's label takes right of its line
  const { DRAG_PX, DOUBLE_CLICK_MS } = PlotTouch;
  let pendingPick = null;  // shared by every chart: a redraw replaces them

  function displayName(line) {
    return (line.name || line.label) + (line.runIndex ? ` [${line.run}]` : "");
  }

  // Hover box, pick, zoom and the marks, around uPlot's cursor and selection.
  function bind(u, element, c, series, [x0, x1]) {
    const tip = h("div", { class: "plot-tip", hidden: "" });
    element.appendChild(tip);
    const layer = h("div", { class: "marks" });
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
    const keys = keyboard(u, c, () => { here = true; }, () => { here = false; tip.hidden = true; });
    PlotTouch.bind(u.over, { stepAt, zoomTo, release, hover(clientX, clientY) {
      here = true;
      const over = u.over.getBoundingClientRect();
      u.setCursor({ left: clientX - over.left, top: clientY - over.top });
    } });
    return keys;
  }

  function fillTip(tip, step, out, at) {
    const lines = out.filter((s) => !s.raw && s.values.has(step)).map((s) => {
      const raw = s.values.get(step), sm = s.smoothed ? s.ys[at.get(step)] : null;
      const value = raw === null ? "not finite"
        : PlotScales.fmt(raw, 5) + (sm !== null && sm !== undefined ? ` (smoothed ${PlotScales.fmt(sm, 5)})` : "");
      return h("div", { style: `--c: ${s.color}` }, h("span", { text: displayName(s.line) + " " }), h("b", { text: value }));
    });
    tip.replaceChildren(h("div", { class: "tip-step", text: "step " + step }), ...lines);
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
      const mark = h("div", { class: "mark mark-" + m.kind, "data-step": String(m.step), title: m.label,
                              style: `left: ${x}px` });
      if (m.kind === "alert") {
        const row = placed.filter((p) => Math.abs(p - x) < 90).length;
        placed.push(x);
        // Near the right edge: to the line's left.
        const flag = h("span", { class: "mark-flag" + (x > width - FLAG_PX ? " flip" : ""), style: `top: ${row * 17}px` },
          h("button", { type: "button", class: "mark-label", text: m.name, title: m.label + ": show it in the alerts table",
                        onclick: () => m.onOpen && m.onOpen() }),
          ...(m.runbook ? [h("a", { class: "mark-runbook", href: m.runbook, target: "_blank", rel: "noopener noreferrer",
                                    text: "runbook" })] : []));
        for (const kind of ["mousedown", "touchstart"]) flag.addEventListener(kind, (e) => e.stopPropagation(), { passive: true });
        mark.appendChild(flag);
      }
      return [mark];
    }));
  }


  // The cursor from the keyboard, on the steps drawn in view: uPlot places it by position, so it
  // goes to a step's own x (its index then is that step's). `show` and `hide` the hover box.
  function keyboard(u, c, show, hide) {
    const over = u.over;
    over.tabIndex = 0;
    over.setAttribute("role", "group");
    over.setAttribute("aria-label", "steps chart: Left and Right move the cursor a step, Home and End to the first " +
                                    "and last, Enter shows that step's samples");
    over.addEventListener("keydown", (e) => {
      const xs = u.data[0], { min, max } = u.scales.x;
      let lo = 0, hi = xs.length - 1;
      while (lo <= hi && xs[lo] < min) lo++;
      while (hi >= lo && xs[hi] > max) hi--;
      if (lo > hi) return;
      const at = u.cursor.left >= 0 ? u.cursor.idx : null;
      let i;
      if (e.key === "ArrowRight") i = at === null || at < lo ? lo : Math.min(hi, at + 1);
      else if (e.key === "ArrowLeft") i = at === null || at > hi ? hi : Math.max(lo, at - 1);
      else if (e.key === "Home") i = lo;
      else if (e.key === "End") i = hi;
      else if (e.key === "Enter" && at !== null && c.onPick) { e.preventDefault(); c.onPick(xs[at]); return; }
      else return;
      e.preventDefault();  // the arrows would scroll the page
      show();
      u.setCursor({ left: u.valToPos(xs[i], "x"), top: parseFloat(over.style.height) / 2 }, true, true);  // hooks, and the other charts (sync)
    });
    over.addEventListener("blur", hide);
    return {
      // The focus back on this chart, its cursor (and box) at `step` (null: none): where a keyboard user was
      // on the chart this one replaces (a live refresh draws every chart again).
      focusAt(step) {
        over.focus({ preventScroll: true });
        if (step === null) return;
        show();
        u.setCursor({ left: u.valToPos(step, "x"), top: parseFloat(over.style.height) / 2 }, true, true);
      },
    };
  }

  return { bind, displayName };
})();
