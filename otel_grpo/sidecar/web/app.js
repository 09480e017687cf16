// The sidecar's web page, a run explorer: runs (a page at a time, searched by the server), per-step
// charts (charts.js, drawn by plot.js: hover, zoom, smoothing, other runs overlaid by step, alerts on
// the step axis, any step column found by search), alerts, and the samples table (table.js). The view
// lives in the URL: #/?q=exp&status=active&page=2 (the runs), and
// #/run/<id>?step=4&group=0&sample=3@<attempt>&q=..&sort=reward&desc=1&vs=<run>&vs=<run>&smooth=0.6&from=10
// &to=40&fcol=kl_ref_mean&fmin=0.1&fmax=&showcol=policy_version&hidecol=entropy_mean
// &add=grpo.learning_rate&hide=loss&scale=kl:linear links to exactly what is shown. Every parameter
// goes through one encoding (hashQuery): a list is the parameter repeated, never joined, since a
// value (a Hydra-style run id `lr=1e-6,bs=32`) may hold any character; one decoding (readUrl)
// reads it back, old links' `vs=<run>,<run>` included.
"use strict";

const main = document.getElementById("main");
const REFRESH_MS = 10000;
const state = freshState(null);
let refreshTimer = null;
let sampleSteps = [];
// The run shown: {panels, alerts, withSamples, runInfo: Map run -> its record (step range),
// described: Map run -> its step columns described (/metrics), names: Map run -> Set of their names,
// rows: Map chart request -> rows, asked: Map chart request -> its promise, stale: the rows before
// the last refresh}; each map holds the run shown and the runs overlaid.
let runData = null;

function freshState(run) {
  return { run, step: null, group: null, sample: null, orderBy: null, desc: false, q: "", overlay: [], smooth: 0,
           zoom: null, filter: { col: "", min: "", max: "" }, columns: { show: [], hide: [] }, add: [], hide: [],
           scales: {} };
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
// The query of a view's hash, "" or "?...": a list is the parameter repeated (read back with getAll),
// an empty value (null, undefined, "") is left out. "@" stays as it is (a fragment may hold it, and reads it
// back the same): a sample's name is `<index>@<attempt>` (table.js's rowName).
function hashQuery(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (Array.isArray(v)) for (const x of v) p.append(k, String(x));
    else if (v !== null && v !== undefined && v !== "") p.set(k, String(v));
  }
  const qs = p.toString().replace(/%40/g, "@");
  return qs ? "?" + qs : "";
}

function runHash(runId, params) {
  return "#/run/" + encodeURIComponent(runId) + hashQuery(params);
}

function stateParams() {
  return { step: state.step, group: state.group?.group,
           groupof: state.group && !("group" in state.group) ? rowName(state.group) : null,
           sample: state.sample && rowName(state.sample),
           q: state.q, sort: state.orderBy, desc: state.orderBy && state.desc ? 1 : null, vs: state.overlay,
           smooth: state.smooth || null,
           from: state.zoom && state.zoom[0], to: state.zoom && state.zoom[1],
           fcol: state.filter.col, fmin: state.filter.col && state.filter.min, fmax: state.filter.col && state.filter.max,
           showcol: state.columns.show, hidecol: state.columns.hide,
           add: state.add, hide: state.hide, scale: Object.entries(state.scales).map(([id, s]) => `${id}:${s}`) };
}

// Writes a view's `hash` into the URL. `push`: a step of its own in the history (a page of runs, a
// step, a sample, a sort, a chart added: what the back button should undo), else it replaces the
// current entry (typing, a drag of the smoothing slider, a link read back in its current form) and no
// back press is spent on it. Neither is a navigation (no hashchange): the page is already showing the
// view; back and forward are (route).
function showHash(hash, push) {
  if (push && hash !== location.hash) history.pushState(null, "", hash);
  else history.replaceState(null, "", hash);
}

// The run page's view into the URL (showHash).
function writeUrl(push = false) {
  if (state.run !== null) showHash(runHash(state.run, stateParams()), push);
}

// What of a link's query `p` a view could not read (`ignored`, said by linkNote): `ignore(k, v, why)`
// adds one and returns null; a parameter not among `known` is one already.
function linkReader(p, known) {
  const ignored = [];
  const ignore = (k, v, why) => { ignored.push(`${k}=${v} (${why})`); return null; };
  for (const k of new Set(p.keys())) if (!known.has(k)) ignore(k, p.get(k), "not a setting of this page");
  return { ignored, ignore };
}

