"""Generated Grafana dashboards: current, catalog-complete, valid PromQL, consistent with provisioning."""

from __future__ import annotations

import json

import yaml

from otel_grpo.stack._checks import allowed_series, catalog_series, concrete, dashboard_exprs, metric_names
from otel_grpo.stack.dashboards import dashboard_files, dashboards


def test_committed_dashboards_equal_regenerated(root):
    for rel, text in dashboard_files().items():
        assert (root / rel).read_text() == text, f"{rel} is stale: run `otel-grpo dashboards`"


def test_every_catalog_metric_is_on_a_dashboard():
    series = catalog_series()
    shown = {series[n] for d in dashboards().values() for _, e in dashboard_exprs(d) for n in metric_names(e) if n in series}
    assert {s for s in series.values()} - shown == set()


def test_dashboards_query_only_catalog_and_recorded_metrics():
    allowed = allowed_series()
    for d in dashboards().values():
        for title, expr in dashboard_exprs(d):
            assert metric_names(expr), (title, expr)
            assert metric_names(expr) <= allowed, (title, metric_names(expr) - allowed)


def test_dashboard_expressions_run_on_prometheus(prometheus_api, http):
    for d in dashboards().values():
        for title, expr in dashboard_exprs(d):
            r = http.get(f"{prometheus_api}/api/v1/query", params={"query": concrete(expr, "some-run")})
            assert r.status_code == 200 and r.json()["status"] == "success", (title, expr, r.text)


def test_datasource_uids_match_provisioning(root):
    prov = yaml.safe_load((root / "grafana/provisioning/datasources/datasources.yml").read_text())
    provisioned = {ds["uid"]: ds["type"] for ds in prov["datasources"]}
    assert provisioned == {"prom": "prometheus", "infinity": "yesoreyeram-infinity-datasource"}
    for name in dashboard_files():
        d = json.loads((root / name).read_text())
        refs = [d["templating"]["list"][0]["datasource"]] + [a["datasource"] for a in d["annotations"]["list"]]
        for p in d["panels"]:
            refs += [p["datasource"]] if "datasource" in p else []
            refs += [t["datasource"] for t in p.get("targets", [])]
        for ref in refs:
            assert provisioned.get(ref["uid"]) == ref["type"], (name, ref)


def test_dashboard_provider_points_at_the_mounted_dashboards(root):
    prov = yaml.safe_load((root / "grafana/provisioning/dashboards/dashboards.yml").read_text())
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    mounts = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["grafana"]["volumes"]}
    path = prov["providers"][0]["options"]["path"]
    assert mounts[path] == "./grafana/dashboards"


def test_panels_do_not_overlap_and_fit_the_grid():
    for d in dashboards().values():
        taken: dict[tuple[int, int], str] = {}
        for p in d["panels"]:
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    assert (x, y) not in taken, f"{p['title']!r} overlaps {taken[(x, y)]!r}"
                    taken[(x, y)] = p["title"]
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))


def test_overview_has_run_variable_alerts_and_sidecar_samples():
    d = dashboards()["grpo-overview.json"]
    assert d["templating"]["list"][0]["name"] == "run_id"
    exprs = [e for _, e in dashboard_exprs(d)]
    assert 'ALERTS{alertstate="firing"}' in exprs
    assert any("histogram_quantile" in e and "phase" in e for e in exprs)
    urls = [t["url"] for p in d["panels"] for t in p.get("targets", []) if t["datasource"]["uid"] == "infinity"]
    assert "/api/runs/${run_id}/samples" in urls
    for _, e in dashboard_exprs(d):
        assert "ALERTS" in e or 'run_id="$run_id"' in e, e
