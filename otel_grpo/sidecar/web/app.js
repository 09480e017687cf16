// The sidecar's web page, a run explorer: runs (a page at a time, searched by the server), per-step
// plots (hover, zoom, smoothing, other runs overlaid by step, alerts on the step axis), alerts, and the
// samples table (table.js). The view lives in the URL: #/?q=exp&status=active&page=2 (the runs), and
// #/run/<id>?step=4&group=0&sample=3&q=..&sort=reward&desc=1&vs=<run>,<run>
// &smooth=0.6&from=10&to=40&fcol=kl_ref_mean&fmin=0.1&fmax= links to exactly what is shown.
"use strict";

const main = document.getElementById("main");
const REFRESH_MS = 10000;
const state = freshState(null);
let refreshTimer = null;
let sampleSteps = [];
let runData = null;  // {panels, steps, alerts, overlay: Map run -> steps, detail: {zoom, runs: Map run -> steps}} of the run shown

function freshState(run) {
  return { run, step: null, group: null, sample: null, orderBy: null, desc: false, q: "", overlay: [], smooth: 0,
           zoom: null, filter: { col: "", min: "", max: "" } };
}

// The read token: typed into a masked field (never a prompt(), which shows it), kept in this
// browser's storage, sent as a bearer token (util.js).
const tokenForm = document.getElementById("token-form");
document.getElementById("token-button").addEventListener("click", () => {
  tokenForm.hidden = !tokenForm.hidden;
  document.getElementById("token-forget").hidden = !readToken();
  if (!tokenForm.hidden) document.getElementById("token-input").focus();
});
tokenForm.addEventListener("submit", (e) => {
  e.preventDefault();  // nothing is sent anywhere but this browser's storage (the CSP has form-action 'none')
  const input = document.getElementById("token-input");
  localStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  tokenForm.hidden = true;
  route();
});
document.getElementById("token-forget").addEventListener("click", () => {
  localStorage.removeItem(TOKEN_KEY);
  tokenForm.hidden = true;
  route();
});

// ---- the URL ------------------------------------------------------------------------------------
function runHash(runId, params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") p.set(k, String(v));
  const qs = p.toString();
  return "#/run/" + encodeURIComponent(runId) + (qs ? "?" + qs : "");
}

function stateParams() {
  return { step: state.step, group: state.group, sample: state.sample, q: state.q, sort: state.orderBy,
           desc: state.orderBy && state.desc ? 1 : null, vs: state.overlay.join(","), smooth: state.smooth || null,
           from: state.zoom && state.zoom[0], to: state.zoom && state.zoom[1],
           fcol: state.filter.col, fmin: state.filter.col && state.filter.min, fmax: state.filter.col && state.filter.max };
}

// Writes the view into the URL without a navigation (no hashchange, no reload).
function writeUrl() {
  if (state.run !== null) history.replaceState(null, "", runHash(state.run, stateParams()));
}

function readUrl(runId, query) {
  const p = new URLSearchParams(query);
  const num = (k) => (p.get(k) !== null && p.get(k) !== "" && Number.isFinite(+p.get(k)) ? +p.get(k) : null);
  Object.assign(state, freshState(runId), {
    step: num("step") === null ? null : String(num("step")), group: p.get("group"), sample: p.get("sample"),
    q: p.get("q") || "", orderBy: p.get("sort"), desc: p.get("desc") === "1",
    overlay: (p.get("vs") || "").split(",").filter((r) => r && r !== runId), smooth: Math.min(Math.max(num("smooth") || 0, 0), 0.99),
    zoom: num("from") !== null && num("to") !== null && num("from") < num("to") ? [num("from"), num("to")] : null,
    filter: { col: p.get("fcol") || "", min: p.get("fmin") || "", max: p.get("fmax") || "" },
  });
}

// ---- runs ---------------------------------------------------------------------------------------
// One page of runs at a time, filtered by the server (`/api/runs?q=&status=&limit=&offset=`): the
// page draws RUNS_PAGE rows whether there are ten runs or 10,000. The list's view is in the URL too:
// #/?q=exp&status=active&page=3.
const RUNS_PAGE = 50;
const SEARCH_WAIT_MS = 250;  // typing pauses this long before the list is asked for again

