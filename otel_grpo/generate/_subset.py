"""Which records a rule reads, and the rules an alert needs: a smaller rule file for promtool, same verdicts.

    >>> docs = {"r.yml": {"groups": [{"name": "g", "rules": [
    ...     {"record": "a", "expr": "max(x)"}, {"record": "b", "expr": "max(y)"},
    ...     {"alert": "A", "expr": "a > 1"}, {"alert": "B", "expr": "b > 1"}]}]}}
    >>> [r.get("record") or r["alert"] for r in needed_rules(docs, {"A"})["r.yml"]["groups"][0]["rules"]]
    ['a', 'A']

`promtool test rules` evaluates every rule of the loaded files at every evaluation of a test group,
whichever alerts the group asserts on; most of a scenario's promtool time went to rules it never
reads. A rule's result depends only on the series it selects and the evaluation time, so the
rules an alert reads (transitively), kept verbatim, in their groups and in their order (a group's
rules see what the ones before them wrote at the same timestamp), fire exactly as in the full files.
"""

from __future__ import annotations

import re
from typing import Collection, Mapping

_REF = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?")
_MATCHER = re.compile(r'(\w+)(=~|!~|!=|=)"([^"]*)"')


def reads(expr: str, records: list[dict]) -> set[int]:
    """The record rules (indexes in `records`) whose series `expr` may select: by name, and by the label matchers
    it gives on the labels a rule sets (`run_id_signal_bound:grpo_step_check:beyond{signal="kl_jump", streak="3"}`
    reads that check's rule)."""
    out = set()
    for ref in _REF.finditer(expr):
        matchers = _MATCHER.findall(ref.group(2) or "")
        for i, rule in enumerate(records):
            labels = rule.get("labels", {})
            if rule["record"] == ref.group(1) and all(
                    (labels[k] == v if op == "=" else labels[k] != v if op == "!=" else
                     bool(re.fullmatch(v, labels[k])) == (op == "=~")) for k, op, v in matchers if k in labels):
                out.add(i)
    return out


def rule_reads(rule: dict, records: list[dict]) -> set[int]:
    """The records a rule reads: in its expression, and in its annotations' `query` templates
    (`clock_offset_annotation`), evaluated with the rule."""
    return reads(" ".join([rule["expr"], *rule.get("annotations", {}).values()]), records)


def needed_rules(docs: Mapping[str, dict], alerts: Collection[str]) -> dict[str, dict]:
    """`docs` (rule file -> its parsed groups) with only the rules of `alerts` and every record they read,
    directly or through other records; groups left empty are dropped (a file may end with none)."""
    rules = [r for doc in docs.values() for g in doc["groups"] for r in g["rules"]]
    records = [r for r in rules if "record" in r]
    missing = set(alerts) - {r["alert"] for r in rules if "alert" in r}
    if missing:
        raise ValueError(f"no rule for alerts {sorted(missing)}")
    keep = {id(r) for r in rules if r.get("alert") in alerts}
    todo = [r for r in rules if id(r) in keep]
    while todo:
        for i in rule_reads(todo.pop(), records):
            if id(records[i]) not in keep:
                keep.add(id(records[i]))
                todo.append(records[i])
    out = {}
    for path, doc in docs.items():
        groups = [{**g, "rules": [r for r in g["rules"] if id(r) in keep]} for g in doc["groups"]]
        out[path] = {**doc, "groups": [g for g in groups if g["rules"]]}
    return out


__all__ = ["needed_rules", "reads", "rule_reads"]
