// The sidecar's web page: runs, per-step plots, alerts and the samples table of a run.
// Data is only ever inserted with textContent (never innerHTML): a completion containing
// <script> is shown as text.
"use strict";

const main = document.getElementById("main");
const TEXT_PREVIEW = 240;
const state = { run: null, step: null, orderBy: null, desc: false, q: "" };
const REFRESH_MS = 10000;
let refreshTimer = null;

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

async function api(path) {
  const headers = {};
  const token = localStorage.getItem("otel-grpo-read-token");
  if (token) headers.Authorization = "Bearer " + token;
  const r = await fetch(path, { headers });
  if (r.status === 401) {
    document.getElementById("token-button").hidden = false;
    throw new Error("the read API needs a token: use 'set read token'");
  }
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

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

function seriesFor(panel, steps) {
  const out = [];
  for (const s of panel.series) {
    const keys = s.key ? [s.key] : [...new Set(steps.flatMap((r) => Object.keys(r)))].filter((k) => k.startsWith(s.prefix)).sort();
    for (const key of keys) {
      const points = steps.filter((r) => typeof r[key] === "number").map((r) => [r.step, r[key]]);
      if (points.length || s.key) out.push({ label: key, description: s.description, points });
    }
  }
  return out;
}

function plotsSection(panels, steps) {
  const grid = h("div", { class: "grid", id: "plots", "data-steps": String(steps.length) });
  for (const panel of panels) {
    const series = seriesFor(panel, steps).filter((s) => s.points.length);
    if (!series.length) continue;
    grid.appendChild(h("div", { class: "card plot-card", "data-group": panel.group },
      h("h3", { text: panel.title + (panel.scale === "log" ? " (log scale)" : "") }),
      Plot.draw(series, panel.scale), Plot.legend(series)));
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

function textCell(value) {
  const td = h("td", { class: "text" });
  const full = fmtCell(value);
  if (full.length <= TEXT_PREVIEW) { td.textContent = full; return td; }
  const span = h("span", { text: full.slice(0, TEXT_PREVIEW) + "…" });
  let open = false;
  const btn = h("button", { class: "more", type: "button", text: "more", onclick: () => {
    open = !open;
    span.textContent = open ? full : full.slice(0, TEXT_PREVIEW) + "…";
    btn.textContent = open ? "less" : "more";
  } });
  td.append(span, btn);
  return td;
}

async function loadSamples() {
  const p = new URLSearchParams({ limit: "500" });
  if (state.step !== null) p.set("step", state.step);
  if (state.orderBy) { p.set("order_by", state.orderBy); if (state.desc) p.set("desc", "true"); }
  if (state.q) p.set("q", state.q);
  const rows = await api(`/api/runs/${encodeURIComponent(state.run)}/samples?${p}`);
  const wrap = document.getElementById("samples");
  if (!rows.length) { wrap.replaceChildren(h("p", { class: "muted empty", text: "no samples" })); return; }
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((c) => c !== "run_id");
  const head = h("tr");
  for (const c of cols) {
    const cls = "sortable" + (state.orderBy === c ? (state.desc ? " sorted-desc" : " sorted-asc") : "");
    head.appendChild(h("th", { class: cls, "data-col": c, text: c, onclick: () => {
      state.desc = state.orderBy === c ? !state.desc : false;
      state.orderBy = c;
      loadSamples().catch(showError);
    } }));
  }
  const body = h("tbody");
  for (const r of rows) {
    body.appendChild(h("tr", {}, ...cols.map((c) => typeof r[c] === "string" && c !== "time"
      ? textCell(r[c]) : h("td", { class: typeof r[c] === "number" ? "num" : "", text: fmtCell(r[c]) }))));
  }
  wrap.replaceChildren(h("table", { id: "samples-table" }, h("thead", {}, head), body));
}

function samplesControls(sampleSteps) {
  const select = h("select", { id: "step-select", onchange: (e) => { state.step = e.target.value; loadSamples().catch(showError); } });
  for (const s of sampleSteps) select.appendChild(h("option", { value: String(s), text: "step " + s }));
  if (state.step !== null) select.value = String(state.step);
  const search = h("input", { id: "search", type: "search", placeholder: "search prompt / completion" });
  search.value = state.q;
  search.addEventListener("change", () => { state.q = search.value; loadSamples().catch(showError); });
  return h("div", { class: "controls" }, h("label", { text: "step " }), select, search);
}

async function fetchRunData(runId) {
  const enc = encodeURIComponent(runId);
  return Promise.all([api("/api/panels"), api(`/api/runs/${enc}/steps`), api(`/api/alerts?run_id=${enc}`),
    api(`/api/runs/${enc}/sample-steps`)]);
}

// Live view: plots, alerts and the step list follow the run; the samples table is left as the
// user arranged it (sort, step, expanded cells).
async function refreshRun() {
  if (!state.run || !document.getElementById("plots")) return;
  const [panels, steps, alerts, sampleSteps] = await fetchRunData(state.run);
  document.getElementById("plots").replaceWith(plotsSection(panels, steps));
  document.getElementById("alerts").replaceWith(alertsSection(alerts));
  const select = document.getElementById("step-select");
  if (select && select.options.length !== sampleSteps.length) select.replaceWith(samplesControls(sampleSteps).querySelector("select"));
}
window.otelGrpoRefresh = refreshRun;

async function showRun(runId) {
  if (state.run !== runId) Object.assign(state, { run: runId, step: null, orderBy: null, desc: false, q: "" });
  document.getElementById("crumb").textContent = "run " + runId;
  const [panels, steps, alerts, sampleSteps] = await fetchRunData(runId);
  if (state.step === null && sampleSteps.length) state.step = String(sampleSteps[0]);
  main.replaceChildren(
    h("h2", { text: "Run " + runId }),
    plotsSection(panels, steps),
    h("h2", { text: "Alerts" }), alertsSection(alerts),
    h("h2", { text: "Samples" }), samplesControls(sampleSteps),
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
