// The samples table of a run: columns (all of them, full headers, a picker for the ones shown),
// sort, text search and range filter all done by the server over the whole step (or every step,
// for a search), read PAGE_ROWS rows at a time: "500 of 1,024 rows" and "more" until all are
// loaded (an anomalous step keeps every row). CSV/JSONL downloads of all the rows the table selects,
// a link per sample (a linked sample beyond the rows loaded is asked for by its index and
// shown first); the group view is group.js. Rows are one line each; numbers are never cut (a
// column is as wide as its widest value); a copy gives the values as stored. Reads and writes
// `state` (app.js); every change goes to the URL, so a view can be linked.
"use strict";

const TEXT_PREVIEW = 160;
// Characters of each text a page of rows holds (the API's text_chars): with a long-context run's
// completions (the telemetry's max_text_chars raised) a page grew with rows x whole texts. A text
// cut there says "show all" and reads its sample whole (wholeSample).
const TEXT_CHARS = 2000;
const PAGE_ROWS = 500;
const EXPORT_ROWS = 1000000;
const ALL_STEPS = "-9223372036854775808";  // step_min for a search over every step
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
// Columns whose largest values are the suspects (the per-completion KL, log-ratio and IS-weight
// diagnostics, a clipped length): the first click sorts them largest first. Others start with
// their lowest (the worst reward first).
const HIGH_FIRST = /^(kl_ref_|log_ratio_|is_weight_)|^(length_clipped|truncated)$/;
const CELL_PAD_PX = 16, MIN_PX = 36, STRING_MAX_PX = 240, ACTIONS_PX = 74, TEXT_MIN_PX = { prompt: 220, completion: 320 };
const TITLE_MAX = 400;  // a longer text's tooltip would cover the screen: "more" shows it
let shownRows = [];  // the rows of the pages loaded, in the server's order
let totalRows = 0;  // the rows the step (or search) and the filter hold on all pages (X-Total-Count)
let unfilteredRows = 0;  // the rows of the step (or search) alone, where a range filter is set
let filterColumnRows = null;  // where no row passes the range filter: how many have a number in its column
let linkedRow = null;  // the linked sample, asked for alone where it is not among shownRows
const fullText = new WeakMap();  // cell -> its value as stored: what a copy of the cell gives

// The rows of a table ask for their texts cut at TEXT_CHARS (`texts_cut` names the cut ones).
function withTextChars(params) {
  params.set("text_chars", String(TEXT_CHARS));
  return params;
}

// A response's sample rows, each `attempt` (its writer's start in ns, past a double's exact integers: JSON.parse
// makes 1733580060987654321 1733580060987654400) as its exact decimal text, as the API sent it: the page
// compares rows by it and a link names a row by it (rowName). The text comes from the reviver's source access
// (Baseline 2025: Chrome 114, Firefox 135, Safari 18.4); an older browser keeps the rounded number's text,
// which tells two attempts apart (they are milliseconds apart or more) but does not match a link made elsewhere.
async function sampleRows(response) {
  return JSON.parse(await response.text(), (key, value, context) => (key === "attempt" && typeof value === "number"
    ? context?.source ?? String(value) : value));
}

// The sample rows of `params` (the run shown): what sampleRows reads.
async function readSamples(params) {
  return sampleRows(await apiFetch(`${runPath(state.run)}/samples?${params}`));
}

// The query of one sample alone: the rows at `step` with that `sample_index` (`limit` of them: two attempts'
// rows of a step may share an index, a relaunch's evaluation at the step the crashed attempt trained).
function oneSampleParams(step, index, limit = 1) {
  return new URLSearchParams({ step: String(step), filter_col: "sample_index", filter_min: String(index),
                               filter_max: String(index), limit: String(limit) });
}

const SAME_INDEX = 100;  // rows of one step sharing a sample index read at most: one a writer attempt

// Row `r` with every text whole: its sample read alone (as a linked one is), once.
const wholeRows = new WeakMap();
function wholeSample(r) {
  if (!wholeRows.has(r)) {
    const p = oneSampleParams(r.step, r.sample_index, SAME_INDEX);
    wholeRows.set(r, readSamples(p).then((found) => {
      const same = found.find((x) => sameRow(x, r));  // its writer attempt's
      if (!same) throw new ApiError("the sample is no longer stored");
      return same;
    }));
  }
  return wholeRows.get(r);
}

