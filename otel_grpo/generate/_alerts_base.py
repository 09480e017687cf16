"""What every alert rule is built from: the rule dict, its links, and the summary templates."""

from __future__ import annotations

from ._rules import RuleSettings
from .dashboards import UID, panel_id

RUN = "run {{ $labels.run_id }}"
VAL = '{{ $value | printf "%.3g" }}'  # humanize would print 0.5 as "500m"
STEP = '{{ $value | printf "%.0f" }}'  # a step index
DURATION = "{{ $value | humanizeDuration }}"  # seconds


def alert(s: RuleSettings, name: str, expr: str, for_: str, severity: str, summary: str, description: str,
          panel: str | None = None, per_run: bool = True) -> dict:
    """The rule; `per_run`: its alerts carry a run id, which its dashboard link selects (the stack's carry none)."""
    annotations = {"summary": summary, "description": description,
                   "runbook_url": f"{s.runbook_base}#{name.lower()}"}
    if panel is not None:
        annotations["dashboard_url"] = panel_url(s, panel, per_run)
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity}, "annotations": annotations}


def panel_url(s: RuleSettings, title: str, per_run: bool = True) -> str:
    """The overview panel `title`, viewed alone; `per_run`: for the alert's run."""
    url = f"{s.grafana_url.rstrip('/')}/d/{UID}/?viewPanel=panel-{panel_id(title)}"
    return url + "&var-run_id={{ $labels.run_id | urlquery }}" if per_run else url  # ' ', '#' or '&' in a run id'
