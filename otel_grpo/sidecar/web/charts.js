// The run page's charts (plot.js draws each one): which charts, their rows, and when each is drawn.
// Charts: the catalog's panels (GET /api/panels) the runs shown have columns for, then any step
// column added by search (every column of GET /api/runs/<id>/metrics of the run shown and of each
// run overlaid can be found and charted; its chart draws it for every run that has it). The layout
// is in the URL: add=<column> and hide=<chart id> (repeated), scale=<chart id>:<linear|log|symlog>.
// Rows: each chart asks the steps API for its own columns only, per run, downsampled to about the
// screen's width (a column missing from a row is a step the signal was not logged at, bridged; a
// null is a non-finite value, a gap); a zoom asks for its range again. A chart is drawn, and its
// rows asked for, once it scrolls into view. Other runs are overlaid by step, a colour each. Reads
// and writes `state` and `runData` (app.js).
"use strict";

const SCALES = ["linear", "log", "symlog"];
const SCALE_NOTE = { log: " (log scale)", symlog: " (symmetric log scale)" };
const SEARCH_SHOWN = 40;  // results listed at once (the count says how many match)
const NEAR_PX = 200;  // a chart this close below (or above) the view is drawn already: no blank on a slow scroll
let mounted = [];  // the charts drawn (plot.js), destroyed before a redraw
let cards = [];  // every chart card on the page, drawn or not
let resizer = null;
let watcher = null;  // the IntersectionObserver that draws a card as it nears the view

// A chart never needs every step of a long run: the steps API downsamples to `points` rows, keeping
// each bucket's first and last step and every column's lowest and highest step, so a one-step
// spike is drawn. About the screen's width in pixels. A zoom asks for its own steps the same way,
// so detail appears as the range narrows.
function chartPoints() {
  return Math.min(2000, Math.max(1000, Math.round(window.innerWidth * (window.devicePixelRatio || 1))));
}

// A chart reads each row's step and its columns: `fields=step` leaves out the run id and time that
// every row would repeat (half of a one-column chart's bytes: benchmarks/README.md, explorer).
function stepsPath(runId, columns, zoom) {
  const p = new URLSearchParams({ metrics: columns.join(","), points: String(chartPoints()), fields: "step" });
  if (zoom) { p.set("step_min", String(Math.floor(zoom[0]))); p.set("step_max", String(Math.ceil(zoom[1]))); }
  return `${runPath(runId)}/steps?${p}`;
}

// ---- which charts -------------------------------------------------------------------------------
// A panel's id is its first signal's catalog key (`kl`); an added chart's is its column.
function chartSpecs() {
  const specs = [];
  for (const panel of runData.panels) {
    const id = panel.series[0].key;
    if (state.hide.includes(id)) continue;
    specs.push({ id, title: panel.title, group: panel.group, unit: panel.unit, series: panel.series,
                 defaultScale: panel.scale, scale: state.scales[id] || panel.scale });
  }
  if (!runData.panels.some((panel) => runsShown().some((run) => linesOf(panel, run).length))) specs.push(...ownSpecs());
  const known = new Map(shownColumns().map((c) => [c.name, c]));
  for (const name of state.add) {
    const c = known.get(name) || { name };
    specs.push({ id: name, title: name, group: "added", unit: c.unit || "", added: true, defaultScale: "linear",
                 scale: state.scales[name] || "linear",
                 series: [{ name, prometheus: c.prometheus, description: c.description }] });
  }
  return specs;
}

// The runs shown have step history but none of it is a default chart's (a run that logged only
// columns the catalog's panels do not name): a chart of each of their columns, the first OWN_CHARTS
// (search finds the rest), never "no step history yet". Laid out as the panels are: hide=<column>
// removes one, scale=<column>:log rescales it.
const OWN_CHARTS = 12;
function ownSpecs() {
  return shownColumns().filter((c) => !state.add.includes(c.name) && !state.hide.includes(c.name)).slice(0, OWN_CHARTS)
    .map((c) => ({ id: c.name, title: c.name, group: "run", unit: c.unit || "", defaultScale: "linear",
                   scale: state.scales[c.name] || "linear",
                   series: [{ name: c.name, prometheus: c.prometheus, description: c.description }] }));
}