// What a text cut by the server says until it is shown all: "show all", its full length on hover.
const cutTitle = (r, c) => `${r.texts_cut[c].toLocaleString("en")} characters; the first ${TEXT_CHARS.toLocaleString("en")}`
  + " are loaded";

// A text cell is one line (a long string no longer wraps its row to 200 px); "more" opens it in
// place, "less" folds it. Only the first TEXT_PREVIEW characters are in the page until then; a text
// the server cut (past TEXT_CHARS) says "show all" and opens once its sample is read whole.
function textCell(r, c) {
  let full = fmtCell(r[c]);
  let cut = !!(r.texts_cut && r.texts_cut[c]);
  const preview = cut || full.length > TEXT_PREVIEW ? full.slice(0, TEXT_PREVIEW) + "…" : full;
  const span = h("span", { class: "clip", text: preview });
  const td = h("td", { class: "text", title: !cut && full.length <= TITLE_MAX ? full : "" }, span);
  fullText.set(td, full);
  let open = false;
  const toggle = async () => {
    if (cut) {
      try {
        full = fmtCell((await wholeSample(r))[c]);
      } catch (err) {
        setText(btn, `cannot show all: ${err.message || err}`);
        return;
      }
      cut = false;
      fullText.set(td, full);
      btn.removeAttribute("title");
    }
    open = !open;
    setText(span, open ? full : preview);
    setText(btn, open ? "less" : "more");
    btn.setAttribute("aria-expanded", String(open));
    td.classList.toggle("open", open);
  };
  const btn = h("button", { class: "more", type: "button", text: cut ? "show all" : "more", "aria-expanded": "false",
                            onclick: toggle });
  if (cut) btn.title = cutTitle(r, c);
  btn.hidden = !cut && preview === full;  // markCut shows it where the column's width cuts a shorter text
  if (!btn.hidden) td.classList.add("long");
  td.append(span, btn);
  return td;
}

// After layout: a text its column cuts gets its "more" (all reads first, then the writes).
function markCut(wrap) {
  const spans = [...wrap.querySelectorAll("td.text:not(.long) > span.clip")];
  const cut = spans.map((s) => s.scrollWidth > s.clientWidth + 1);
  spans.forEach((s, i) => { if (cut[i]) { s.parentNode.classList.add("long"); s.nextSibling.hidden = false; } });
}

// A number: four significant digits (never cut: its column fits the widest); the value as
// stored is its tooltip and what a copy gives. The step's tooltip is its time.
function valueCell(c, r) {
  const v = r[c];
  const td = h("td", { class: typeof v === "number" ? "num" : "", text: cellText(v),
                       title: c === "step" ? `step ${r.step}, ${r.time}` : fmtFull(v) });
  fullText.set(td, fmtFull(v));
  return td;
}

function cellText(v) {
  return typeof v === "number" ? fmtShort(v) : fmtCell(v);
}

// Four significant digits in a cell (the full value is its tooltip, its copy and in the downloads).
// A rounded value keeps its zeros ("1.000": an IS weight of 1.0000123 is not 1); an exact one (to
// float noise) drops them.
function fmtShort(v) {
  if (typeof v !== "number" || Number.isInteger(v)) return fmtCell(v);
  const a = Math.abs(v);
  const s = a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : v.toPrecision(4);
  return Math.abs(+s - v) <= Math.abs(v) * 1e-12 ? s.replace(/\.?0+(?=e|$)/, "") : s;  // 0.9000000000000001 is 0.9
}

// `run_id` is the page's; `time` is the step cell's tooltip (an ISO time is wider than any number);
// `texts_cut` is what the text cells' "show all" says.
const NOT_COLUMNS = new Set(["run_id", "time", "texts_cut"]);
function allColumnsOf(rows) {
  const all = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((c) => !NOT_COLUMNS.has(c));
  const rest = all.filter((c) => !LEAD.includes(c) && !TEXT_COLUMNS.includes(c)).sort();
  return [...LEAD.filter((c) => all.includes(c)), ...rest, ...TEXT_COLUMNS.filter((c) => all.includes(c))];
}

// A string the same on every row (a kept step's `kept_because`) is said once above the table.
function constantColumns(rows) {
  if (rows.length < 2) return [];
  return allColumnsOf(rows).filter((c) => !TEXT_COLUMNS.includes(c) && typeof rows[0][c] === "string"
                                          && rows.every((r) => r[c] === rows[0][c]));
}

