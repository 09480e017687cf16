// The samples table of a run: columns (all of them, full headers, a picker for the ones shown),
// server-side sort and text search, a client-side range filter, CSV/JSONL downloads of what is
// selected, a link per sample, and the group view (the completions of one prompt side by side).
// Reads and writes `state` (app.js); every change goes to the URL, so a view can be linked.
"use strict";

const TEXT_PREVIEW = 160;
const PAGE_ROWS = 500;
const EXPORT_ROWS = 1000000;
const ALL_STEPS = "-9223372036854775808";  // step_min for a search over every step
const SEARCH_DELAY_MS = 250;
// Columns first in the table, in this order: identity, reward, then the per-sample diagnostics
// (token-level numbers of each completion), then the rest as the rows have them, text last.
// (signals.sample_diagnostics names them.)
const LEAD = ["step", "sample_index", "group", "reward", "advantage", "completion_length", "length_clipped",
              "kl_ref_mean", "kl_ref_max", "log_ratio_mean", "log_ratio_absmax", "is_weight_mean", "is_weight_max",
              "entropy_mean"];
const TEXT_COLUMNS = ["prompt", "completion"];
// What each diagnostic is; each is measured where the step value it explains is (docs/signals.md).
const COLUMN_HELP = {
  kl_ref_mean: "k3 KL to the reference, mean over the completion's tokens in the loss passes that read it, "
    + "as the step's kl",
  kl_ref_max: "largest token KL to the reference in those passes (the step's kl_max is the largest)",
  entropy_mean: "mean token entropy in the loss passes, as the step's entropy",
  log_ratio_mean: "log pi_train - log pi_rollout, mean per token, as the step's mismatch values",
  log_ratio_absmax: "largest |log pi_train - log pi_rollout| of a token",
  is_weight_mean: "token IS weight pi_train / pi_rollout, mean",
  is_weight_max: "token IS weight pi_train / pi_rollout, max",
  completion_length: "completion tokens",
  length_clipped: "1: the completion hit the length limit",
};
// Bookkeeping columns, hidden until picked (the picker lists them).
// The prompt is the group's (the group view shows it); the diagnostics' companions (mean of the
// IS weight, max of the KL) are one click away. The completion gets the width that is left.
const HIDDEN_BY_DEFAULT = new Set(["prompt_length", "policy_version", "source_rank", "completion_index", "group_size",
                                   "truncated", "target", "reward_rank", "selection", "prompt", "terminated", "kl_ref_max",
                                   "log_ratio_mean", "is_weight_mean"]);
const CHAR_PX = 7.2, CELL_PAD_PX = 14, MIN_CHARS = 7, TEXT_MIN_PX = { prompt: 220, completion: 320 };
let shownRows = [];
let userColumns = null;  // the picker's choice: Set of hidden columns, null until the user picks

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
function allColumnsOf(rows) {
  const all = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((c) => c !== "run_id" && c !== "time");
  const rest = all.filter((c) => !LEAD.includes(c) && !TEXT_COLUMNS.includes(c)).sort();
  return [...LEAD.filter((c) => all.includes(c)), ...rest, ...TEXT_COLUMNS.filter((c) => all.includes(c))];
}

// `<text>_original_length` (the length before the text was cut for export) is bookkeeping too.
function hiddenColumns() {
  return userColumns || new Set([...HIDDEN_BY_DEFAULT, ...allColumnsOf(shownRows).filter((c) => c.endsWith("_original_length"))]);
}

function samplesParams(limit) {
  const p = new URLSearchParams({ limit: String(limit) });
  if (state.q) { p.set("q", state.q); p.set("step_min", ALL_STEPS); }  // a search spans every step
  else if (state.step !== null) p.set("step", state.step);
  if (state.orderBy) { p.set("order_by", state.orderBy); if (state.desc) p.set("desc", "true"); }
  return p;
}

