// The run page's charts (plot.js draws each one): which charts, and their rows.
// Charts: the catalog's panels (GET /api/panels) the run has columns for, then any step column
// added by search (every column of GET /api/runs/<id>/metrics can be found and charted). The layout
// is in the URL: add=<column> and hide=<chart id> (repeated), scale=<chart id>:<linear|log|symlog>.
// Rows: per run, the steps API's rows with every column (a column missing from a row is a step
// the signal was not logged at, bridged; a null is a non-finite value, a gap: a request naming
// columns would answer null for both), downsampled to about the screen's width; a zoom asks for
// its range again. Other runs are overlaid by step, a colour each. Reads and writes `state` and
// `runData` (app.js).
"use strict";

const SCALES = ["linear", "log", "symlog"];
const SCALE_NOTE = { log: " (log scale)", symlog: " (symmetric log scale)" };
const SEARCH_SHOWN = 40;  // results listed at once (the count says how many match)
let mounted = [];  // the charts on the page (plot.js), destroyed before a redraw
let resizer = null;

// A chart never needs every step of a long run: the steps API downsamples to `points` rows, keeping
// each bucket's first and last step and every column's lowest and highest step, so a one-step
// spike is drawn. About the screen's width in pixels. A zoom asks for its own steps the same way,
// so detail appears as the range narrows.
function chartPoints() {
  return Math.min(2000, Math.max(1000, Math.round(window.innerWidth * (window.devicePixelRatio || 1))));
}

function stepsPath(runId, zoom) {
  const p = new URLSearchParams({ points: String(chartPoints()) });
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
  const known = new Map(runData.columns.map((c) => [c.name, c]));
  for (const name of state.add) {
    const c = known.get(name) || { name };
    specs.push({ id: name, title: name, group: "added", unit: c.unit || "", added: true, defaultScale: "linear",
                 scale: state.scales[name] || "linear",
                 series: [{ name, prometheus: c.prometheus, description: c.description }] });
  }
  return specs;
}

// The step columns of a run's rows (`run_id`, `step` and `time` are the row's own).
function namesOf(rows) {
  const names = new Set();
  for (const r of rows) for (const k in r) names.add(k);
  for (const own of ["run_id", "step", "time"]) names.delete(own);
  return names;
}

// The columns a chart draws for a run: a templated signal (`attribute`) has one per label value.
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
                 prometheus: s.attribute ? `${s.prometheus}{${s.attribute}="${value}"}` : s.prometheus });
    });
  });
  return out;
}

// ---- rows ---------------------------------------------------------------------------------------
async function loadOverlay() {
  await Promise.all(state.overlay.filter((r) => !runData.steps.has(r)).map(async (r) => {
    let rows = [];
    try { rows = await api(stepsPath(r)); } catch (e) { /* drawn without that run */ }
    runData.steps.set(r, rows);
    runData.names.set(r, namesOf(rows));
  }));
}

// The zoomed range's own rows of the run shown and of each overlaid run (their whole-run rows
// stay for the alerts' steps). True when they add rows to those at hand: a run short enough to
// have come whole adds none.
async function loadDetail() {
  const zoom = state.zoom;
  if (!runData) return false;
  if (!zoom) { runData.detail = null; return false; }
  const ids = [state.run, ...state.overlay];
  const rows = await Promise.all(ids.map((r) => api(stepsPath(r, zoom)).catch(() => null)));
  if (state.zoom !== zoom) return false;  // a later zoom wins
  const runs = new Map(ids.map((r, i) => [r, rows[i]]).filter(([, s]) => s !== null));
  runData.detail = { zoom, runs };
  const inZoom = (s) => (s || []).filter((r) => r.step >= zoom[0] && r.step <= zoom[1]).length;
  return [...runs].some(([r, s]) => s.length !== inZoom(runData.steps.get(r)));
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
  writeUrl();
  // At once from the rows at hand; again with the range's own only where they differ (a redraw
  // replaces the charts, and with them a gesture that had begun on one).
  redrawPlots();
  loadDetail().then((more) => { if (more) redrawPlots(); }).catch(() => {});
}

function plotsSection() {
  const { steps, detail } = runData;
  const zoomed = detail && detail.zoom === state.zoom ? detail.runs : new Map();
  const runs = [state.run, ...state.overlay.filter((r) => steps.has(r))];
  const rowsOf = (run) => zoomed.get(run) || steps.get(run) || [];
  const grid = h("div", { class: "grid", id: "plots", "data-steps": String((steps.get(state.run) || []).length) });
  const all = runs.flatMap((r) => steps.get(r).map((x) => x.step));
  const xDomain = state.zoom || (all.length ? [Math.min(...all), Math.max(...all)] : null);  // the same on every chart
  const compare = runs.length > 1;
  const opts = { xDomain, smooth: state.smooth, marks: marks(), compare, onPick: openStep, onZoom: setZoom };
  const cards = [];
  for (const spec of chartSpecs()) {
    const lines = runs.flatMap((run, runIndex) => linesOf(spec, run).map((l) => ({ ...l, run, runIndex,
                                                                                 points: pointsOf(rowsOf(run), l.column) })))
      .filter((l) => l.points.some((p) => p[1] !== null));
    if (!lines.length) continue;
    const chart = Plot.chart({ ...opts, lines, scale: spec.scale, unit: spec.unit });
    cards.push([chartCard(spec, lines, chart, compare), chart]);
  }
  grid.append(...cards.map(([card]) => card));
  if (!cards.length) grid.appendChild(h("p", { class: "muted", text: "no step history yet" }));
  if (compare) grid.prepend(runLegend(runs));
  return { grid, charts: cards.map(([card, chart]) => ({ card, chart })) };
}