// `<text>_original_length` (the length before the text was cut for export) is bookkeeping too.
function hiddenByDefault() {
  return new Set([...HIDDEN_BY_DEFAULT, ...constantColumns(shownRows),
                  ...allColumnsOf(shownRows).filter((c) => c.endsWith("_original_length"))]);
}

// The defaults and the picker's changes to them (state.columns: showcol, hidecol in the URL).
function hiddenColumns() {
  const hidden = hiddenByDefault();
  for (const c of state.columns.show) hidden.delete(c);
  for (const c of state.columns.hide) hidden.add(c);
  return hidden;
}

// A change from a column's default is kept; one back to it is dropped.
function pickColumn(column, shown) {
  const show = state.columns.show.filter((c) => c !== column), hide = state.columns.hide.filter((c) => c !== column);
  if (shown && hiddenByDefault().has(column)) show.push(column);
  if (!shown && !hiddenByDefault().has(column)) hide.push(column);
  state.columns = { show, hide };
  writeUrl(true);
  render();
}

// A column picked filters, bounds or not (as the API's filter_col: rows with a number there).
const filtering = () => !!state.filter.col;

// The rows selected (the step or the search, the range filter, the order), `limit` from `offset`:
// the table's and the downloads'. `filter`: false for the step's (or search's) rows alone.
function samplesParams(limit, offset = 0, filter = true) {
  const p = new URLSearchParams({ limit: String(limit) });
  if (offset) p.set("offset", String(offset));
  if (state.q) { p.set("q", state.q); p.set("step_min", ALL_STEPS); }  // a search spans every step
  else if (state.step !== null) p.set("step", state.step);
  if (filter && filtering()) {
    p.set("filter_col", state.filter.col);
    if (state.filter.min !== "") p.set("filter_min", state.filter.min);
    if (state.filter.max !== "") p.set("filter_max", state.filter.max);
  }
  if (state.orderBy) { p.set("order_by", state.orderBy); if (state.desc) p.set("desc", "true"); }
  return p;
}

// A full header: the name breaks after "_", "." and "/" rather than being cut. Its button takes
// the focus (Tab) and sorts on Enter or Space as on a click.
function headerCell(c) {
  const sorted = state.orderBy === c ? (state.desc ? "descending" : "ascending") : null;
  const first = HIGH_FIRST.test(c) ? "largest first" : "smallest first";
  const th = h("th", { class: "sortable" + (sorted ? (state.desc ? " sorted-desc" : " sorted-asc") : ""), "data-col": c,
                       "aria-sort": sorted || "none", title: (COLUMN_HELP[c] ? `${c}: ${COLUMN_HELP[c]}` : c) + ` (sort: ${first})`,
                       onclick: () => sortBy(c) });
  const button = h("button", { type: "button", class: "sort" });
  for (const part of c.split(/(?<=[_./])/)) {
    button.append(document.createTextNode(shownText(part)), document.createElement("wbr"));
  }
  th.appendChild(button);
  return th;
}

// The view as it is (order, filter, charts) at the row's step: the sample opens in the same order.
function sampleLink(r, extra) {
  return runHash(state.run, { ...stateParams(), q: null, group: null, groupof: null, sample: null, step: r.step, ...extra });
}

const sameRow = (a, b) => a.step === b.step && a.sample_index === b.sample_index && a.attempt === b.attempt;

// ---- a row's name -------------------------------------------------------------------------------
// The page names a row of its step (state.sample, a group's sample in state.group, the links' `sample=` and
// `groupof=`) by its sample index and its writer's attempt, `<index>@<attempt>` as the store names it: two
// attempts' rows of a step may share an index (a relaunch's evaluation at the step the crashed attempt trained).
// A row whose sender named no attempt is named by its index alone, as every row was before attempts. A key is
// {sample_index, attempt} (text; attempt null where none): rowKey makes it, rowName writes it for a URL,
// readRowName reads it back, namedRow finds its row.
const ROW_NAME = /^(0|[1-9]\d{0,14})(?:@(0|[1-9]\d{0,18}))?$/;  // an index as the API reads it, a non-negative int64

function rowKey(r) {
  return { sample_index: String(r.sample_index), attempt: r.attempt === null || r.attempt === undefined ? null : String(r.attempt) };
}