// A full header: the name breaks after "_", "." and "/" rather than being cut.
function headerCell(c) {
  const cls = "sortable" + (state.orderBy === c ? (state.desc ? " sorted-desc" : " sorted-asc") : "");
  const th = h("th", { class: cls, "data-col": c, title: (COLUMN_HELP[c] ? `${c}: ${COLUMN_HELP[c]}` : c) + " (click to sort)", onclick: () => sortBy(c) });
  for (const part of c.split(/(?<=[_./])/)) th.append(document.createTextNode(part), document.createElement("wbr"));
  return th;
}

function sampleLink(r, extra) {
  return runHash(state.run, { step: r.step, ...extra });
}

function sampleRow(r, cols) {
  const cells = cols.map((c) => TEXT_COLUMNS.includes(c) || (typeof r[c] === "string" && r[c].length > 24)
    ? textCell(r[c]) : h("td", { class: typeof r[c] === "number" ? "num" : "",
                                 title: c === "step" ? `step ${r.step}, ${r.time}` : fmtCell(r[c]), text: fmtShort(r[c]) }));
  const group = h("button", { class: "group-open", type: "button", title: "all completions of this prompt, side by side",
                              text: "group", onclick: () => openGroup(r) });
  const link = h("a", { class: "sample-link", href: sampleLink(r, { sample: r.sample_index }), title: "link to this sample",
                        text: "#", onclick: (e) => { e.preventDefault(); pickSample(r); } });
  const tr = h("tr", { "data-sample": fmtCell(r.sample_index) }, h("td", { class: "actions" }, group, link), ...cells);
  if (state.sample !== null && String(r.sample_index) === state.sample && String(r.step) === state.step) tr.classList.add("linked");
  return tr;
}

// Four significant digits in a cell (the full value is its tooltip and in the downloads).
function fmtShort(v) {
  if (typeof v !== "number" || Number.isInteger(v)) return fmtCell(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(2) : String(+v.toPrecision(4));
}

function numericColumns(rows) {
  return allColumnsOf(rows).filter((c) => rows.some((r) => typeof r[c] === "number"));
}

// The range filter applies to the rows loaded (one step, or a search's first PAGE_ROWS matches).
function filtered(rows) {
  const { col, min, max } = state.filter;
  if (!col || (min === "" && max === "")) return rows;
  return rows.filter((r) => typeof r[col] === "number" && (min === "" || r[col] >= +min) && (max === "" || r[col] <= +max));
}

// A number column is as wide as its header's longest piece (headers wrap after "_" and "."); the
// table is at least as wide as its columns need, and its box scrolls sideways below that.
function columnWidth(c) {
  if (TEXT_COLUMNS.includes(c)) return TEXT_MIN_PX[c];
  const longest = Math.max(MIN_CHARS, ...c.split(/(?<=[_./])/).map((part) => part.length));
  return Math.ceil(longest * CHAR_PX + CELL_PAD_PX);
}

function tableOf(rows) {
  const hidden = hiddenColumns();
  const cols = allColumnsOf(rows).filter((c) => !hidden.has(c));
  const ACTIONS_PX = 74;
  const colgroup = h("colgroup", {}, h("col", { style: `width: ${ACTIONS_PX}px` }),
    ...cols.map((c) => h("col", TEXT_COLUMNS.includes(c) ? { class: "c-" + c } : { style: `width: ${columnWidth(c)}px` })));
  const head = h("tr", {}, h("th", { text: "" }), ...cols.map(headerCell));
  const minWidth = ACTIONS_PX + cols.reduce((sum, c) => sum + columnWidth(c), 0);
  return h("table", { id: "samples-table", style: `min-width: ${minWidth}px` }, colgroup, h("thead", {}, head),
    h("tbody", {}, ...rows.map((r) => sampleRow(r, cols))));
}

function render() {
  const wrap = document.getElementById("samples");
  const rows = filtered(shownRows);
  const note = document.getElementById("samples-note");
  const parts = [];
  if (state.q) parts.push(`${shownRows.length}${shownRows.length === PAGE_ROWS ? "+" : ""} match(es) over all steps`);
  if (rows.length !== shownRows.length) parts.push(`${rows.length} of ${shownRows.length} rows pass the filter`);
  note.textContent = parts.join("; ");
  wrap.replaceChildren(rows.length ? tableOf(rows) : h("p", { class: "muted empty", text: "no samples" }));
  refreshPickers();
  const linked = wrap.querySelector("tr.linked");
  if (linked) linked.scrollIntoView({ block: "center" });
}

// Errors of the samples table stay in its own box, and the table shown before stays usable: the
// plots and the rest of the run are never replaced by an error (a 422 on a sort did that).
// Only the latest request's answer is shown: an older one arriving after it (a step picked, then a
// sort clicked twice) would put its rows under the newer state's headers.
let samplesAsked = 0;
async function loadSamples() {
  const wrap = document.getElementById("samples");
  const note = document.getElementById("samples-note");
  const asked = ++samplesAsked;
  try {
    const rows = await api(`${runPath(state.run)}/samples?${samplesParams(PAGE_ROWS)}`);
    if (asked !== samplesAsked) return;
    shownRows = rows;
    note.classList.remove("alert-firing");
    wrap.removeAttribute("data-error");
    render();
  } catch (err) {
    if (asked !== samplesAsked) return;
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
    writeUrl();
  });
}