// The columns a chart draws for a run (of those its /metrics lists): a templated signal
// (`attribute`) has one per label value, its Prometheus selector beside it quoted as PromQL reads a
// string (a reward function named `say "hi"` is `reward_fn="say \"hi\""`; JSON's escapes are Go's).
function linesOf(spec, run) {
  const have = runData.names.get(run) || new Set();
  const names = [...have];
  const out = [];
  spec.series.forEach((s, i) => {
    const prefix = s.name + "/";
    const columns = s.attribute ? names.filter((n) => n.startsWith(prefix)).sort() : have.has(s.name) ? [s.name] : [];
    columns.forEach((column, j) => {
      const value = s.attribute ? column.slice(prefix.length) : null;
      out.push({ column, name: column, label: column, description: s.description, colorIndex: i + j,
                 prometheus: s.attribute ? `${s.prometheus}{${s.attribute}=${JSON.stringify(value)}}` : s.prometheus });
    });
  });
  return out;
}

// The runs on the charts: the run shown, then those overlaid that could be read.
function runsShown() {
  return [state.run, ...state.overlay.filter((r) => runData.runInfo.has(r))];
}

// The step columns of every run shown, once each by name (the run shown first); a description
// any of them has is kept (a column one run logged under the catalog's name, another not).
function shownColumns() {
  const out = new Map();
  for (const run of runsShown()) {
    for (const c of runData.described.get(run) || []) {
      const seen = out.get(c.name);
      if (!seen || (!seen.description && c.description)) out.set(c.name, c);
    }
  }
  return [...out.values()];
}

// Every chart's step range, the same on all (known before any chart has rows): the zoom, else
// from the first to the last step of the runs shown.
function stepDomain(runs) {
  if (state.zoom) return state.zoom;
  const infos = runs.map((r) => runData.runInfo.get(r)).filter((i) => i && i.first_step !== null && i.last_step !== null);
  return infos.length ? [Math.min(...infos.map((i) => i.first_step)), Math.max(...infos.map((i) => i.last_step))] : null;
}

// ---- rows ---------------------------------------------------------------------------------------
// Each overlaid run's record (its step range) and columns, once.
async function loadOverlay(data = runData) {
  await Promise.all(state.overlay.filter((r) => !data.runInfo.has(r)).map(async (r) => {
    const info = await runThere(runPath(r));  // first: a run that is not there is one request refused
    if (info === null) return;  // drawn without that run (the page says so)
    const described = await api(`${runPath(r)}/metrics`);
    data.runInfo.set(r, info);
    data.described.set(r, described);
    data.names.set(r, new Set(described.map((c) => c.name)));
  }));
}

const rowsKey = (run, columns, zoom) => JSON.stringify([run, columns, zoom]);

// A chart's rows of one run at hand, best first: its own (of the zoom), the whole run's (a zoom
// draws those at once while its own are asked for), those from before the last refresh.
// {rows, exact} or null.
function rowsAtHand(run, columns, zoom) {
  for (const held of [runData.rows, runData.stale]) {
    const exact = held.get(rowsKey(run, columns, zoom));
    if (exact) return { rows: exact, exact: held === runData.rows };
    const whole = zoom && held.get(rowsKey(run, columns, null));
    // Rows of every step from the first to the last came whole (not downsampled): they hold every
    // step of any zoom already.
    if (whole) return { rows: whole, exact: held === runData.rows && complete(whole) };
  }
  return null;
}

const complete = (rows) => !rows.length || rows[rows.length - 1].step - rows[0].step + 1 === rows.length;

// Asks for a chart's rows of one run (once: a second ask waits on the first). A read that failed (a
// 503 while the database is away) rejects and is forgotten: it is never rows (an empty run), and the
// next ask (a refresh, a zoom) asks again.
function loadRows(run, columns, zoom) {
  const key = rowsKey(run, columns, zoom);
  if (!runData.asked.has(key)) {
    const data = runData;
    data.asked.set(key, api(stepsPath(run, columns, zoom)).then((rows) => { data.rows.set(key, rows); },
                                                                (err) => { data.asked.delete(key); throw err; }));
  }
  return runData.asked.get(key);
}

// ---- drawing ------------------------------------------------------------------------------------
// One point per step that has the column: a step without it (a metric logged every other step) is
// no point, so the line bridges it; a null (a non-finite value) is a gap in the line.
function pointsOf(rows, column) {
  return rows.filter((r) => column in r)
    .map((r) => [r.step, typeof r[column] === "number" && Number.isFinite(r[column]) ? r[column] : null]);
}