const rowName = (key) => (key.attempt === null ? key.sample_index : `${key.sample_index}@${key.attempt}`);

// A link's name as a key; null where it is none.
function readRowName(text) {
  const m = ROW_NAME.exec(text);
  return m && { sample_index: m[1], attempt: m[2] ?? null };
}

// The row of `rows` (one step's) that `key` names: of its index and attempt. A name without an attempt (a link
// from before attempts) is the row without one, else the first of its index; null: none.
function namedRow(rows, key) {
  const ofIndex = rows.filter((r) => String(r.sample_index) === key.sample_index);
  return ofIndex.find((r) => rowKey(r).attempt === key.attempt) ?? (key.attempt === null ? ofIndex[0] : null) ?? null;
}

function sampleRow(r, cols, linked) {
  const cells = cols.map((c) => (TEXT_COLUMNS.includes(c) || typeof r[c] === "string" ? textCell(r, c)
                                                                                      : valueCell(c, r)));
  const group = h("button", { class: "group-open", type: "button", title: "all completions of this prompt, side by side",
                              "aria-label": `group of sample ${r.sample_index}`, text: "group", onclick: () => openGroup(r) });
  const link = h("a", { class: "sample-link", href: sampleLink(r, { sample: rowName(rowKey(r)) }), title: "link to this sample",
                        "aria-label": `link to sample ${r.sample_index}`, text: "#",
                        onclick: (e) => { e.preventDefault(); pickSample(r, e.target.closest("tr")); } });
  const tr = h("tr", { "data-sample": fmtCell(r.sample_index) }, h("td", { class: "actions" }, group, link), ...cells);
  if (r === linked) tr.classList.add("linked");
  return tr;
}

function numericColumns(rows) {
  return allColumnsOf(rows).filter((c) => rows.some((r) => typeof r[c] === "number"));
}

// Widths as drawn: a canvas measures each text in the cells' font. A number column is as wide as
// its widest value or its header's longest piece (headers wrap after "_" and "."); a string column
// at most STRING_MAX_PX (its text is cut, with "more"). The table is as wide as its columns need,
// and its box scrolls sideways below that (a phone).
let measureCtx = null;
function textWidth(text, font) {
  measureCtx = measureCtx || document.createElement("canvas").getContext("2d");
  measureCtx.font = font;
  return measureCtx.measureText(text).width;
}

function columnWidth(c, rows, fonts) {
  if (TEXT_COLUMNS.includes(c)) return TEXT_MIN_PX[c];
  const head = Math.max(...c.split(/(?<=[_./])/).map((part) => textWidth(part, fonts.head)));
  let cells = 0, strings = false;
  for (const r of rows) {
    if (r[c] === undefined || r[c] === null) continue;
    strings = strings || typeof r[c] === "string";
    cells = Math.max(cells, textWidth(cellText(r[c]), fonts.cell));
  }
  return Math.ceil(Math.max(MIN_PX, head, strings ? Math.min(cells, STRING_MAX_PX) : cells) + CELL_PAD_PX);
}

// Copying cells gives their values as stored, tab-separated, a line per row (a selection inside
// one text cell copies as the browser does: part of an opened completion).
function copyFull(e) {
  const sel = document.getSelection();
  const focused = document.activeElement;
  if ((!sel || sel.isCollapsed) && fullText.has(focused)) {  // the keyboard's cell (cellKeys): its value as stored
    e.clipboardData.setData("text/plain", fullText.get(focused));
    e.preventDefault();
    return;
  }
  if (!sel || sel.isCollapsed) return;
  const within = (n) => (n && n.nodeType !== 1 ? n.parentNode : n)?.closest("td");
  const one = within(sel.anchorNode);
  if (one && one === within(sel.focusNode) && one.classList.contains("text")) return;
  const lines = [];
  for (const tr of e.currentTarget.rows) {
    const cells = [...tr.cells].filter((td) => fullText.has(td) && sel.containsNode(td, true));
    if (cells.length) lines.push(cells.map((td) => fullText.get(td)).join("\t"));
  }
  if (!lines.length) return;
  e.clipboardData.setData("text/plain", lines.join("\n"));
  e.preventDefault();
}