// A link's parameters as `state` holds them, and what of it was not understood (`ignored`: one line
// each, said once at the top of the page: linkNotes). Whole numbers for steps and sample indices
// (a step of 2.5 or a sample of 1e30 was asked of the API, which answered 422); a sample as table.js's
// ROW_NAME reads it (an index, and its writer's attempt where it has one).
const STEP = /^-?(0|[1-9]\d{0,14})$/;
const RUN_PARAMS = new Set(["step", "group", "groupof", "sample", "q", "sort", "desc", "vs", "smooth", "from", "to", "fcol",
                            "fmin", "fmax", "showcol", "hidecol", "add", "hide", "scale"]);
async function readUrl(runId, query) {
  const p = new URLSearchParams(query);
  const { ignored, ignore } = linkReader(p, RUN_PARAMS);
  const num = (k) => (p.get(k) !== null && p.get(k) !== "" && Number.isFinite(+p.get(k)) ? +p.get(k)
    : p.get(k) ? ignore(k, p.get(k), "not a number") : null);
  const matching = (k, re, why) => (p.get(k) === null || p.get(k) === "" ? null : re.test(p.get(k)) ? p.get(k) : ignore(k, p.get(k), why));
  // A bound only with a column (nothing filters unseen), and as its number box reads it (table.js).
  const fcol = p.get("fcol") || "";
  const bound = (k) => (fcol && p.get(k)) || "";
  const step = matching("step", STEP, "not a step number");
  const desc = matching("desc", /^[01]$/, "not 1 or 0") === "1";
  const sample = matching("sample", ROW_NAME, "not a sample index");
  const groupof = matching("groupof", ROW_NAME, "not a sample index");
  if (p.get("group") && groupof !== null) ignore("groupof", groupof, "group= names the group");
  const [from, to] = [num("from"), num("to")];
  const smooth = num("smooth");
  if (smooth !== null && !(smooth >= 0 && smooth <= 0.99)) ignore("smooth", p.get("smooth"), "not within 0–0.99");
  const scales = p.getAll("scale").map((v) => [v.slice(0, v.lastIndexOf(":")), v.slice(v.lastIndexOf(":") + 1), v])
    .filter(([id, s, v]) => (id && SCALES.includes(s)) || ignore("scale", v, "not <chart>:linear, log or symlog"));
  const next = Object.assign(freshState(runId), {
    step, sample: sample && readRowName(sample),
    group: p.get("group") ? { group: p.get("group") } : groupof !== null ? readRowName(groupof) : null,
    q: p.get("q") || "", orderBy: p.get("sort") || null, desc,
    smooth: smooth !== null && smooth >= 0 && smooth <= 0.99 ? smooth : 0,
    zoom: from !== null && to !== null && from < to ? [from, to] : null,
    filter: { col: fcol, min: bound("fmin"), max: bound("fmax") },
    columns: { show: [...new Set(p.getAll("showcol").filter(Boolean))],
               hide: [...new Set(p.getAll("hidecol").filter(Boolean))] },
    add: [...new Set(p.getAll("add").filter(Boolean))], hide: [...new Set(p.getAll("hide").filter(Boolean))],
    scales: Object.fromEntries(scales.map(([id, s]) => [id, s])),
  });
  if (from !== null && to !== null && !(from < to)) ignore("from", `${from}&to=${to}`, "an empty step range");
  next.overlay = await overlaidRuns(p.getAll("vs"), runId);
  return { next, ignored };
}

// The runs a link overlays. Old links joined them (`vs=b,c`) and a run id may hold commas
// (`lr=1e-6,bs=32`): a value that names a run is that run; one that names none but whose parts all
// do is those runs. Only a value with a comma costs a request.
async function overlaidRuns(values, runId) {
  const exists = async (r) => (await runThere(runPath(r))) !== null;
  const runs = await Promise.all(values.filter(Boolean).map(async (value) => {
    const parts = value.split(",").filter(Boolean);
    if (parts.length < 2 || await exists(value)) return [value];
    return (await Promise.all(parts.map(exists))).every(Boolean) ? parts : [value];
  }));
  return [...new Set(runs.flat())].filter((r) => r !== runId);
}