function marks() {
  // An alert's step comes from the server (the last step to end before it started): the rows at
  // hand may be downsampled.
  const out = runData.alerts.map((a, i) => ({ step: a.step, kind: "alert", name: fmtCell(a.alertname), runbook: runbookOf(a),
                                              label: `${a.alertname} (${a.status}) from ${a.starts_at}`, onOpen: () => showAlert(i) }))
    .filter((m) => m.step !== null);
  if (state.step !== null) out.unshift({ step: +state.step, kind: "picked", label: `step ${state.step}: samples shown below` });
  return out;
}

function setZoom(zoom) {
  state.zoom = zoom;
  writeUrl(true);
  redrawPlots();  // at once from the rows at hand; each chart again with its range's own where they add steps
}

// The cards, one per chart with a column in a run shown, not drawn yet (a box of the chart's height).
function plotsSection() {
  const runs = runsShown();
  const grid = h("div", { class: "grid", id: "plots" });
  const compare = runs.length > 1;
  const made = [];
  for (const spec of chartSpecs()) {
    const lines = runs.flatMap((run, runIndex) => linesOf(spec, run).map((l) => ({ ...l, run, runIndex })));
    if (lines.length) made.push(chartCard(spec, lines, compare));
  }
  grid.append(...made);
  if (!made.length) grid.appendChild(h("p", { class: "muted", text: "no step history yet" }));
  if (compare) grid.prepend(runLegend(runs));
  return { grid, made };
}

function chartCard(spec, lines, compare) {
  const scale = h("select", { class: "chart-scale", "aria-label": `scale of ${spec.title}`, title: "y scale",
                              onchange: (e) => setScale(spec, e.target.value) },
    ...SCALES.map((s) => h("option", { value: s, text: s })));
  scale.value = spec.scale;
  const remove = h("button", { type: "button", class: "chart-remove", text: "×", title: "remove this chart (search adds it back)",
                               "aria-label": `remove chart ${spec.title}`, onclick: () => removeChart(spec) });
  const title = h("h3", { text: spec.title + (SCALE_NOTE[spec.scale] || "") });  // drawn: the scale its values allow
  const card = h("div", { class: "card plot-card", "data-group": spec.group, "data-chart": spec.id },
    h("div", { class: "chart-head" }, title, scale, remove),
    h("div", { class: "plot-wrap plot-pending" }), Plot.legend(lines, compare));
  card.columns = [...new Set(lines.map((l) => l.column))];
  card.chart = { spec, lines, compare, title, drawn: null };
  return card;
}

// Draws a card from the rows at hand, at once (the same task: a redraw does not blink), then
// again with its own rows once they come, where the ones at hand were a stand-in.
function drawCard(card) {
  const c = card.chart, zoom = state.zoom, data = runData;
  const runs = [...new Set(c.lines.map((l) => l.run))];
  const columnsOf = (run) => [...new Set(c.lines.filter((l) => l.run === run).map((l) => l.column))];
  const atHand = runs.map((run) => rowsAtHand(run, columnsOf(run), zoom));
  if (atHand.every(Boolean)) paint(card, new Map(runs.map((r, i) => [r, atHand[i].rows])));
  if (atHand.every((a) => a && a.exact)) return Promise.resolve();
  const current = () => runData === data && state.zoom === zoom && card.isConnected;  // else a later page or zoom took over
  return Promise.all(runs.map((run) => loadRows(run, columnsOf(run), zoom))).then(() => {
    if (current()) paint(card, new Map(runs.map((run) => [run, data.rows.get(rowsKey(run, columnsOf(run), zoom))])));
  }, (err) => { if (current()) paintFailure(card, err); });
}

// A chart whose rows could not be read says so, with the server's message: never "no finite value"
// (a run that diverged) for a database that did not answer. A chart drawn from the rows before the
// refresh stays, the note above it; the next refresh asks again.
function paintFailure(card, err) {
  const note = h("p", { class: "chart-error alert-firing",
                        text: `could not load these steps: ${err.message || err}; asked again on the next refresh` });
  const c = card.chart;
  card.querySelector(".chart-error")?.remove();
  if (c.drawn) c.drawn.element.before(note);
  else card.querySelector(".plot-wrap").replaceWith(h("div", { class: "plot-wrap plot-pending plot-failed" }, note));
}

