// Shared by the page's scripts: element building (text only through textContent, never
// innerHTML: a completion containing <script> is shown as text; every text shown goes through
// shownText()), the read API, number formatting, search as you type.
"use strict";

// Unicode's explicit bidi controls: embeddings, overrides (U+202A-U+202E) and isolates (U+2066-U+2069).
const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069]/g;

// Text as the page shows it: bidi controls as visible code points (`⟨U+202E⟩`). An unclosed
// RIGHT-TO-LEFT OVERRIDE in a run id, a column name or a completion reverses the rest of its line,
// the page's own words and numbers too ("(this run)" read "(nur siht)", a hover box's 12.5 read
// 5.21); an isolate (<bdi>) does not hold it, a stray U+2069 in the data ends one. What links, looks
// up or exports (hrefs, data-* attributes, option values, copies of cells, downloads) keeps the
// value as stored. null and undefined show as nothing, as with textContent.
function shownText(text) {
  const codePoint = (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase()}⟩`;
  return (text === null || text === undefined ? "" : String(text)).replace(BIDI_CONTROLS, codePoint);
}

// The attributes a browser shows as text (tooltips, the screen reader's name, an empty box's hint).
const SHOWN_ATTRIBUTES = new Set(["title", "aria-label", "placeholder"]);

function setText(node, text) {
  node.textContent = shownText(text);
}

function h(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "text") setText(node, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    // Through the CSSOM: the page's Content-Security-Policy refuses style attributes (no 'unsafe-inline').
    else if (k === "style") node.style.cssText = v;
    else node.setAttribute(k, SHOWN_ATTRIBUTES.has(k) ? shownText(v) : v);
  }
  for (const c of children) node.appendChild(typeof c === "string" ? document.createTextNode(shownText(c)) : c);
  return node;
}

// A read that failed: `status` (null: no answer at all), `retryAfter` (the server's Retry-After in
// seconds, null where it gave none) and `retryable` (the same read may succeed later: no answer, a
// 502, 503 or 504, or any answer with a Retry-After; not a 404 nor a refused token).
class ApiError extends Error {
  constructor(message, { status = null, retryAfter = null, retryable = false } = {}) {
    super(message);
    Object.assign(this, { status, retryAfter, retryable });
  }
}

const RETRYABLE_STATUS = new Set([502, 503, 504]);

// Retry-After's seconds (its two forms: a number of seconds or an HTTP date); null: none or unreadable.
function retryAfterSeconds(value) {
  if (value === null || value === "") return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

const TOKEN_KEY = "otel-grpo-read-token";
const readToken = () => localStorage.getItem(TOKEN_KEY);

function authHeaders() {
  const token = readToken();
  return token ? { Authorization: "Bearer " + token } : {};
}

// The read API said no (401, or 403 from a proxy in front): a token that was sent is a wrong one,
// none sent is a missing one. The masked token form (index.html) opens, saying which.
function tokenRefused(status) {
  const sent = !!readToken();
  const message = sent
    ? `the read token was refused (HTTP ${status}): it is not this sidecar's read token; enter it again above`
    : "the read API needs a token: enter the sidecar's read token above";
  document.getElementById("token-button").hidden = false;
  document.getElementById("token-forget").hidden = !sent;
  const form = document.getElementById("token-form");
  form.hidden = false;
  form.dataset.reason = sent ? "refused" : "missing";
  setText(document.getElementById("token-status"), sent ? "refused" : "needed");
  document.getElementById("token-input").focus();
  return new ApiError(message);
}

// The longest a read goes without a byte from the sidecar before the page gives it up as unanswered
// (retryable: the error page and the live refresh try it again): a stopped sidecar, or a proxy
// holding the connection, answers nothing, and fetch itself would wait minutes or for ever, holding
// every retry behind it. The sidecar writes its own bound into the page (routes/web.py), so a read
// it is still working on is never cut; 30 s where the page was not served by a sidecar.
const READ_STALL_S = Number(document.querySelector('meta[name="otel-grpo-read-stall-s"]')?.content) || 30;

// At most this many reads of the page's in flight, the rest waiting here: a run page with overlays asks
// for tens at once, and past 6 a host the browser queues them itself, a wait the stall bound would count
// (a slow sidecar's answers, each in time, were given up on in the queue). Fewer also spares a slow sidecar.
const READS_AT_ONCE = 6;
let readsOpen = 0;
const readsWaiting = [];