// The keyboard in the table's cells: one Tab stop (the cell last visited, the first at first), the
// arrows move a cell (Home and End: the row's first and last), Ctrl+C copies the cell's value as
// stored, Enter opens a text cell's "more". The buttons and links of a row keep their own Tab stops.
const CELL_MOVES = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
function cellKeys(table) {
  const cells = [...table.tBodies[0].rows].map((tr) => [...tr.cells].filter((td) => fullText.has(td)));
  if (!cells.length || !cells[0].length) return;
  for (const row of cells) for (const td of row) td.tabIndex = -1;
  cells[0][0].tabIndex = 0;
  const move = (td) => {
    for (const other of table.querySelectorAll("td[tabindex='0']")) other.tabIndex = -1;
    td.tabIndex = 0;
    td.focus();
  };
  table.addEventListener("keydown", (e) => {
    const td = e.target;
    if (!fullText.has(td) || e.altKey || e.ctrlKey || e.metaKey) return;
    const r = cells.findIndex((row) => row.includes(td)), c = cells[r].indexOf(td);
    let to = null;
    if (CELL_MOVES[e.key]) {
      const [dr, dc] = CELL_MOVES[e.key];
      const row = cells[r + dr];
      to = row && row[Math.min(Math.max(c + dc, 0), row.length - 1)];
    } else if (e.key === "Home") to = cells[r][0];
    else if (e.key === "End") to = cells[r].at(-1);
    else if (e.key === "Enter" && td.querySelector("button.more:not([hidden])")) {
      e.preventDefault();
      td.querySelector("button.more").click();
      return;
    } else return;
    e.preventDefault();  // the arrows would scroll the box
    if (to) move(to);
  });
}

function tableOf(rows) {
  const linked = linkedIn(rows);
  const hidden = hiddenColumns();
  const cols = allColumnsOf(rows).filter((c) => !hidden.has(c));
  const family = getComputedStyle(document.body).fontFamily;
  const fonts = { cell: `13px ${family}`, head: `bold 12px ${family}` };
  const widths = cols.map((c) => columnWidth(c, rows, fonts));
  const colgroup = h("colgroup", {}, h("col", { style: `width: ${ACTIONS_PX}px` }),
    ...cols.map((c, i) => h("col", TEXT_COLUMNS.includes(c) ? { class: "c-" + c } : { style: `width: ${widths[i]}px` })));
  const head = h("tr", {}, h("th", {}, h("span", { class: "visually-hidden", text: "sample" })), ...cols.map(headerCell));
  const minWidth = ACTIONS_PX + widths.reduce((sum, w) => sum + w, 0);
  const table = h("table", { id: "samples-table", style: `min-width: ${minWidth}px`, oncopy: copyFull }, colgroup,
    h("thead", {}, head), h("tbody", {}, ...rows.map((r) => sampleRow(r, cols, linked))));
  cellKeys(table);
  return table;
}

// The strings every row shares, once: "kept_because: kl spike ..." (not bookkeeping, not picked).
function commonLine(rows) {
  const hidden = hiddenColumns();
  const shared = constantColumns(rows).filter((c) => hidden.has(c) && !HIDDEN_BY_DEFAULT.has(c));
  return shared.map((c) => h("span", { "data-col": c }, h("b", { text: c + ": " }), fmtCell(rows[0][c])));
}

// What the table holds of what is selected: "500 of 1,024 rows" until every row is loaded.
function countNote() {
  const n = (x) => x.toLocaleString("en");
  const of = shownRows.length < totalRows ? `${n(shownRows.length)} of ${n(totalRows)}` : n(totalRows);
  const parts = [];
  const shown = shownRows.length < totalRows ? ` (${n(shownRows.length)} shown)` : "";
  if (filtering() && filterColumnRows === 0) {
    parts.push(`none of the ${n(unfilteredRows)} rows has a number in column "${state.filter.col}"`);
  } else if (filtering()) parts.push(`${n(totalRows)} of ${n(unfilteredRows)} ${state.q ? "matches over all steps" : "rows"} pass the filter${shown}`);
  else if (state.q) parts.push(`${of} match(es) over all steps`);
  else if (shownRows.length < totalRows) parts.push(`${of} rows`);
  if (linkedRow) parts.push(`sample ${linkedRow.sample_index} (linked) shown first`);
  return parts.join("; ");
}