function paint(card, rowsByRun) {
  const c = card.chart;
  const lines = c.lines.map((l) => ({ ...l, points: pointsOf(rowsByRun.get(l.run) || [], l.column) }))
    .filter((l) => l.points.some((p) => p[1] !== null));
  const old = card.querySelector(".plot-wrap");
  card.querySelector(".chart-error")?.remove();  // a failed read's note (paintFailure): these rows came
  if (c.drawn) { c.drawn.destroy(); mounted = mounted.filter((m) => m !== c.drawn); }
  if (!lines.length) {
    c.drawn = null;
    old.replaceWith(h("div", { class: "plot-wrap plot-pending" }, h("p", { class: "muted", text: "no finite value in these steps" })));
    return;
  }
  const chart = Plot.chart({ xDomain: stepDomain(runsShown()), smooth: state.smooth, marks: marks(), compare: c.compare,
                             onPick: openStep, onZoom: setZoom, lines, scale: c.spec.scale, unit: c.spec.unit });
  const width = old.clientWidth;
  old.replaceWith(chart.element);
  chart.mount(width);
  setText(c.title, c.spec.title + (SCALE_NOTE[chart.element.dataset.scale] || ""));
  c.drawn = chart;
  card.dataset.drawn = "1";
  mounted.push(chart);
}

// Which colour is which run, when runs are compared.
function runLegend(runs) {
  return h("div", { class: "run-legend", id: "run-legend" }, ...runs.map((run, i) => h("span", { "data-run": run },
    Plot.swatch(Plot.RUN_COLORS[i % Plot.RUN_COLORS.length], []), " " + run + (i ? "" : " (this run)"))));
}

// The chart that has the keyboard's focus, and its cursor's step (null: none); null where no chart has it.
function keyboardPlace() {
  const card = document.activeElement && document.activeElement.closest(".plot-card");
  if (!card || !cards.includes(card)) return null;
  const seen = Plot.inspect(card);
  return { chart: card.dataset.chart, step: seen ? seen.cursor : null };
}

// The focus and the cursor back on the same chart, drawn again, unless the focus went elsewhere meanwhile.
function restorePlace(place) {
  if (document.activeElement && document.activeElement !== document.body) return;
  const card = cards.find((c) => c.dataset.chart === place.chart);
  if (card && card.chart.drawn) card.chart.drawn.focusAt(place.step);
}

// The charts as cards; those in or near the view drawn now, the others as they scroll near it.
// Resolves once the ones in view are drawn with their own rows (the page is then ready).
function redrawPlots() {
  const plots = document.getElementById("plots");
  let drawn = Promise.resolve();
  if (plots && runData) {
    const place = keyboardPlace();  // taken with the old charts: the new ones get it back once drawn
    for (const chart of mounted) chart.destroy();
    mounted = [];
    if (watcher) watcher.disconnect();
    const { grid, made } = plotsSection();
    plots.replaceWith(grid);
    cards = made;
    const near = (b) => b.bottom >= -NEAR_PX && b.top <= window.innerHeight + NEAR_PX;
    const now = cards.filter((card) => near(card.getBoundingClientRect()));  // one layout for all
    drawn = Promise.all(now.map(drawCard));
    if (place) drawn = drawn.then(() => restorePlace(place));
    watcher = new IntersectionObserver((entries) => {
      for (const e of entries) {
        if (!e.isIntersecting) continue;
        watcher.unobserve(e.target);
        drawCard(e.target);
      }
    }, { rootMargin: `${NEAR_PX}px 0px` });
    for (const card of cards) if (!now.includes(card)) watcher.observe(card);
    if (resizer) resizer.disconnect();
    resizer = new ResizeObserver(() => { for (const chart of mounted) chart.resize(chart.element.clientWidth); });
    resizer.observe(grid);
  }
  const reset = document.getElementById("zoom-reset");
  if (reset) {
    reset.hidden = !state.zoom;
    setText(reset, state.zoom ? `steps ${state.zoom[0]}–${state.zoom[1]}: show all` : "");
  }
  const layout = document.getElementById("charts-reset");
  if (layout) layout.hidden = !(state.add.length || state.hide.length || Object.keys(state.scales).length);
  refreshSearch();
  return drawn;
}