function runsHash(view) {
  const p = new URLSearchParams();
  if (view.q) p.set("q", view.q);
  if (view.status) p.set("status", view.status);
  if (view.page > 1) p.set("page", String(view.page));
  const qs = p.toString();
  return "#/" + (qs ? "?" + qs : "");
}

async function showRuns(query) {
  document.getElementById("crumb").textContent = "runs";
  const p = new URLSearchParams(query);
  const view = { q: p.get("q") || "", status: p.get("status") || "", page: Math.max(1, parseInt(p.get("page"), 10) || 1) };
  const search = h("input", { id: "runs-search", type: "search", placeholder: "search run ids", value: view.q });
  const status = h("select", { id: "runs-status" },
    ...[["", "any status"], ["firing", "firing"], ["active", "active"], ["idle", "idle"]].map(([v, t]) => h("option", { value: v, text: t })));
  status.value = view.status;
  const list = h("div", { id: "runs-list" });
  let timer = null;
  let shown = 0;  // the latest request: an older answer arriving late is dropped
  const load = async () => {
    const mine = ++shown;
    history.replaceState(null, "", runsHash(view));
    const rows = await runsPage(view);
    if (mine === shown) list.replaceChildren(...rows);
  };
  const refilter = () => { view.page = 1; load().catch(showError); };
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => { view.q = search.value.trim(); refilter(); }, SEARCH_WAIT_MS);
  });
  status.addEventListener("change", () => { view.status = status.value; refilter(); });
  list.addEventListener("click", (e) => {
    const turn = e.target.dataset && e.target.dataset.page;
    if (turn) { view.page = +turn; load().catch(showError); }
  });
  main.replaceChildren(h("h2", { text: "Runs" }),
    h("div", { class: "controls" }, h("label", { for: "runs-search", text: "run" }), search, status), list);
  await load();
}

// The table of one page of runs and its pager ("51–100 of 10,000", previous, next).
async function runsPage(view) {
  const params = new URLSearchParams({ limit: String(RUNS_PAGE), offset: String((view.page - 1) * RUNS_PAGE) });
  if (view.q) params.set("q", view.q);
  if (view.status) params.set("status", view.status);
  const response = await apiFetch("/api/runs?" + params);
  const runs = await response.json();
  const total = Number(response.headers.get("X-Total-Count") || runs.length);
  if (!runs.length) {
    const filtered = view.q || view.status;
    return [h("p", { class: "muted empty", id: "runs-count", text: filtered ? "no runs match" : "no runs yet" })];
  }
  const table = h("table", { id: "runs-table" }, h("thead", {}, h("tr", {},
    ...["run", "status", "model", "first step", "last step", "samples", "last update"].map((c) => h("th", { text: c })))));
  const body = h("tbody");
  for (const r of runs) {
    const link = h("a", { href: runHash(r.run_id), text: r.run_id });
    body.appendChild(h("tr", {}, h("td", {}, link), h("td", { class: "status-" + r.status, text: r.status }),
      h("td", { text: fmtCell(r.model) }),
      h("td", { class: "num", text: fmtCell(r.first_step) }), h("td", { class: "num", text: fmtCell(r.last_step) }),
      h("td", { class: "num", text: fmtCell(r.sample_count) }), h("td", { text: fmtCell(r.last_update) })));
  }
  table.appendChild(body);
  const first = (view.page - 1) * RUNS_PAGE + 1;
  const count = `${first.toLocaleString("en")}–${(first + runs.length - 1).toLocaleString("en")} of ${total.toLocaleString("en")}`;
  const pager = h("div", { class: "controls pager" },
    h("button", { type: "button", id: "runs-prev", "data-page": String(view.page - 1), text: "previous" }),
    h("span", { id: "runs-count", text: count }),
    h("button", { type: "button", id: "runs-next", "data-page": String(view.page + 1), text: "next" }));
  pager.querySelector("#runs-prev").disabled = view.page <= 1;
  pager.querySelector("#runs-next").disabled = first + runs.length - 1 >= total;
  return [pager, table];  // the count and the pager above the rows: in view without scrolling
}