// The column picker and the filter's column list follow the columns the rows have.
function refreshPickers() {
  const cols = allColumnsOf(shownRows);
  const hidden = hiddenColumns();
  const picker = document.getElementById("column-picker");
  picker.querySelector("summary").textContent = `columns (${cols.filter((c) => hidden.has(c)).length} hidden)`;
  picker.querySelector(".choices").replaceChildren(...cols.map((c) => {
    const box = h("input", { type: "checkbox", "data-col": c, onchange: (e) => {
      userColumns = new Set(hiddenColumns());
      if (e.target.checked) userColumns.delete(c); else userColumns.add(c);
      render();
    } });
    box.checked = !hidden.has(c);
    return h("label", {}, box, " " + c);
  }));
  const select = document.getElementById("filter-col");
  const names = ["", ...numericColumns(shownRows)];
  if ([...select.options].map((o) => o.value).join() !== names.join()) {
    select.replaceChildren(...names.map((c) => h("option", { value: c, text: c || "filter: column…" })));
  }
  select.value = state.filter.col;
}

async function download(kind) {
  const note = document.getElementById("samples-note");
  try {
    const r = await apiFetch(`${runPath(state.run)}/samples.${kind}?${samplesParams(EXPORT_ROWS)}`);
    const url = URL.createObjectURL(await r.blob());
    const name = `${state.run.replace(/[^\w.-]+/g, "_")}-${state.q ? "search" : "step-" + state.step}.${kind}`;
    const a = h("a", { href: url, download: name });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (err) {
    note.textContent = `cannot download: ${err.message || err}`;
    note.classList.add("alert-firing");
  }
}

function filterControls() {
  const col = h("select", { id: "filter-col", title: "keep rows whose value in this column is within [min, max]" });
  const min = h("input", { id: "filter-min", type: "number", step: "any", placeholder: "min" });
  const max = h("input", { id: "filter-max", type: "number", step: "any", placeholder: "max" });
  min.value = state.filter.min;
  max.value = state.filter.max;
  const apply = () => {
    state.filter = { col: col.value, min: min.value, max: max.value };
    writeUrl();
    render();
  };
  for (const input of [col, min, max]) input.addEventListener("change", apply);
  return [col, min, max];
}

function samplesControls(steps) {
  const select = h("select", { id: "step-select", onchange: (e) => { setStep(e.target.value); loadSamples(); } });
  for (const s of steps) select.appendChild(h("option", { value: String(s), text: "step " + s }));
  if (state.step !== null) select.value = String(state.step);
  const search = h("input", { id: "search", type: "search", placeholder: "search prompt / completion (all steps)" });
  search.value = state.q;
  let timer = null;
  search.addEventListener("input", () => {  // filters as you type, once the typing pauses
    clearTimeout(timer);
    timer = setTimeout(() => { state.q = search.value.trim(); writeUrl(); loadSamples(); }, SEARCH_DELAY_MS);
  });
  const picker = h("details", { id: "column-picker" }, h("summary", { text: "columns" }), h("div", { class: "choices" }));
  return h("div", { class: "controls" }, h("label", { for: "step-select", text: "step" }), select, search,
    ...filterControls(), picker,
    h("button", { id: "download-csv", type: "button", text: "CSV", title: "download these samples (every row) as CSV",
                  onclick: () => download("csv") }),
    h("button", { id: "download-jsonl", type: "button", text: "JSONL", title: "download these samples (every row) as JSON Lines",
                  onclick: () => download("jsonl") }),
    h("span", { id: "samples-note", class: "muted" }));
}

function setStep(step) {
  Object.assign(state, { step: step === null ? null : String(step), q: "", sample: null, group: null });
  const search = document.getElementById("search");
  if (search) search.value = "";
  const select = document.getElementById("step-select");
  if (select && state.step !== null) select.value = state.step;
  writeUrl();
  redrawPlots();
}

function pickSample(r) {
  setStep(r.step);
  state.sample = String(r.sample_index);
  writeUrl();
  for (const tr of document.querySelectorAll("#samples-table tr.linked")) tr.classList.remove("linked");
  const tr = [...document.querySelectorAll("#samples-table tbody tr")].find((t) => t.dataset.sample === state.sample);
  if (tr) tr.classList.add("linked"); else loadSamples();
}

// ---- group view: every stored completion of one prompt at one step, ranked by reward ----------
function groupError(err) {
  document.getElementById("group-view").replaceChildren(h("p", { class: "alert-firing", text: String(err.message || err) }));
}

function openGroup(row) {
  state.group = "group" in row ? String(row.group) : null;
  writeUrl();
  showGroup(row).catch(groupError);
}

function sameGroup(a, b) {
  return a.step === b.step && ("group" in a && "group" in b ? a.group === b.group : a.prompt === b.prompt);
}

function sameSample(a, b) {
  return a.sample_index === b.sample_index && a.completion === b.completion;
}

const GROUP_STATS = [["reward", "reward"], ["advantage", "advantage"], ["length", "completion_length"],
                     ["KL to ref", "kl_ref_mean"], ["IS weight max", "is_weight_max"], ["entropy", "entropy_mean"],
                     ["sample", "sample_index"]];

// `row`: a row of the table, or {step, group} from a link.
async function showGroup(row) {
  const p = new URLSearchParams({ step: String(row.step), limit: "10000", order_by: "reward", desc: "true" });
  const rows = (await api(`${runPath(state.run)}/samples?${p}`)).filter((r) => sameGroup(r, row));
  const view = document.getElementById("group-view");
  const fns = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((k) => k.startsWith("reward.")).sort();
  const stats = [GROUP_STATS[0], ...fns.map((f) => [f, f]), ...GROUP_STATS.slice(1)];
  const cards = rows.map((r, i) => h("div", { class: "group-card" + ("sample_index" in row && sameSample(r, row) ? " picked" : "") },
    h("div", { class: "rank", text: `#${i + 1}` }),
    h("table", { class: "group-stats" }, h("tbody", {},
      ...stats.filter(([, k]) => k in r).map(([label, k]) => h("tr", {}, h("th", { text: label }),
                                                                   h("td", { class: "num", text: fmtCell(r[k]) }))))),
    h("pre", { class: "completion", text: fmtCell(r.completion) })));
  const title = `Group at step ${row.step}` + ("group" in row ? ` (group ${row.group})` : "") +
    `: ${rows.length} completion(s) stored, ranked by reward`;
  const link = h("a", { href: runHash(state.run, { step: row.step, group: row.group }), class: "group-link", text: "link" });
  view.replaceChildren(
    h("div", { class: "group-head" }, h("h3", { text: title }), link,
      h("button", { type: "button", class: "group-close", text: "close",
                    onclick: () => { view.replaceChildren(); state.group = null; writeUrl(); } })),
    h("pre", { class: "prompt", text: fmtCell(rows.length ? rows[0].prompt : row.prompt) }),
    h("div", { class: "group-cards", "data-count": String(rows.length) }, ...cards));
  view.scrollIntoView();
}
