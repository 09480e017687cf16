// The sidecar's web page: runs, per-step plots, alerts, the samples table of a run and the group
// view (the completions of one prompt side by side). Data is only ever inserted with textContent
// (never innerHTML): a completion containing <script> is shown as text.
"use strict";

const main = document.getElementById("main");
const TEXT_PREVIEW = 160;
const ALL_STEPS = "-9223372036854775808";  // step_min for a search over every step
const state = { run: null, step: null, orderBy: null, desc: false, q: "" };
const REFRESH_MS = 10000;
const SEARCH_DELAY_MS = 250;
// Columns first in the table, in this order; the rest follow as the rows have them.
const LEAD = ["step", "sample_index", "group", "reward", "advantage", "completion_length", "prompt", "completion"];
const TEXT_COLUMNS = new Set(["prompt", "completion"]);
let refreshTimer = null;
let sampleSteps = [];

function h(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  return node;
}

class ApiError extends Error {}

async function api(path) {
  const headers = {};
  const token = localStorage.getItem("otel-grpo-read-token");
  if (token) headers.Authorization = "Bearer " + token;
  const r = await fetch(path, { headers });
  if (r.status === 401) {
    document.getElementById("token-button").hidden = false;
    throw new ApiError("the read API needs a token: use 'set read token'");
  }
  if (!r.ok) {
    let detail = "";
    try {
      const body = await r.json();
      detail = typeof body.detail === "string" ? body.detail : body.detail[0].msg;
    } catch (e) { /* no JSON message */ }
    throw new ApiError(`HTTP ${r.status}${detail ? ": " + detail : ""}`);
  }
  return r.json();
}

// Any run id: "/" is sent as %2F (the API reads it back), "." as %2E (a run named ".." must not
// become a dot segment that fetch resolves away).
const runPath = (runId) => "/api/runs/" + encodeURIComponent(runId).replace(/\./g, "%2E");

document.getElementById("token-button").addEventListener("click", () => {
  const t = prompt("Bearer token for the read API");
  if (t !== null) { localStorage.setItem("otel-grpo-read-token", t); route(); }
});

