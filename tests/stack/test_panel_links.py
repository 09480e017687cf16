"""Each alert's `dashboard_url` opens a panel that exists in the dashboard generated with the same settings."""

from __future__ import annotations

import re

import pytest

from otel_grpo.generate import FLOORS, THRESHOLDS, RuleSettings, alerts
from otel_grpo.generate._checks import all_panels
from otel_grpo.generate.dashboards import overview, panel_id

_DEFAULTS = RuleSettings()
SETTINGS = {
    "defaults": _DEFAULTS,
    "fast": RuleSettings.fast(),
    # overrides add threshold lines to panels: the panels and their ids stay
    "overrides": RuleSettings(overrides={"r": {name: getattr(_DEFAULTS, name) for name in THRESHOLDS + FLOORS}}),
}
LINK = re.compile(r"/d/(?P<uid>[^/]+)/\?viewPanel=panel-(?P<id>\d+)(&var-run_id=|$)")  # a run's alert selects it


@pytest.mark.parametrize("name", SETTINGS)
def test_every_alert_link_opens_a_panel_of_the_generated_dashboard(name):
    settings = SETTINGS[name]
    dashboard = overview(settings)
    panels = {p["id"]: p for p in all_panels(dashboard) if p["type"] != "row"}
    links = {r["alert"]: LINK.search(r["annotations"]["dashboard_url"])
             for r in alerts(settings) if "dashboard_url" in r["annotations"]}
    assert len(links) >= 17  # every run alert links its panel
    for alert, link in links.items():
        assert link and link["uid"] == dashboard["uid"], alert
        assert int(link["id"]) in panels, f"{alert} links panel {link['id']}, which the dashboard lacks"


def test_panel_ids_are_those_of_the_rendered_dashboard_and_unique():
    rendered = list(all_panels(overview()))
    assert len({p["id"] for p in rendered}) == len(rendered)
    for p in rendered:
        if p["type"] != "row":
            assert panel_id(p["title"]) == p["id"], p["title"]
    with pytest.raises(KeyError, match="no overview panel titled 'nope'"):
        panel_id("nope")