function render() {
  const wrap = document.getElementById("samples");
  const rows = linkedRow ? [linkedRow, ...shownRows.filter((r) => !sameRow(r, linkedRow))] : shownRows;
  setText(document.getElementById("samples-note"), countNote());
  const more = document.getElementById("samples-more");
  const left = totalRows - shownRows.length;
  more.hidden = left <= 0;
  setText(more, `${Math.min(left, PAGE_ROWS).toLocaleString("en")} more`);
  document.getElementById("samples-common").replaceChildren(...commonLine(shownRows));
  // A sort started from the keyboard keeps the focus on its header across the redraw.
  const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest("#samples-table th");
  wrap.replaceChildren(rows.length ? tableOf(rows)
    : h("p", { class: "muted empty", text: filtering() ? "no samples pass the filter" : "no samples" }));
  if (focused) {
    const again = [...wrap.querySelectorAll("th[data-col]")].find((th) => th.dataset.col === focused.dataset.col);
    if (again) again.querySelector("button").focus({ preventScroll: true });
  }
  markCut(wrap);
  refreshPickers();
  const linked = wrap.querySelector("tr.linked");
  if (linked) linked.scrollIntoView({ block: "center" });
}

// While rows are on their way the ones shown stay, dimmed and marked busy, and the status says
// what is coming (a step change on a slow store showed the old step's rows as if they were new).
function setLoading(text) {
  const wrap = document.getElementById("samples");
  wrap.classList.toggle("loading", !!text);
  if (text) wrap.setAttribute("aria-busy", "true"); else wrap.removeAttribute("aria-busy");
  setText(document.getElementById("samples-status"), text || "");
}

// Errors of the samples table stay in its own box, and the table shown before stays usable: the
// plots and the rest of the run are never replaced by an error (a 422 on a sort did that).
// Only the latest request's answer is shown: an older one arriving after it (a step picked, then a
// sort clicked twice) would put its rows under the newer state's headers.
// A read that failed leaves no rows of another view than the one asked for (a step picked while the sidecar is
// away): those of the view still asked for stay (a sort refused: `undo` puts `state` back as shown first), others
// give way to the error alone; one that may succeed later (err.retryable) is read again by the next live refresh
// that works (data-retry: refreshRun).
let samplesAsked = 0;
let samplesShown = null;  // the view whose rows the table holds (samplesView)
let sortShown = null;  // the sort of those rows: what a refused sort goes back to, not a sort asked for since
let samplesReading = 0;  // reads under way: the live refresh's retry waits for their answer (refreshRun)
const samplesView = () => `${state.run}?${samplesParams(PAGE_ROWS)}`;
const samplesPending = () => samplesReading > 0;
// `more`: the next PAGE_ROWS rows after those loaded, else the first page (and the linked sample).
async function loadSamples(more = false, undo = null) {
  samplesReading++;
  try {
    await readAndShowSamples(more, undo);
  } finally {
    samplesReading--;
  }
}

