"""What every alert rule is built from: the rule dict, its links, and the summary templates."""

from __future__ import annotations

from ._rules import RuleSettings
from .dashboards import UID, panel_id

RUN = "run {{ $labels.run_id }}"
VAL = '{{ $value | printf "%.3g" }}'  # humanize would print 0.5 as "500m"
STEP = '{{ $value | printf "%.0f" }}'  # a step index
DURATION = "{{ $value | humanizeDuration }}"  # seconds


def alert(s: RuleSettings, name: str, expr: str, for_: str, severity: str, summary: str, description: str,
          panel: str | None = None) -> dict:
    annotations = {"summary": summary, "description": description,
                   "runbook_url": f"{s.runbook_base}#{name.lower()}"}
    if panel is not None:
        annotations["dashboard_url"] = panel_url(s, panel)
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity}, "annotations": annotations}


def panel_url(s: RuleSettings, title: str) -> str:
    return (f"{s.grafana_url.rstrip('/')}/d/{UID}/?viewPanel=panel-{panel_id(title)}"
            "&var-run_id={{ $labels.run_id | urlquery }}")  # a run id may hold ' ', '#' or '&'