// ---- runs ---------------------------------------------------------------------------------------
// One page of runs at a time, filtered by the server (`/api/runs?q=&status=&limit=&offset=`): the
// page draws RUNS_PAGE rows whether there are ten runs or 10,000. The list's view is in the URL too:
// #/?q=exp&status=active&page=3.
const RUNS_PAGE = 50;
const LAST_RUNS_PAGE = Math.floor(1e9 / RUNS_PAGE) + 1;  // the read API skips 10^9 runs at most (routes/runs.py)
const STATUS_CHOICES = [["", "any status"], ["firing", "firing"], ["active", "active"], ["idle", "idle"]];

function runsHash(view) {
  return "#/" + hashQuery({ q: view.q, status: view.status, page: view.page > 1 ? view.page : null });
}

async function showRuns(query) {
  setText(document.getElementById("crumb"), "runs");
  const p = new URLSearchParams(query);
  const { ignored, ignore } = linkReader(p, new Set(["q", "status", "page"]));
  // Only a status the select can show (not firing,idle nor a typo): the one shown is the one applied.
  const offered = STATUS_CHOICES.some(([v]) => v === p.get("status")) ? p.get("status")
    : p.get("status") && ignore("status", p.get("status"), "not firing, active or idle") || "";
  const page = p.get("page") && !/^[1-9]\d{0,8}$/.test(p.get("page")) ? ignore("page", p.get("page"), "not a page number")
    : +p.get("page") > LAST_RUNS_PAGE ? ignore("page", p.get("page"), `past the last page any store has (${LAST_RUNS_PAGE})`)
    : p.get("page");
  const q = (p.get("q") || "").length > SEARCH_MAX_CHARS
    ? ignore("q", p.get("q"), `a search of more than ${SEARCH_MAX_CHARS} characters`) : p.get("q");
  const view = { q: q || "", status: offered, page: Math.max(1, parseInt(page, 10) || 1) };
  const search = h("input", { id: "runs-search", type: "search", placeholder: "search run ids", value: view.q,
                              maxlength: String(SEARCH_MAX_CHARS) });
  const status = h("select", { id: "runs-status", "aria-label": "status" },
    ...STATUS_CHOICES.map(([v, t]) => h("option", { value: v, text: t })));
  status.value = view.status;
  const list = h("div", { id: "runs-list" });
  let shown = 0;  // the latest request: an older answer arriving late is dropped
  // `push`: a page turned or a status chosen is a step of the history; typing is not (showHash).
  const load = async (push = false) => {
    const mine = ++shown;
    showHash(runsHash(view), push);
    const rows = await runsPage(view);
    if (mine === shown) list.replaceChildren(...rows);
  };
  const refilter = (push) => { view.page = 1; load(push).catch(showError); };
  onTyped(search, (q) => { view.q = q; refilter(false); });
  status.addEventListener("change", () => { view.status = status.value; refilter(true); });
  list.addEventListener("click", (e) => {
    const turn = e.target.dataset && e.target.dataset.page;
    if (turn) { view.page = +turn; load(true).catch(showError); }
  });
  main.replaceChildren(h("h1", { id: "view-title", tabindex: "-1", text: "Runs" }),
    h("p", { id: "link-note", class: "alert-firing", role: "status" }),
    h("div", { class: "controls" }, h("label", { for: "runs-search", text: "run" }), search, status), list);
  linkNotes = [];
  for (const line of ignored) linkNote(`${line}: ignored`);
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
  if (!runs.length && total > 0) {  // a page past the last (an old link, runs deleted since)
    return [h("p", { class: "muted empty" }, h("span", { id: "runs-count", text: "no runs on this page" }), " · ",
      h("a", { id: "runs-first", href: runsHash({ ...view, page: 1 }), text: `first page (${total.toLocaleString("en")} runs)` }))];
  }
  if (!runs.length) {
    const filtered = view.q || view.status;
    return [h("p", { class: "muted empty", id: "runs-count", text: filtered ? "no runs match" : "no runs yet" })];
  }
  const table = h("table", { id: "runs-table" }, h("thead", {}, h("tr", {},
    ...["run", "status", "reward", "KL", "model", "first step", "last step", "samples", "last update"]
      .map((c) => h("th", { text: c })))));
  const body = h("tbody");
  for (const r of runs) {
    const link = h("a", { href: runHash(r.run_id), text: r.run_id, title: r.run_id });
    // the summary: the reward mean and KL at the latest step that logged each (full value on hover)
    body.appendChild(h("tr", {}, h("td", { class: "run-id" }, link), h("td", { class: "status-" + r.status, text: r.status }),
      h("td", { class: "num latest-reward", text: cellText(r.latest_reward), title: fmtFull(r.latest_reward) }),
      h("td", { class: "num latest-kl", text: cellText(r.latest_kl), title: fmtFull(r.latest_kl) }),
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
  // the count and the pager above the rows: in view without scrolling; on a phone the table scrolls
  // sideways in its box (its numbers stay whole), the page does not
  return [pager, h("div", { class: "scroll-x" }, table)];
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
// The nearest step to `step` that has samples (null: no step has any).
function nearestSampleStep(step) {
  return sampleSteps.length ? sampleSteps.reduce((a, b) => (Math.abs(b - step) < Math.abs(a - step) ? b : a)) : null;
}

// A plot click or an alert's step: that step's samples (or the nearest step that has some), a step
// of the history. The focus goes with the view (a keyboard or screen reader user is taken there too).
function openStep(step) {
  const best = nearestSampleStep(step);
  if (best === null) return;
  setStep(best);
  loadSamples().then(() => {
    const heading = document.getElementById("samples-heading");
    heading.scrollIntoView();
    heading.focus({ preventScroll: true });
  });
}

// The run (its step range), its columns' names and meanings, its alerts, the steps that have
// samples, and the overlaid runs' ranges and columns; no rows: each chart asks for its own
// (charts.js). `stale`: the rows of the last read, drawn until a refresh's own come. The run's own
// record first: a link to a run that is not there is one request refused, not five.
async function fetchRunData(runId, stale) {
  const base = runPath(runId);
  const info = await api(base);
  const [panels, columns, alerts, withSamples] = await Promise.all([api("/api/panels"), api(`${base}/metrics`),
    api(`${base}/alerts`), api(`${base}/sample-steps`)]);
  const data = { panels, alerts, withSamples, runInfo: new Map([[runId, info]]), described: new Map([[runId, columns]]),
                names: new Map([[runId, new Set(columns.map((c) => c.name))]]), rows: new Map(), asked: new Map(),
                stale: stale || new Map() };
  await loadOverlay(data);
  return data;  // the caller makes it runData once it is still the view asked for (route)
}

// Live view: charts, alerts and the step picker follow the run (showSamplesState); the samples table is left
// as the user arranged it (sort, step, expanded cells) unless its step had no samples or its read failed. A
// refresh that comes back after a navigation is dropped.
async function refreshRun() {
  if (!state.run || !document.getElementById("plots")) return;
  const mine = routed;
  const data = await fetchRunData(state.run, runData && runData.rows);
  if (mine !== routed) return;
  const before = sampleSteps;
  runData = data;
  sampleSteps = data.withSamples;
  redrawPlots();
  document.getElementById("alerts").replaceWith(alertsSection(data.alerts));
  // A run opened before its first samples shows its latest step once there is one (the URL names it), a step
  // shown without samples shows them once they come, and a samples read that failed while the sidecar was
  // away (data-retry: loadSamples) is read again now that a read works, unless one is under way (a sort
  // clicked meanwhile): asked again, that one's answer would be dropped, and with it its way back if refused.
  const arrived = state.step === null ? sampleSteps.length > 0
    : !before.includes(+state.step) && sampleSteps.includes(+state.step);
  const failed = !!document.getElementById("samples")?.dataset.retry;
  if (state.step === null && sampleSteps.length) {
    state.step = String(sampleSteps[0]);
    writeUrl();
  }
  showSamplesState();
  if ((arrived && !state.q) || (failed && !samplesPending())) await loadSamples();
}

// The live view's refresh (the timer's, every REFRESH_MS): one that fails (the database away) leaves
// what is shown and says so in one line above the charts, with the time of what is shown, until a
// refresh succeeds. An answer after a navigation changes nothing.
let shownAt = null;  // when the run page's data was read
async function liveRefresh() {
  const mine = routed;
  let failed = null;
  try {
    await refreshRun();
  } catch (err) {
    failed = err;
  }
  if (mine !== routed) return;
  if (!failed) shownAt = new Date();
  const note = document.getElementById("refresh-note");
  if (!note) return;
  note.hidden = !failed;
  setText(note, failed ? `could not refresh: ${failed.message || failed}; retrying every ${REFRESH_MS / 1000} s `
                         + `(shown: as read at ${shownAt.toLocaleTimeString()})` : "");
}
// One live refresh at a time: the timer skips its tick while one is under way (a slow sidecar's refresh of a
// page comparing runs can outlast the interval, and ticks piling up would queue reads without end behind the
// page's 6 in flight, ahead of a navigation's); asked for by hand, it waits for the one under way, then runs.
let refreshing = null;
function refreshOnce() {
  const run = liveRefresh().finally(() => { if (refreshing === run) refreshing = null; });
  refreshing = run;
  return run;
}
function refreshTick() {
  if (!refreshing) refreshOnce();
}
window.otelGrpoRefresh = async () => {
  await refreshing;
  return refreshOnce();
};

// What of the link the page did not show as asked, in one line at the top of the page (a step
// without samples, a sort column the samples lack, a group not at its step, a parameter it could not
// read): every part of a link a view reads is either shown or named here, and the view shown is what
// the URL says once it is rewritten without them.
let linkNotes = [];
function linkNote(text) {
  linkNotes.push(text);
  const note = document.getElementById("link-note");
  if (note) setText(note, "This link asked for what is not here: " + linkNotes.join("; ") + ".");
}

async function showRun(runId, query, current) {
  const { next, ignored } = await readUrl(runId, query);
  current();
  Object.assign(state, next);
  setText(document.getElementById("crumb"), "run " + runId);
  const [data, choices] = await Promise.all([fetchRunData(runId), api(`/api/runs?limit=${COMPARE_CHOICES + 1}`)]);
  current();
  runData = data;  // once whole: a chart drawn meanwhile (a scroll) never sees half of it
  shownAt = new Date();
  sampleSteps = data.withSamples;
  // What the link asks for that is not here is dropped (and said) before anything is drawn.
  const notes = ignored.map((line) => `${line}: ignored`);
  for (const r of state.overlay.filter((r) => !data.runInfo.has(r))) notes.push(`vs=${r} (no such run): not overlaid`);
  state.overlay = state.overlay.filter((r) => data.runInfo.has(r));
  const columns = new Set(shownColumns().map((c) => c.name));
  for (const c of state.add.filter((c) => !columns.has(c))) notes.push(`add=${c} (no step column of that name): no chart`);
  state.add = state.add.filter((c) => columns.has(c));
  // A sample and a group are a step's: with no such step, they are not shown either, and said so.
  const ofStep = [state.sample !== null && `sample=${rowName(state.sample)}`, state.group && groupLinkPart(state.group)]
    .filter(Boolean).join(", ");
  if (state.step !== null && !sampleSteps.includes(+state.step) && sampleSteps.length) {
    const best = nearestSampleStep(+state.step);
    // a run's sample steps may be many: a reduce, not a spread into Math.min's arguments (V8 caps those)
    const range = `${sampleSteps.reduce((a, b) => Math.min(a, b))}–${sampleSteps.reduce((a, b) => Math.max(a, b))}`;
    notes.push(`step ${state.step} has no samples (this run has samples at steps ${range}): step ${best} is shown`
               + (ofStep ? `, not its ${ofStep}` : ""));
    Object.assign(state, { step: String(best), sample: null, group: null });
  } else if (!sampleSteps.length && ofStep) {
    notes.push(`${ofStep} (this run has no samples): not shown`);
    Object.assign(state, { sample: null, group: null });
  }
  if (state.step === null && sampleSteps.length) state.step = String(sampleSteps[0]);
  main.replaceChildren(
    h("h1", { id: "view-title", tabindex: "-1", text: "Run " + runId }),
    h("p", { id: "link-note", class: "alert-firing", role: "status" }),
    h("p", { id: "refresh-note", class: "refresh-note", role: "status", hidden: "" }),
    h("h2", { class: "visually-hidden", text: "Charts" }),  // the charts' h3 titles sit under it (heading order)
    plotTools(choices),
    h("div", { id: "plots" }),
    h("h2", { text: "Alerts" }), alertsSection(data.alerts),
    h("h2", { id: "samples-heading", tabindex: "-1", text: "Samples" }), samplesControls(sampleSteps),
    h("p", { id: "samples-common", class: "common" }),
    h("div", { id: "group-view" }),
    h("div", { class: "table-wrap", id: "samples" }));
  linkNotes = [];
  for (const note of notes) linkNote(note);
  await redrawPlots();
  current();
  await loadSamples();
  current();
  if (state.group !== null && state.step !== null) {
    await showGroup(state.step, state.group, undefined, true).catch(groupError);
  }
  current();
  writeUrl();
  refreshTimer = setInterval(refreshTick, REFRESH_MS);
}

// The one place an error replaces the view: a title and what went wrong, said to a screen reader.
// A read that may succeed later (err.retryable: a 503 while the database is away, no answer at all)
// is tried again by itself (retryLater); the same error again only updates when (no new alert).
function showError(err) {
  const message = String(err.message || err);
  const wait = err instanceof ApiError && err.retryable ? retryLater(err) : null;
  const when = wait === null ? [] : [h("span", { id: "retry-when", text: `trying again in ${wait} s` }), " ",
    h("button", { type: "button", id: "retry-now", text: "try now", onclick: () => route({ retry: true }) }), " · "];
  const shown = document.getElementById("error-message");
  if (shown && shown.textContent === shownText(message) && wait !== null) {
    document.getElementById("error-actions").replaceChildren(...when, h("a", { href: "#/", text: "all runs" }));
    return;
  }
  main.replaceChildren(h("h1", { id: "view-title", tabindex: "-1", text: "Cannot show this page" }),
    h("p", { id: "error-message", class: "alert-firing", role: "alert", text: message }),
    h("p", { id: "error-actions", role: "status" }, ...when, h("a", { href: "#/", text: "all runs" })));
}

// The view asked for again after the server's Retry-After where it gave one, at least 1 s doubling
// with each failed try, at most RETRY_MAX_S; the seconds waited. A navigation or a success resets it.
const RETRY_MAX_S = 30;
let retryTimer = null;
let retries = 0;
function retryLater(err) {
  const wait = Math.min(RETRY_MAX_S, Math.max(err.retryAfter === null ? 0 : err.retryAfter, 2 ** retries));
  retries += 1;
  clearTimeout(retryTimer);
  retryTimer = setTimeout(() => route({ retry: true }), wait * 1000);
  return wait;
}

// Each route() is a view asked for; one that a later one replaced (back pressed twice, a link
// clicked while a run loads) stops at its next await and draws nothing: an answer arriving late
// never replaces a newer view nor the URL it wrote.
let routed = 0;
class Superseded extends Error {}

// A run id in a link as the page reads it ("%E0%A4%A" is not one: said as such, not "URI malformed").
function linkedRunId(encoded) {
  try {
    return decodeURIComponent(encoded);
  } catch (e) {
    throw new ApiError(`this link's run id "${encoded}" is not valid percent-encoding`);
  }
}

// `retry`: the error page asking again (showError), which keeps counting its tries and is not
// announced as a new view unless it shows one.
async function route({ retry = false } = {}) {
  const mine = ++routed;
  const current = () => { if (mine !== routed) throw new Superseded(); };
  document.body.removeAttribute("data-ready");
  main.setAttribute("aria-busy", "true");
  if (!retry) setText(document.getElementById("announce"), "loading…");
  if (refreshTimer !== null) { clearInterval(refreshTimer); refreshTimer = null; }
  clearTimeout(retryTimer);
  retryTimer = null;
  if (!retry) retries = 0;
  const m = location.hash.match(/^#\/run\/([^?]+)(?:\?(.*))?$/);
  let ready;
  try {
    if (m) {
      await showRun(linkedRunId(m[1]), m[2] || "", current);
      ready = "run";
    } else {
      state.run = null;
      await showRuns((location.hash.match(/^#\/?\?(.*)$/) || [])[1] || "");
      current();
      ready = "runs";
    }
  } catch (err) {
    if (err instanceof Superseded || mine !== routed) return;
    showError(err);
    ready = "error";
  }
  if (ready !== "error") retries = 0;
  main.removeAttribute("aria-busy");
  const title = document.getElementById("view-title");
  if (!(retry && ready === "error")) setText(document.getElementById("announce"), title ? title.textContent : "");
  // A navigation took the focus with the old view (it is on the body): it goes to the new one's
  // title, where a screen reader reads on. Not on the first load, nor where the token form took it.
  if (title && mine > 1 && (!document.activeElement || document.activeElement === document.body)) {
    title.focus({ preventScroll: true });
  }
  document.body.setAttribute("data-ready", ready);
}

window.addEventListener("hashchange", () => route());
route();