// ---- plots --------------------------------------------------------------------------------------
// A plot never needs every step of a long run: the steps API downsamples to `points` rows, keeping
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
  return [...runs].some(([r, s]) => s.length !== inZoom(r === state.run ? runData.steps : runData.overlay.get(r)));
}

// One point per step that has the column: a step without it (a metric logged every other step) is
// no point, so the line bridges it; a null (a non-finite value) is a gap in the line.
// A step column is the signal's catalog name (`grpo.kl`); a templated signal has one column per
// label value (`grpo.reward_fn.mean/<fn>`), each its own line.
function seriesFor(panel, steps, run, runIndex) {
  const out = [];
  panel.series.forEach((s, colorIndex) => {
    const prefix = s.name + "/";
    const columns = s.attribute ? [...new Set(steps.flatMap((r) => Object.keys(r)))].filter((k) => k.startsWith(prefix)).sort()
      : [s.name];
    columns.forEach((column, j) => {
      const points = steps.filter((r) => column in r)
        .map((r) => [r.step, typeof r[column] === "number" && Number.isFinite(r[column]) ? r[column] : null]);
      const value = s.attribute ? column.slice(prefix.length) : null;
      const prometheus = s.attribute ? `${s.prometheus}{${s.attribute}="${value}"}` : s.prometheus;
      out.push({ label: column, name: column, prometheus, description: s.description, points, run, runIndex,
                 colorIndex: colorIndex + j });
    });
  });
  return out;
}

function marks() {
  // An alert's step comes from the server (the last step to end before it started): the rows at
  // hand may be downsampled.
  const out = runData.alerts.map((a) => ({ step: a.step, kind: "alert",
                                           label: `${a.alertname} (${a.status}) from ${a.starts_at}` }))
    .filter((m) => m.step !== null);
  if (state.step !== null) out.unshift({ step: +state.step, kind: "picked", label: `step ${state.step}: samples shown below` });
  return out;
}

function setZoom(zoom) {
  state.zoom = zoom;
  writeUrl();
  // At once from the rows at hand; again with the range's own only where they differ (a redraw
  // replaces the plots, and with them a gesture that had begun on one).
  redrawPlots();
  loadDetail().then((more) => { if (more) redrawPlots(); }).catch(() => {});
}

function plotsSection() {
  const { panels, steps, overlay, detail } = runData;
  const grid = h("div", { class: "grid", id: "plots", "data-steps": String(steps.length) });
  const zoomed = detail && detail.zoom === state.zoom ? detail.runs : new Map();
  const rowsOf = (run, whole) => zoomed.get(run) || whole;
  const runs = [[state.run, rowsOf(state.run, steps)],
    ...state.overlay.filter((r) => overlay.has(r)).map((r) => [r, rowsOf(r, overlay.get(r))])];
  const all = runs.flatMap(([, s]) => s.map((r) => r.step));
  const xDomain = state.zoom || (all.length ? [Math.min(...all), Math.max(...all)] : null);  // the same on every panel
  const opts = { xDomain, smooth: state.smooth, marks: marks(), onPick: openStep, onZoom: setZoom };
  for (const panel of panels) {
    const series = runs.flatMap(([run, s], i) => seriesFor(panel, s, run, i)).filter((s) => s.points.some((p) => p[1] !== null));
    if (!series.length) continue;
    const scaleNote = { log: " (log scale)", symlog: " (symmetric log scale)" }[panel.scale] || "";
    grid.appendChild(h("div", { class: "card plot-card", "data-group": panel.group },
      h("h3", { text: panel.title + scaleNote }),
      Plot.draw(series, { ...opts, scale: panel.scale, unit: panel.unit }), Plot.legend(series)));
  }
  if (!grid.children.length) grid.appendChild(h("p", { class: "muted", text: "no step history yet" }));
  if (runs.length > 1) grid.prepend(runLegend(runs.map(([run]) => run)));
  return grid;
}