async function readAndShowSamples(more, undo) {
  const wrap = document.getElementById("samples");
  const note = document.getElementById("samples-note");
  const asked = ++samplesAsked, view = samplesView();
  const offset = more ? shownRows.length : 0;
  setLoading(more ? `loading rows ${(offset + 1).toLocaleString("en")}–…` : state.q ? `searching "${state.q}"…` : `loading step ${state.step}…`);
  try {
    const response = await apiFetch(`${runPath(state.run)}/samples?${withTextChars(samplesParams(PAGE_ROWS, offset))}`);
    const rows = await sampleRows(response);
    const total = Number(response.headers.get("X-Total-Count") || offset + rows.length);
    const linked = more ? linkedRow : await linkedSample(rows);
    const unfiltered = more || !filtering() ? unfilteredRows : await rowsOf(samplesParams(1, 0, false));
    // None pass the filter: has any row a number in its column at all (a link's typo, another step's column)?
    const numbered = more || !filtering() || total || !unfiltered ? null
      : state.filter.min + state.filter.max === "" ? 0 : await rowsOf(samplesParams(1, 0, false), state.filter.col);
    if (asked !== samplesAsked || !wrap.isConnected) return;  // a newer ask, or a newer view (route)
    if (!more && rows.length && state.orderBy && !(state.orderBy in rows[0])) {
      // The server puts rows without the column last: the first lacks it, so all do (a link's typo).
      linkNote(`no column "${state.orderBy}" in these samples to sort by: not sorted`);
      Object.assign(state, { orderBy: null, desc: false });
      writeUrl();
      return loadSamples();
    }
    if (!more && state.sample !== null && state.step !== null && !state.q && !linked && !linkedIn(rows)) {
      linkNote(`sample ${rowName(state.sample)} is not at step ${state.step}`);
      state.sample = null;
      writeUrl();
    }
    filterColumnRows = more ? filterColumnRows : numbered;
    unfilteredRows = unfiltered;
    shownRows = more ? [...shownRows, ...rows] : rows;
    totalRows = total;
    linkedRow = linked && !shownRows.some((r) => sameRow(r, linked)) ? linked : null;
    note.classList.remove("alert-firing");
    wrap.removeAttribute("data-error");
    wrap.removeAttribute("data-retry");
    samplesShown = view;
    sortShown = { orderBy: state.orderBy, desc: state.desc };
    setLoading(null);
    render();
  } catch (err) {
    if (asked !== samplesAsked) return;
    if (undo) undo();
    setLoading(null);
    if (!more && samplesView() !== samplesShown) {
      [shownRows, totalRows, linkedRow, samplesShown, sortShown] = [[], 0, null, null, null];
      wrap.replaceChildren(h("p", { class: "muted empty", text: "no rows shown: they could not be read" }));
      document.getElementById("samples-common").replaceChildren();
      document.getElementById("samples-more").hidden = true;
    }
    setText(note, `cannot show these samples: ${err instanceof ApiError ? err.message : String(err)}`);
    note.classList.add("alert-firing");
    wrap.setAttribute("data-error", "1");
    if (err instanceof ApiError && err.retryable) wrap.setAttribute("data-retry", "1");
    else wrap.removeAttribute("data-retry");
  }
}

// How many rows the server has for `params` (on all pages); with `numberIn`, those that have a number
// in that column.
async function rowsOf(params, numberIn = null) {
  if (numberIn) params.set("filter_col", numberIn);
  const response = await apiFetch(`${runPath(state.run)}/samples?${params}`);
  return Number(response.headers.get("X-Total-Count"));
}

// The row of `rows` that the link names (state.sample at state.step); null: none.
function linkedIn(rows) {
  return state.sample === null ? null : namedRow(rows.filter((r) => String(r.step) === state.step), state.sample);
}

// The linked sample of the step, where the page of `rows` does not hold it: asked for by its index (the rows of
// it, one a writer attempt), and the one it names taken.
async function linkedSample(rows) {
  if (state.sample === null || state.q || state.step === null || linkedIn(rows)) return null;
  const p = withTextChars(oneSampleParams(state.step, state.sample.sample_index, SAME_INDEX));
  const found = await readSamples(p).catch(() => []);
  return namedRow(found, state.sample);
}

// A sort refused goes back to the sort of the rows shown: a sort clicked while another was still being read
// would otherwise go back to that one, never shown, and the rows shown would give way to the error.
function sortBy(column) {
  const shown = sortShown || { orderBy: state.orderBy, desc: state.desc };
  state.desc = state.orderBy === column ? !state.desc : HIGH_FIRST.test(column);
  state.orderBy = column;
  loadSamples(false, () => Object.assign(state, shown)).then(() => {  // refused: what is shown is kept
    writeUrl(!document.getElementById("samples").dataset.error);  // a sort shown is a step back can undo
  });
}

// The column picker and the filter's column list follow the columns the rows have.
function refreshPickers() {
  const cols = allColumnsOf(shownRows);
  const hidden = hiddenColumns();
  const picker = document.getElementById("column-picker");
  setText(picker.querySelector("summary"), `columns (${cols.filter((c) => hidden.has(c)).length} hidden)`);
  picker.querySelector(".choices").replaceChildren(...cols.map((c) => {
    const box = h("input", { type: "checkbox", "data-col": c, onchange: (e) => pickColumn(c, e.target.checked) });
    box.checked = !hidden.has(c);
    return h("label", {}, box, " " + c);
  }));
  const select = document.getElementById("filter-col");
  const names = [...new Set(["", ...numericColumns(shownRows), state.filter.col])];  // the filter's column, rows or none
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
    const name = `${state.run.replace(/[^\w.-]+/g, "_")}-${state.q ? "search" : "step-" + state.step}`
      + `${filtering() ? "-filtered" : ""}.${kind}`;
    const a = h("a", { href: url, download: name });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (err) {
    setText(note, `cannot download: ${err.message || err}`);
    note.classList.add("alert-firing");
  }
}