// An alert mark's label: its row in the alerts table, flashed; the focus goes to the row's step link
// (Enter there opens that step's samples), so the keyboard follows the eye.
function showAlert(i) {
  const row = document.getElementById("alert-" + i);
  if (!row) return;
  row.scrollIntoView({ block: "center" });
  const step = row.querySelector("a.alert-step");
  if (step) step.focus({ preventScroll: true });
  row.classList.remove("flash");
  void row.offsetWidth;  // restart the highlight's animation
  row.classList.add("flash");
}

// ---- the layout ---------------------------------------------------------------------------------
function setScale(spec, scale) {
  if (scale === spec.defaultScale) delete state.scales[spec.id]; else state.scales[spec.id] = scale;
  writeUrl(true);
  redrawPlots();
}

function removeChart(spec) {
  if (spec.added) state.add = state.add.filter((c) => c !== spec.id); else state.hide = [...state.hide, spec.id];
  delete state.scales[spec.id];
  writeUrl(true);
  redrawPlots();
}

// A column found by search: its chart when one shows it; the panel that holds it when that panel
// was removed; else a chart of its own.
function showColumn(name) {
  const card = [...document.querySelectorAll(".plot-card")].find((c) => c.columns.includes(name));
  if (card) { card.scrollIntoView({ block: "center" }); return; }
  const panel = runData.panels.find((p) => p.series.some((s) => s.name === name || (s.attribute && name.startsWith(s.name + "/"))));
  const id = panel && state.hide.includes(panel.series[0].key) ? panel.series[0].key : name;
  if (id === name) state.add = [...state.add, name]; else state.hide = state.hide.filter((x) => x !== id);
  writeUrl(true);
  redrawPlots();
  const added = [...document.querySelectorAll(".plot-card")].find((c) => c.dataset.chart === id);
  if (added) added.scrollIntoView({ block: "center" });
}

// ---- search over every step column ---------------------------------------------------------------
// Over the columns of every run shown: every word typed must be in the column's name, Prometheus
// name, key or description.
function matchingColumns(query, all) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  return all.filter((c) => {
    const text = [c.name, c.prometheus, c.key, c.description].filter(Boolean).join(" ").toLowerCase();
    return words.every((w) => text.includes(w));
  });
}

function refreshSearch() {
  const input = document.getElementById("chart-search"), list = document.getElementById("chart-results");
  if (!input || !runData) return;
  const all = shownColumns();
  input.placeholder = `find a step column (${all.length})…`;
  if (!input.value.trim()) { list.hidden = true; list.replaceChildren(); return; }
  const found = matchingColumns(input.value, all);
  const charted = new Set([...document.querySelectorAll(".plot-card")].flatMap((c) => c.columns));
  const items = found.slice(0, SEARCH_SHOWN).map((c) => h("li", {}, h("button", {
    type: "button", class: "chart-add", "data-col": c.name, title: c.description || c.name,
    onclick: () => { showColumn(c.name); input.value = ""; refreshSearch(); input.focus(); },  // the list is gone: back to the box
  }, h("span", { class: "col-name", text: c.name }), " ", ...(c.prometheus ? [h("code", { class: "prom", text: c.prometheus })] : []),
     h("span", { class: "col-action", text: charted.has(c.name) ? "shown" : "add chart" }))));
  const count = h("li", { class: "muted count", text: `${found.length} of ${all.length} columns` +
                                                      (found.length > SEARCH_SHOWN ? `, the first ${SEARCH_SHOWN} listed` : "") });
  list.replaceChildren(count, ...items);
  list.hidden = false;
}