// Which line style is which run, when runs are overlaid.
function runLegend(runs) {
  return h("div", { class: "run-legend", id: "run-legend" }, ...runs.map((run, i) => {
    const sample = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    sample.setAttribute("viewBox", "0 0 30 6");
    const line = document.createElementNS("http://www.w3.org/2000/svg", "line");
    for (const [k, v] of Object.entries({ x1: 0, x2: 30, y1: 3, y2: 3, stroke: "currentColor", "stroke-width": 2,
                                          "stroke-dasharray": Plot.DASHES[i % Plot.DASHES.length] })) line.setAttribute(k, v);
    sample.appendChild(line);
    return h("span", { "data-run": run }, sample, " " + run + (i ? "" : " (this run)"));
  }));
}

function redrawPlots() {
  const plots = document.getElementById("plots");
  if (plots && runData) plots.replaceWith(plotsSection());
  const reset = document.getElementById("zoom-reset");
  if (reset) {
    reset.hidden = !state.zoom;
    reset.textContent = state.zoom ? `steps ${state.zoom[0]}–${state.zoom[1]}: show all` : "";
  }
}

async function loadOverlay() {
  await Promise.all(state.overlay.filter((r) => !runData.overlay.has(r)).map(async (r) => {
    try { runData.overlay.set(r, await api(stepsPath(r))); } catch (e) { runData.overlay.set(r, []); }
  }));
}

const COMPARE_CHOICES = 20;  // runs offered at a time in "compare runs"; the search box finds the others

function plotTools(runs) {
  const smooth = h("input", { id: "smooth", type: "range", min: "0", max: "0.99", step: "0.01" });
  smooth.value = String(state.smooth);
  const value = h("span", { id: "smooth-value", text: state.smooth ? String(state.smooth) : "off" });
  smooth.addEventListener("input", () => {
    state.smooth = +smooth.value;
    value.textContent = state.smooth ? String(state.smooth) : "off";
    writeUrl();
    redrawPlots();
  });
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
    const runs = [...state.overlay, ...others];
    list.replaceChildren(...(runs.length ? runs.map(box) : [h("span", { class: "muted", text: "no other runs" })]));
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
  choices.append(search, list, h("p", { class: "muted", text: "other runs are drawn dashed, aligned by step" }));
  const compare = h("details", { id: "compare" }, h("summary", { text: "compare runs" }), choices);
  const reset = h("button", { id: "zoom-reset", type: "button", hidden: "", onclick: () => setZoom(null) });
  return h("div", { class: "controls plot-tools" }, h("label", { for: "smooth", text: "smoothing" }), smooth, value, compare, reset,
    h("span", { class: "muted hint",
                text: "hover or tap: values · drag or pinch: zoom · double-click or double-tap: all steps · click: that step's samples" }));
}

// ---- alerts -------------------------------------------------------------------------------------
// An alert's runbook: its `runbook_url` annotation (every rule of ours has one: docs/operations.md),
// linked only when it is a web address (an annotation is text anyone who can post alerts wrote).
function runbookOf(alert) {
  try {
    const url = new URL(alert.annotations.runbook_url || "");
    return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
  } catch (e) {
    return null;
  }
}

// Each cell carries its column's name (data-label): on a phone a row is a card of labelled lines.
function alertsSection(alerts) {
  if (!alerts.length) return h("p", { class: "muted", id: "alerts", text: "no alerts for this run" });
  const columns = ["status", "alert", "severity", "step", "summary", "runbook", "started", "ended"];
  const table = h("table", { id: "alerts-table" }, h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { text: c })))));
  const body = h("tbody");
  alerts.forEach((a, i) => {
    const summary = a.annotations.summary || a.annotations.description || "";
    const step = a.step;
    const runbook = runbookOf(a);
    const cell = (label, props, ...children) => h("td", { ...props, "data-label": label }, ...children);
    body.appendChild(h("tr", { id: "alert-" + i, "data-fingerprint": a.fingerprint },
      cell("status", { class: "alert-" + a.status, text: a.status }),
      cell("alert", { class: "alert-name", text: fmtCell(a.alertname) }),
      cell("severity", { text: fmtCell(a.labels.severity) }),
      step === null ? cell("step", {}) : cell("step", { class: "num" }, h("a", {
        href: runHash(state.run, { step }), class: "alert-step", text: String(step),
        title: "the last step before the alert fired: open its samples",
        onclick: (e) => { e.preventDefault(); openStep(step); } })),
      cell("summary", { class: "alert-summary", text: summary }),
      cell("runbook", {}, ...(runbook ? [h("a", { href: runbook, class: "runbook", target: "_blank", rel: "noopener noreferrer",
                                                  title: runbook, text: "runbook" })] : [])),
      cell("started", { text: a.starts_at }),
      cell("ended", { text: a.status === "resolved" ? fmtCell(a.ends_at) : "" })));
  });
  table.appendChild(body);
  return h("div", { id: "alerts", class: "scroll-x" }, table);
}