function filterControls() {
  const col = h("select", { id: "filter-col", title: "keep rows whose value in this column is within [min, max]",
                            "aria-label": "filter: column" });
  const min = numberBox({ id: "filter-min", placeholder: "min", "aria-label": "filter: minimum" });
  const max = numberBox({ id: "filter-max", placeholder: "max", "aria-label": "filter: maximum" });
  min.value = state.filter.min;
  max.value = state.filter.max;
  // A link's bound as the box reads it: "abc", "0x1", "1e999" are none (and leave the URL).
  Object.assign(state.filter, { min: boxNumber(min), max: boxNumber(max) });
  const apply = () => {  // the server filters the whole step (or search), not the rows loaded
    if (!col.value) { min.value = ""; max.value = ""; }  // no column: no bounds shown
    state.filter = { col: col.value, min: boxNumber(min), max: boxNumber(max) };
    writeUrl(true);
    loadSamples();
  };
  for (const input of [col, min, max]) input.addEventListener("change", apply);
  return [col, min, max];
}

// The step picker's options: the steps that have samples (`steps`, the latest first) and the step shown, while it
// is shown (one that retention removed since stays, marked, until another is picked), changed in place (the
// keyboard's focus stays on the picker); its value state.step.
function stepOptions(select, steps) {
  const values = [...new Set([...steps.map(String), ...(state.step === null ? [] : [state.step])])].sort((a, b) => b - a);
  const text = (s) => `step ${s}` + (steps.includes(+s) ? "" : " (no samples now)");
  if ([...select.options].map((o) => o.text).join() !== values.map(text).join()) {
    select.replaceChildren(...values.map((s) => h("option", { value: s, text: text(s) })));
  }
  select.value = state.step ?? "";
}

// The samples' controls as `state` says, after any change of it or of the steps that have samples (a live
// refresh): the step picker (stepOptions), and the group view, closed where state.group is none.
function showSamplesState() {
  const select = document.getElementById("step-select");
  if (select) stepOptions(select, sampleSteps);
  if (state.group === null) closeGroup();
}

function samplesControls(steps) {
  const select = h("select", { id: "step-select", onchange: (e) => { setStep(e.target.value); loadSamples(); } });
  stepOptions(select, steps);
  const search = h("input", { id: "search", type: "search", placeholder: "search prompt / completion (all steps)",
                              "aria-label": "search the prompts and completions of all steps" });
  search.value = state.q;
  onTyped(search, (q) => { state.q = q; writeUrl(); loadSamples(); });
  const picker = h("details", { id: "column-picker" }, h("summary", { text: "columns" }), h("div", { class: "choices" }));
  return h("div", { class: "controls" }, h("label", { for: "step-select", text: "step" }), select, search,
    ...filterControls(), picker,
    h("button", { id: "download-csv", type: "button", text: "CSV", onclick: () => download("csv"),
                  title: "download these samples (all that pass the filter) as CSV" }),
    h("button", { id: "download-jsonl", type: "button", text: "JSONL", onclick: () => download("jsonl"),
                  title: "download these samples (all that pass the filter) as JSON Lines" }),
    h("span", { id: "samples-status", class: "muted", role: "status" }),
    h("span", { id: "samples-note", class: "muted" }),
    h("button", { id: "samples-more", type: "button", hidden: "", title: "load the next rows of these samples",
                  onclick: () => loadSamples(true) }));
}

// `sample`: the sample linked at that step (a key: rowKey). One step of the history either way.
function setStep(step, sample = null) {
  Object.assign(state, { step: step === null ? null : String(step), q: "", sample, group: null });
  const search = document.getElementById("search");
  if (search) search.value = "";
  showSamplesState();
  writeUrl(true);
  redrawPlots();
}

// A row's "#" (in its row `tr`): that sample linked (the URL) and marked; a search's row opens its step.
function pickSample(r, tr) {
  const searched = !!state.q;
  setStep(r.step, rowKey(r));
  for (const t of document.querySelectorAll("#samples-table tr.linked")) t.classList.remove("linked");
  if (!searched) tr.classList.add("linked"); else loadSamples();
}