function chartSearch() {
  const input = h("input", { id: "chart-search", type: "search", autocomplete: "off", "aria-controls": "chart-results",
                             "aria-label": "find a step column to chart" });
  const list = h("ul", { id: "chart-results", class: "chart-results", hidden: "" });
  input.addEventListener("input", refreshSearch);
  input.addEventListener("keydown", (e) => {
    const first = list.querySelector("button.chart-add");
    if (e.key === "Enter" && first) { e.preventDefault(); first.click(); }
    else if (e.key === "ArrowDown" && first) { e.preventDefault(); first.focus(); }
    else if (e.key === "Escape") { input.value = ""; refreshSearch(); }
  });
  list.addEventListener("keydown", (e) => {
    const buttons = [...list.querySelectorAll("button.chart-add")], i = buttons.indexOf(document.activeElement);
    if (e.key === "ArrowDown" && i < buttons.length - 1) { e.preventDefault(); buttons[i + 1].focus(); }
    else if (e.key === "ArrowUp") { e.preventDefault(); (i > 0 ? buttons[i - 1] : input).focus(); }
    else if (e.key === "Escape") { input.value = ""; refreshSearch(); input.focus(); }
  });
  const reset = h("button", { id: "charts-reset", type: "button", hidden: "", text: "default charts",
                              title: "the catalog's charts, no added ones, default scales",
                              onclick: () => { state.add = []; state.hide = []; state.scales = {}; writeUrl(true); redrawPlots(); } });
  return h("div", { class: "chart-search" }, input, list, reset);
}

const COMPARE_CHOICES = 20;  // runs offered at a time in "compare runs"; the search box finds the others

function plotTools(runs) {
  const smooth = h("input", { id: "smooth", type: "range", min: "0", max: "0.99", step: "0.01",
                              "aria-label": "smoothing (exponential moving average weight)" });
  smooth.value = String(state.smooth);
  const value = h("span", { id: "smooth-value", text: state.smooth ? String(state.smooth) : "off" });
  smooth.addEventListener("input", () => {
    state.smooth = +smooth.value;
    setText(value, state.smooth ? String(state.smooth) : "off");
    if (!mounted.every((chart) => chart.smooth(state.smooth))) redrawPlots();  // in place while the series stay
  });
  smooth.addEventListener("change", () => writeUrl());  // once let go (a URL a step of the slider is many history writes)
  const choices = h("div", { class: "choices" });
  const search = h("input", { id: "compare-search", type: "search", placeholder: "search runs", "aria-label": "search runs to compare",
                              maxlength: String(SEARCH_MAX_CHARS) });
  const list = h("div", { id: "compare-list" });
  const box = (run) => {
    const input = h("input", { type: "checkbox", "data-run": run, onchange: async (e) => {
      state.overlay = e.target.checked ? [...state.overlay, run] : state.overlay.filter((x) => x !== run);
      writeUrl(true);
      try {
        await loadOverlay();
      } catch (err) {  // the database away: the error page, which shows this view, run added, once it can
        showError(err);
        return;
      }
      redrawPlots();
    } });
    input.checked = state.overlay.includes(run);
    return h("label", {}, input, " " + run);
  };
  // The runs overlaid, then the first of the others the search matches (the server filters them).
  const fill = (found) => {
    const others = found.map((r) => r.run_id).filter((r) => r !== state.run && !state.overlay.includes(r))
      .slice(0, COMPARE_CHOICES);
    const shown = [...state.overlay, ...others];
    list.replaceChildren(...(shown.length ? shown.map(box) : [h("span", { class: "muted", text: "no other runs" })]));
  };
  let asked = 0;
  onTyped(search, async (q) => {
    const mine = ++asked;
    let found;
    try {
      found = await api(`/api/runs?limit=${COMPARE_CHOICES + 1}` + (q ? "&q=" + encodeURIComponent(q) : ""));
    } catch (err) {  // the database away: said, not "no other runs"; the runs overlaid stay ticked
      if (mine === asked) {
        list.replaceChildren(...state.overlay.map(box), h("span", { id: "compare-error", class: "alert-firing",
          text: `cannot search runs: ${err.message || err}; edit the search to try again` }));
      }
      return;
    }
    if (mine === asked) fill(found);
  });
  fill(runs);
  choices.append(search, list, h("p", { class: "muted", text: "other runs are drawn in their own colours, aligned by step" }));
  const compare = h("details", { id: "compare" }, h("summary", { text: "compare runs" }), choices);
  const reset = h("button", { id: "zoom-reset", type: "button", hidden: "", onclick: () => setZoom(null) });
  return h("div", { class: "controls plot-tools" }, chartSearch(), h("label", { for: "smooth", text: "smoothing" }), smooth, value,
    compare, reset,
    h("span", { class: "muted hint",
                text: "hover or tap: values · drag or pinch: zoom · double-click or double-tap: all steps · click: that step's samples" }));
}