// ---- the run page -------------------------------------------------------------------------------
// A plot click or an alert's step: that step's samples (or the nearest step that has some).
function openStep(step) {
  if (!sampleSteps.length) return;
  const best = sampleSteps.reduce((a, b) => (Math.abs(b - step) < Math.abs(a - step) ? b : a));
  setStep(best);
  loadSamples().then(() => document.getElementById("samples-heading").scrollIntoView());
}

async function fetchRunData(runId) {
  const base = runPath(runId);
  const [panels, steps, alerts, withSamples] = await Promise.all([api("/api/panels"), api(stepsPath(runId)),
    api(`/api/alerts?run_id=${encodeURIComponent(runId)}`), api(`${base}/sample-steps`)]);
  return { panels, steps, alerts, withSamples };
}

// Live view: plots, alerts and the step list follow the run; the samples table is left as the
// user arranged it (sort, step, expanded cells).
async function refreshRun() {
  if (!state.run || !document.getElementById("plots")) return;
  const data = await fetchRunData(state.run);
  sampleSteps = data.withSamples;
  runData = { ...data, overlay: new Map(), detail: null };
  await Promise.all([loadOverlay(), loadDetail()]);
  redrawPlots();
  document.getElementById("alerts").replaceWith(alertsSection(data.alerts));
  const select = document.getElementById("step-select");
  if (select && select.options.length !== sampleSteps.length) select.replaceWith(samplesControls(sampleSteps).querySelector("select"));
}
window.otelGrpoRefresh = refreshRun;

async function showRun(runId, query) {
  readUrl(runId, query);
  document.getElementById("crumb").textContent = "run " + runId;
  const [data, choices] = await Promise.all([fetchRunData(runId), api(`/api/runs?limit=${COMPARE_CHOICES + 1}`)]);
  sampleSteps = data.withSamples;
  runData = { ...data, overlay: new Map(), detail: null };
  await Promise.all([loadOverlay(), loadDetail()]);
  if (state.step === null && sampleSteps.length) state.step = String(sampleSteps[0]);
  main.replaceChildren(
    h("h2", { text: "Run " + runId }),
    plotTools(choices),
    plotsSection(),
    h("h2", { text: "Alerts" }), alertsSection(data.alerts),
    h("h2", { id: "samples-heading", text: "Samples" }), samplesControls(sampleSteps),
    h("p", { id: "samples-common", class: "common" }),
    h("div", { id: "group-view" }),
    h("div", { class: "table-wrap", id: "samples" }));
  redrawPlots();
  await loadSamples();
  if (state.group !== null && state.step !== null) await showGroup({ step: +state.step, group: +state.group }).catch(groupError);
  writeUrl();
  refreshTimer = setInterval(() => refreshRun().catch(() => {}), REFRESH_MS);
  document.body.setAttribute("data-ready", "run");
}

function showError(err) {
  main.replaceChildren(h("p", { class: "alert-firing", text: String(err.message || err) }));
}

async function route() {
  document.body.removeAttribute("data-ready");
  if (refreshTimer !== null) { clearInterval(refreshTimer); refreshTimer = null; }
  const m = location.hash.match(/^#\/run\/([^?]+)(?:\?(.*))?$/);
  try {
    if (m) await showRun(decodeURIComponent(m[1]), m[2] || "");
    else {
      state.run = null;
      await showRuns((location.hash.match(/^#\/?\?(.*)$/) || [])[1] || "");
      document.body.setAttribute("data-ready", "runs");
    }
  } catch (err) {
    showError(err);
    document.body.setAttribute("data-ready", "error");
  }
}

window.addEventListener("hashchange", route);
route();