async function readSlot() {
  if (readsOpen < READS_AT_ONCE) readsOpen += 1;
  else await new Promise((resolve) => readsWaiting.push(resolve));  // handed over by freeSlot
}

function freeSlot() {
  const next = readsWaiting.shift();
  if (next) next();
  else readsOpen -= 1;
}

// The whole answer to a read, its body read here so that the stall bound covers it too (an answer
// whose body stops coming is no answer); callers read the copy as they would the network's. The bound
// counts from the read's own start, not its wait for a slot.
async function readWhole(path) {
  await readSlot();
  const stalled = new AbortController();
  let timer = null;
  const wait = () => { clearTimeout(timer); timer = setTimeout(() => stalled.abort(), READ_STALL_S * 1000); };
  try {
    wait();
    const r = await fetch(path, { headers: authHeaders(), signal: stalled.signal });
    const chunks = [];
    for (const reader = r.body?.getReader(); reader;) {  // a 204 has no body
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      wait();
    }
    const body = chunks.length ? new Blob(chunks) : null;
    return new Response(body, { status: r.status, statusText: r.statusText, headers: r.headers });
  } catch (e) {  // no answer: the sidecar or the network is down (fetch says only "Failed to fetch"), or silent
    const why = stalled.signal.aborted ? `nothing for ${READ_STALL_S} s` : e.message;
    throw new ApiError(`the sidecar did not answer (${why})`, { retryable: true });
  } finally {
    clearTimeout(timer);
    freeSlot();
  }
}

async function apiFetch(path) {
  const r = await readWhole(path);
  if (r.status === 401 || r.status === 403) throw tokenRefused(r.status);
  if (!r.ok) {
    let detail = "";
    try {
      const body = await r.json();
      detail = typeof body.detail === "string" ? body.detail : body.detail[0].msg;
    } catch (e) { /* no JSON message */ }
    const retryAfter = retryAfterSeconds(r.headers.get("Retry-After"));
    throw new ApiError(`HTTP ${r.status}${detail ? ": " + detail : ""}`,
                       { status: r.status, retryAfter, retryable: retryAfter !== null || RETRYABLE_STATUS.has(r.status) });
  }
  return r;
}

async function api(path) {
  return (await apiFetch(path)).json();
}

// Whether a run is there: only a 404 says it is not; any other failure (the database away, a 503)
// is thrown, so a link's compared run is not dropped for an outage but waits with the page for it.
const NOT_THERE = 404;
async function runThere(path) {
  try {
    return await api(path);
  } catch (e) {
    if (e.status === NOT_THERE) return null;
    throw e;
  }
}

// Any run id: "/" is sent as %2F (the API reads it back), "." as %2E (a run named ".." must not
// become a dot segment that fetch resolves away).
const runPath = (runId) => "/api/runs/" + encodeURIComponent(runId).replace(/\./g, "%2E");

const SEARCH_WAIT_MS = 250;  // typing pauses this long before a search box's text is used
const SEARCH_MAX_CHARS = 128;  // the read API's longest run search (`q`, api/listing.py): the boxes' maxlength

// Search as you type: `use(text)` with the box's text, trimmed, once the typing pauses.
function onTyped(box, use) {
  let timer = null;
  box.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => use(box.value.trim()), SEARCH_WAIT_MS);
  });
}

// A value exactly as stored (a number's shortest round-trip form): tooltips, copies.
function fmtFull(v) {
  return typeof v === "number" ? String(v) : fmtCell(v);
}

function fmtCell(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(+v.toPrecision(6));
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

// Every number box of the page. Text it cannot read as a finite number ("--3", "1e999": the box's
// value is then "", and no change event comes where it was "" already) stays shown, so it is marked
// as ignored as it is typed: red, aria-invalid, a title saying so. Read it with boxNumber.
function numberBox(props) {
  const box = h("input", { ...props, type: "number", step: "any" });
  box.addEventListener("input", () => boxNumber(box));
  return box;
}

// What a number box applies, its mark brought up to date: its number's text, or "" (none, or ignored).
function boxNumber(box) {
  const bad = box.validity.badInput || !Number.isFinite(+box.value);
  box.setAttribute("aria-invalid", bad);
  box.title = bad ? "not a number: ignored" : "";
  return bad ? "" : box.value;
}