function chartCard(spec, lines, chart, compare) {
  const scale = h("select", { class: "chart-scale", "aria-label": `scale of ${spec.title}`, title: "y scale",
                              onchange: (e) => setScale(spec, e.target.value) },
    ...SCALES.map((s) => h("option", { value: s, text: s })));
  scale.value = spec.scale;
  const remove = h("button", { type: "button", class: "chart-remove", text: "×", title: "remove this chart (search adds it back)",
                               "aria-label": `remove chart ${spec.title}`, onclick: () => removeChart(spec) });
  const card = h("div", { class: "card plot-card", "data-group": spec.group, "data-chart": spec.id },
    h("div", { class: "chart-head" }, h("h3", { text: spec.title + (SCALE_NOTE[chart.element.dataset.scale] || "") }), scale, remove),
    chart.element, Plot.legend(lines, compare));
  card.columns = [...new Set(lines.map((l) => l.column))];
  return card;
}

// Which colour is which run, when runs are compared.
function runLegend(runs) {
  return h("div", { class: "run-legend", id: "run-legend" }, ...runs.map((run, i) => h("span", { "data-run": run },
    Plot.swatch(Plot.RUN_COLORS[i % Plot.RUN_COLORS.length], []), " " + run + (i ? "" : " (this run)"))));
}

// Charts are drawn once in the page (uPlot takes their width); a resize follows the cards.
function redrawPlots() {
  const plots = document.getElementById("plots");
  if (plots && runData) {
    for (const m of mounted) m.chart.destroy();
    const { grid, charts } = plotsSection();
    plots.replaceWith(grid);
    mounted = charts;
    const widths = mounted.map((m) => m.chart.element.clientWidth);  // one layout for all, before any chart is drawn
    mounted.forEach((m, i) => m.chart.mount(widths[i]));
    if (resizer) resizer.disconnect();
    resizer = new ResizeObserver(() => { for (const m of mounted) m.chart.resize(m.chart.element.clientWidth); });
    resizer.observe(grid);
  }
  const reset = document.getElementById("zoom-reset");
  if (reset) {
    reset.hidden = !state.zoom;
    reset.textContent = state.zoom ? `steps ${state.zoom[0]}–${state.zoom[1]}: show all` : "";
  }
  const layout = document.getElementById("charts-reset");
  if (layout) layout.hidden = !(state.add.length || state.hide.length || Object.keys(state.scales).length);
  refreshSearch();
}

function showAlert(i) {
  const row = document.getElementById("alert-" + i);
  if (!row) return;
  row.scrollIntoView({ block: "center" });
  row.classList.remove("flash");
  void row.offsetWidth;  // restart the highlight's animation
  row.classList.add("flash");
}

// ---- the layout ---------------------------------------------------------------------------------
function setScale(spec, scale) {
  if (scale === spec.defaultScale) delete state.scales[spec.id]; else state.scales[spec.id] = scale;
  writeUrl();
  redrawPlots();
}

function removeChart(spec) {
  if (spec.added) state.add = state.add.filter((c) => c !== spec.id); else state.hide = [...state.hide, spec.id];
  delete state.scales[spec.id];
  writeUrl();
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
  writeUrl();
  redrawPlots();
  const added = [...document.querySelectorAll(".plot-card")].find((c) => c.dataset.chart === id);
  if (added) added.scrollIntoView({ block: "center" });
}

// ---- search over every step column ---------------------------------------------------------------
// Every word typed must be in the column's name, Prometheus name, key or description.
function matchingColumns(query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  return runData.columns.filter((c) => {
    const text = [c.name, c.prometheus, c.key, c.description].filter(Boolean).join(" ").toLowerCase();
    return words.every((w) => text.includes(w));
  });
}

function refreshSearch() {
  const input = document.getElementById("chart-search"), list = document.getElementById("chart-results");
  if (!input || !runData) return;
  const all = runData.columns;
  input.placeholder = `find a step column (${all.length})…`;
  if (!input.value.trim()) { list.hidden = true; list.replaceChildren(); return; }
  const found = matchingColumns(input.value);
  const charted = new Set([...document.querySelectorAll(".plot-card")].flatMap((c) => c.columns));
  const items = found.slice(0, SEARCH_SHOWN).map((c) => h("li", {}, h("button", {
    type: "button", class: "chart-add", "data-col": c.name, title: c.description || c.name,
    onclick: () => { showColumn(c.name); input.value = ""; refreshSearch(); },
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
                              onclick: () => { state.add = []; state.hide = []; state.scales = {}; writeUrl(); redrawPlots(); } });
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
    value.textContent = state.smooth ? String(state.smooth) : "off";
    if (!mounted.every((m) => m.chart.smooth(state.smooth))) redrawPlots();  // in place while the series stay
  });
  smooth.addEventListener("change", writeUrl);  // once let go (a URL a step of the slider is many history writes)
  const choices = h("div", { class: "choices" });
  const search = h("input", { id: "compare-search", type: "search", placeholder: "search runs" });
  const list = h("div", { id: "compare-list" });
  const box = (run) => {
    const input = h("input", { type: "checkbox", "data-run": run, onchange: async (e) => {
      state.overlay = e.target.checked ? [...state.overlay, run] : state.overlay.filter((x) => x !== run);
      writeUrl();
      await Promise.all([loadOverlay(), loadDetail()]);
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
  let timer = null;
  let asked = 0;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const mine = ++asked;
      const q = search.value.trim();
      const found = await api(`/api/runs?limit=${COMPARE_CHOICES + 1}` + (q ? "&q=" + encodeURIComponent(q) : ""))
        .catch(() => []);
      if (mine === asked) fill(found);
    }, SEARCH_WAIT_MS);
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