function fmtCell(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(+v.toPrecision(6));
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function showError(err) {
  main.replaceChildren(h("p", { class: "alert-firing", text: String(err.message || err) }));
}

async function showRuns() {
  document.getElementById("crumb").textContent = "runs";
  const runs = await api("/api/runs");
  const table = h("table", { id: "runs-table" }, h("thead", {}, h("tr", {},
    ...["run", "model", "first step", "last step", "samples", "last update"].map((c) => h("th", { text: c })))));
  const body = h("tbody");
  for (const r of runs) {
    const link = h("a", { href: "#/run/" + encodeURIComponent(r.run_id), text: r.run_id });
    body.appendChild(h("tr", {}, h("td", {}, link), h("td", { text: fmtCell(r.model) }),
      h("td", { class: "num", text: fmtCell(r.first_step) }), h("td", { class: "num", text: fmtCell(r.last_step) }),
      h("td", { class: "num", text: fmtCell(r.sample_count) }), h("td", { text: fmtCell(r.last_update) })));
  }
  table.appendChild(body);
  main.replaceChildren(h("h2", { text: "Runs" }), runs.length ? table : h("p", { class: "muted empty", text: "no runs yet" }));
}

// One point per step of the run; a step without a (finite) value is null, a gap in the line.
function seriesFor(panel, steps) {
  const out = [];
  for (const s of panel.series) {
    const keys = s.key ? [s.key] : [...new Set(steps.flatMap((r) => Object.keys(r)))].filter((k) => k.startsWith(s.prefix)).sort();
    for (const key of keys) {
      const points = steps.map((r) => [r.step, typeof r[key] === "number" && Number.isFinite(r[key]) ? r[key] : null]);
      const name = s.prefix ? `${s.name} ${key.slice(s.prefix.length)}` : s.name;
      out.push({ label: key, name, description: s.description, points });
    }
  }
  return out;
}

function plotsSection(panels, steps) {
  const grid = h("div", { class: "grid", id: "plots", "data-steps": String(steps.length) });
  const xDomain = steps.length ? [steps[0].step, steps[steps.length - 1].step] : null;  // the same on every panel
  for (const panel of panels) {
    const series = seriesFor(panel, steps).filter((s) => s.points.some((p) => p[1] !== null));
    if (!series.length) continue;
    const scaleNote = { log: " (log scale)", symlog: " (symmetric log scale)" }[panel.scale] || "";
    grid.appendChild(h("div", { class: "card plot-card", "data-group": panel.group },
      h("h3", { text: panel.title + scaleNote }),
      Plot.draw(series, { scale: panel.scale, unit: panel.unit, xDomain, onPick: openStep }), Plot.legend(series)));
  }
  if (!grid.children.length) grid.appendChild(h("p", { class: "muted", text: "no step history yet" }));
  return grid;
}

function alertsSection(alerts) {
  if (!alerts.length) return h("p", { class: "muted", id: "alerts", text: "no alerts for this run" });
  const table = h("table", { id: "alerts" }, h("thead", {}, h("tr", {},
    ...["status", "alert", "severity", "summary", "started", "ended"].map((c) => h("th", { text: c })))));
  const body = h("tbody");
  for (const a of alerts) {
    const summary = a.annotations.summary || a.annotations.description || "";
    body.appendChild(h("tr", {}, h("td", { class: "alert-" + a.status, text: a.status }), h("td", { text: fmtCell(a.alertname) }),
      h("td", { text: fmtCell(a.labels.severity) }), h("td", { text: summary }), h("td", { text: a.starts_at }),
      h("td", { text: a.status === "resolved" ? fmtCell(a.ends_at) : "" })));
  }
  table.appendChild(body);
  return table;
}

// Long text shows its start; "more" expands the cell in place (and "less" folds it again).
function textCell(value) {
  const full = fmtCell(value);
  const td = h("td", { class: "text", title: full.length > TEXT_PREVIEW ? "" : full });
  if (full.length <= TEXT_PREVIEW) { td.textContent = full; return td; }
  const span = h("span", { text: full.slice(0, TEXT_PREVIEW) + "…" });
  let open = false;
  const btn = h("button", { class: "more", type: "button", text: "more", onclick: () => {
    open = !open;
    span.textContent = open ? full : full.slice(0, TEXT_PREVIEW) + "…";
    btn.textContent = open ? "less" : "more";
    td.classList.toggle("open", open);
  } });
  td.append(span, btn);
  return td;
}

// `run_id` is the page's; `time` is the step cell's tooltip (an ISO time is wider than any number).
function columnsOf(rows) {
  const all = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((c) => c !== "run_id" && c !== "time");
  return [...LEAD.filter((c) => all.includes(c)), ...all.filter((c) => !LEAD.includes(c))];
}

function samplesParams() {
  const p = new URLSearchParams({ limit: "500" });
  if (state.q) { p.set("q", state.q); p.set("step_min", ALL_STEPS); }  // a search spans every step
  else if (state.step !== null) p.set("step", state.step);
  if (state.orderBy) { p.set("order_by", state.orderBy); if (state.desc) p.set("desc", "true"); }
  return p;
}

function headerCell(c) {
  const cls = "sortable" + (state.orderBy === c ? (state.desc ? " sorted-desc" : " sorted-asc") : "");
  return h("th", { class: cls, "data-col": c, title: c + " (click to sort)", text: c, onclick: () => sortBy(c) });
}

function sampleRow(r, cols) {
  const cells = cols.map((c) => TEXT_COLUMNS.has(c) || (typeof r[c] === "string" && r[c].length > 24)
    ? textCell(r[c]) : h("td", { class: typeof r[c] === "number" ? "num" : "",
                                 title: c === "step" ? `step ${r.step}, ${r.time}` : fmtCell(r[c]), text: fmtCell(r[c]) }));
  const open = h("button", { class: "group-open", type: "button", title: "all completions of this prompt, side by side",
                             text: "group", onclick: () => showGroup(r).catch(groupError) });
  return h("tr", {}, h("td", { class: "actions" }, open), ...cells);
}

function tableOf(rows) {
  const cols = columnsOf(rows);
  const colgroup = h("colgroup", {}, h("col", { class: "c-actions" }),
    ...cols.map((c) => h("col", { class: TEXT_COLUMNS.has(c) ? "c-" + c : "c-narrow" })));
  const head = h("tr", {}, h("th", { text: "" }), ...cols.map(headerCell));
  return h("table", { id: "samples-table" }, colgroup, h("thead", {}, head),
    h("tbody", {}, ...rows.map((r) => sampleRow(r, cols))));
}

// Errors of the samples table stay in its own box, and the table shown before stays usable: the
// plots and the rest of the run are never replaced by an error (a 422 on a sort did that).
async function loadSamples() {
  const wrap = document.getElementById("samples");
  const note = document.getElementById("samples-note");
  try {
    const rows = await api(`${runPath(state.run)}/samples?${samplesParams()}`);
    note.textContent = state.q ? `${rows.length}${rows.length === 500 ? "+" : ""} match(es) over all steps` : "";
    note.classList.remove("alert-firing");
    wrap.replaceChildren(rows.length ? tableOf(rows) : h("p", { class: "muted empty", text: "no samples" }));
    wrap.removeAttribute("data-error");
  } catch (err) {
    note.textContent = `cannot show these samples: ${err instanceof ApiError ? err.message : String(err)}`;
    note.classList.add("alert-firing");
    wrap.setAttribute("data-error", "1");
  }
}

function sortBy(column) {
  const before = { orderBy: state.orderBy, desc: state.desc };
  state.desc = state.orderBy === column ? !state.desc : false;
  state.orderBy = column;
  loadSamples().then(() => {
    if (document.getElementById("samples").dataset.error) Object.assign(state, before);  // keep what is shown
  });
}

function samplesControls(steps) {
  const select = h("select", { id: "step-select", onchange: (e) => { state.step = e.target.value; loadSamples(); } });
  for (const s of steps) select.appendChild(h("option", { value: String(s), text: "step " + s }));
  if (state.step !== null) select.value = String(state.step);
  const search = h("input", { id: "search", type: "search", placeholder: "search prompt / completion (all steps)" });
  search.value = state.q;
  let timer = null;
  search.addEventListener("input", () => {  // filters as you type, once the typing pauses
    clearTimeout(timer);
    timer = setTimeout(() => { state.q = search.value.trim(); loadSamples(); }, SEARCH_DELAY_MS);
  });
  return h("div", { class: "controls" }, h("label", { text: "step " }), select, search,
    h("span", { id: "samples-note", class: "muted" }));
}

// A plot click: that step's samples (or the nearest step that has some).
function openStep(step) {
  if (!sampleSteps.length) return;
  const best = sampleSteps.reduce((a, b) => (Math.abs(b - step) < Math.abs(a - step) ? b : a));
  state.step = String(best);
  state.q = "";
  const search = document.getElementById("search");
  if (search) search.value = "";
  const select = document.getElementById("step-select");
  if (select) select.value = state.step;
  loadSamples().then(() => document.getElementById("samples-heading").scrollIntoView());
}

// ---- group view: every stored completion of one prompt at one step, ranked by reward ----------
function groupError(err) {
  document.getElementById("group-view").replaceChildren(h("p", { class: "alert-firing", text: String(err.message || err) }));
}

function sameGroup(a, b) {
  return a.step === b.step && ("group" in a && "group" in b ? a.group === b.group : a.prompt === b.prompt);
}

async function showGroup(row) {
  const p = new URLSearchParams({ step: String(row.step), limit: "10000", order_by: "reward", desc: "true" });
  const rows = (await api(`${runPath(state.run)}/samples?${p}`)).filter((r) => sameGroup(r, row));
  const view = document.getElementById("group-view");
  const fns = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((k) => k.startsWith("reward.")).sort();
  const cards = rows.map((r, i) => h("div", { class: "group-card" + (sameSample(r, row) ? " picked" : "") },
    h("div", { class: "rank", text: `#${i + 1}` }),
    h("table", { class: "group-stats" }, h("tbody", {},
      ...[["reward", r.reward], ...fns.map((f) => [f, r[f]]), ["advantage", r.advantage],
          ["length", r.completion_length], ["sample", r.sample_index]]
        .map(([k, v]) => h("tr", {}, h("th", { text: k }), h("td", { class: "num", text: fmtCell(v) }))))),
    h("pre", { class: "completion", text: fmtCell(r.completion) })));
  const title = `Group at step ${row.step}` + ("group" in row ? ` (group ${row.group})` : "") +
    `: ${rows.length} completion(s) stored, ranked by reward`;
  view.replaceChildren(
    h("div", { class: "group-head" }, h("h3", { text: title }),
      h("button", { type: "button", class: "group-close", text: "close", onclick: () => view.replaceChildren() })),
    h("pre", { class: "prompt", text: fmtCell(row.prompt) }),
    h("div", { class: "group-cards", "data-count": String(rows.length) }, ...cards));
  view.scrollIntoView();
}

function sameSample(a, b) {
  return a.sample_index === b.sample_index && a.completion === b.completion;
}

async function fetchRunData(runId) {
  const base = runPath(runId);
  return Promise.all([api("/api/panels"), api(`${base}/steps`), api(`/api/alerts?run_id=${encodeURIComponent(runId)}`),
    api(`${base}/sample-steps`)]);
}

// Live view: plots, alerts and the step list follow the run; the samples table is left as the
// user arranged it (sort, step, expanded cells).
async function refreshRun() {
  if (!state.run || !document.getElementById("plots")) return;
  const [panels, steps, alerts, stepsWithSamples] = await fetchRunData(state.run);
  sampleSteps = stepsWithSamples;
  document.getElementById("plots").replaceWith(plotsSection(panels, steps));
  document.getElementById("alerts").replaceWith(alertsSection(alerts));
  const select = document.getElementById("step-select");
  if (select && select.options.length !== sampleSteps.length) select.replaceWith(samplesControls(sampleSteps).querySelector("select"));
}
window.otelGrpoRefresh = refreshRun;

async function showRun(runId) {
  if (state.run !== runId) Object.assign(state, { run: runId, step: null, orderBy: null, desc: false, q: "" });
  document.getElementById("crumb").textContent = "run " + runId;
  const [panels, steps, alerts, stepsWithSamples] = await fetchRunData(runId);
  sampleSteps = stepsWithSamples;
  if (state.step === null && sampleSteps.length) state.step = String(sampleSteps[0]);
  main.replaceChildren(
    h("h2", { text: "Run " + runId }),
    plotsSection(panels, steps),
    h("h2", { text: "Alerts" }), alertsSection(alerts),
    h("h2", { id: "samples-heading", text: "Samples" }), samplesControls(sampleSteps),
    h("div", { id: "group-view" }),
    h("div", { class: "table-wrap", id: "samples" }));
  await loadSamples();
  refreshTimer = setInterval(() => refreshRun().catch(() => {}), REFRESH_MS);
  document.body.setAttribute("data-ready", "run");
}

async function route() {
  document.body.removeAttribute("data-ready");
  if (refreshTimer !== null) { clearInterval(refreshTimer); refreshTimer = null; }
  const m = location.hash.match(/^#\/run\/(.+)$/);
  try {
    if (m) await showRun(decodeURIComponent(m[1]));
    else { await showRuns(); document.body.setAttribute("data-ready", "runs"); }
  } catch (err) {
    showError(err);
    document.body.setAttribute("data-ready", "error");
  }
}

window.addEventListener("hashchange", route);
route();
