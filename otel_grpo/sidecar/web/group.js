// The group view: every stored completion of one prompt at one step, side by side, ranked by
// reward. Reads and writes `state` (app.js); opened from a row of the samples table (table.js).
"use strict";

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
  // The view as it is, with this group open (as a sample's link).
  const here = { ...stateParams(), q: null, sample: null, step: row.step, group: row.group };
  const link = h("a", { href: runHash(state.run, here), class: "group-link", text: "link" });
  view.replaceChildren(
    h("div", { class: "group-head" }, h("h3", { text: title }), link,
      h("button", { type: "button", class: "group-close", text: "close",
                    onclick: () => { view.replaceChildren(); state.group = null; writeUrl(); } })),
    h("pre", { class: "prompt", text: fmtCell(rows.length ? rows[0].prompt : row.prompt) }),
    h("div", { class: "group-cards", "data-count": String(rows.length) }, ...cards));
  view.scrollIntoView();
}
