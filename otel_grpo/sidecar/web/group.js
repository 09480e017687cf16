// The group view: every stored completion of one prompt at one step, side by side, ranked by
// reward. Reads and writes `state` (app.js); opened from a row of the samples table (table.js).
"use strict";

function groupError(err) {
  document.getElementById("group-view").replaceChildren(h("p", { class: "alert-firing", text: String(err.message || err) }));
}

// A group is one attempt's rows of a step with its `group` attribute (of one rank, `source_rank`: a loop numbers
// its groups per rank, as the demo trainer does), or with its prompt where they carry none (a verl or TRL dump):
// sameGroup. Two attempts' rows of a step can share a group number (a relaunch's evaluation at the step the
// crashed attempt trained), so the URL names a group by one of its samples (groupof=5@<attempt>: table.js's
// rowName), which also carries a prompt too long for a link; state.group is that sample's key (rowKey). A link by
// the attribute alone (group=3, written before attempts) is still read: state.group is {group}, the group of the
// first row that has it.
function openGroup(row) {
  // A search's row may be of another step than the one picked: the group is of the row's step, and so is the link
  // (a sample linked at the step picked is not of it).
  if (String(row.step) !== state.step) {
    Object.assign(state, { step: String(row.step), sample: null });
    redrawPlots();  // the charts' step marker
  }
  state.group = rowKey(row);
  showSamplesState();
  writeUrl(true);
  showGroup(row.step, state.group, rowKey(row)).catch(groupError);
}

// No group shown, nor drawn when one asked for comes (state.group is none: a step or a sample picked).
function closeGroup() {
  groupAsked += 1;
  document.getElementById("group-view")?.replaceChildren();
}

// How a link names the group `key` (state.group).
function groupLinkPart(key) {
  return "group" in key ? `group=${key.group}` : `groupof=${rowName(key)}`;
}

// A prompt cut by the server (TEXT_CHARS) is compared by what came and its full length.
function sameGroup(a, b) {
  const length = (r) => r.texts_cut?.prompt ?? null;
  const rank = (r) => r.source_rank ?? null;
  return a.step === b.step && rowKey(a).attempt === rowKey(b).attempt && ("group" in a && "group" in b
    ? a.group === b.group && rank(a) === rank(b) : a.prompt === b.prompt && length(a) === length(b));
}

// A prompt's or a completion's box; a text the server cut (table.js's TEXT_CHARS) adds "show all",
// which reads its sample whole.
function groupText(cls, r, c) {
  const pre = h("pre", { class: cls, text: fmtCell(r?.[c]) });
  if (!r?.texts_cut?.[c]) return [pre];
  const showAll = async () => {
    try {
      setText(pre, fmtCell((await wholeSample(r))[c]));
      all.remove();
    } catch (err) {
      setText(all, `cannot show all: ${err.message || err}`);
    }
  };
  const all = h("button", { class: "more show-all", type: "button", text: "show all", title: cutTitle(r, c),
                            onclick: showAll });
  return [pre, all];
}

const GROUP_STATS = [["reward", "reward"], ["advantage", "advantage"], ["length", "completion_length"],
                     ["KL to ref", "kl_ref_mean"], ["IS weight max", "is_weight_max"], ["entropy", "entropy_mean"],
                     ["sample", "sample_index"]];

// The group of the first row at `step` with `key`'s group, or of the row `key` names (state.group); `picked`: the
// sample marked (a key: rowKey).
// Only the latest group asked for is drawn, in the view it was asked from (a group opened, then
// another, or a navigation, before the first came). `linked`: asked by the link the page opened, which
// says so (linkNote) and drops it where there is no such group at that step.
let groupAsked = 0;
async function showGroup(step, key, picked = "group" in key ? null : key, linked = false) {
  const p = withTextChars(new URLSearchParams({ step: String(step), limit: "10000", order_by: "reward",
                                                desc: "true" }));
  const asked = ++groupAsked, shownIn = document.getElementById("group-view");
  const all = await readSamples(p);
  if (asked !== groupAsked || !shownIn.isConnected) return;
  const named = "group" in key ? all.find((r) => String(r.group) === key.group) : namedRow(all, key);
  const rows = named ? all.filter((r) => sameGroup(r, named)) : [];
  const pickedRow = picked && namedRow(rows, picked);
  if (!rows.length && linked) {
    linkNote("group" in key ? `group ${key.group} is not at step ${step}`
      : `no group of sample ${rowName(key)} at step ${step}`);
    state.group = null;
    writeUrl();
    return;
  }
  const view = document.getElementById("group-view");
  const fns = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((k) => k.startsWith("reward.")).sort();
  const stats = [GROUP_STATS[0], ...fns.map((f) => [f, f]), ...GROUP_STATS.slice(1)];
  const cards = rows.map((r, i) => h("div", { class: "group-card" + (r === pickedRow ? " picked" : "") },
    h("div", { class: "rank", text: `#${i + 1}` }),
    h("table", { class: "group-stats" }, h("tbody", {},
      ...stats.filter(([, k]) => k in r).map(([label, k]) => h("tr", {}, h("th", { text: label }),
                                                                   h("td", { class: "num", text: fmtCell(r[k]) }))))),
    ...groupText("completion", r, "completion")));
  const title = !rows.length ? `No group ${"group" in key ? key.group : `of sample ${rowName(key)}`} at step ${step}`
    : `Group at step ${step}` + ("group" in key ? ` (group ${key.group})` : "") +
      `: ${rows.length} completion(s) stored, ranked by reward`;
  // The view as it is, with this group open (as a sample's link).
  const here = { ...stateParams(), q: null, sample: null, step };
  const link = h("a", { href: runHash(state.run, here), class: "group-link", text: "link" });
  view.replaceChildren(
    h("div", { class: "group-head" }, h("h3", { text: title }), link,
      h("button", { type: "button", class: "group-close", text: "close",
                    onclick: () => { state.group = null; closeGroup(); writeUrl(true); } })),
    ...groupText("prompt", rows[0], "prompt"),
    h("div", { class: "group-cards", "data-count": String(rows.length) }, ...cards));
  view.scrollIntoView();
}
