"""Generated Grafana dashboards: current, catalog-complete, valid PromQL, consistent with provisioning."""

from __future__ import annotations

import json
import subprocess

import yaml

from otel_grpo.stack import RuleSettings, recording_rules

from otel_grpo.generate._checks import (all_panels, allowed_series, catalog_series, concrete, dashboard_exprs, drawn_series,
                                     metric_names)
from otel_grpo.generate._panels import current_copy
from otel_grpo.generate.dashboards import STACK_COLLECTOR, STACK_SIDECAR, STACK_TARGETS, dashboard_files, dashboards


def test_committed_dashboards_equal_regenerated(root):
    for rel, text in dashboard_files().items():
        assert (root / rel).read_text() == text, f"{rel} is stale: run `otel-grpo dashboards`"


def test_every_catalog_metric_is_on_a_dashboard():
    series = catalog_series()
    shown = {series[n] for d in dashboards().values() for _, e in dashboard_exprs(d) for n in drawn_series(e) if n in series}
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
        variables = {v["name"]: v for v in d["templating"]["list"]}
        # The datasource variables default to the provisioned Prometheus and sidecar.
        chosen = {f"${{{name}}}": variables[name]["current"]["value"] for name in ("datasource", "sidecar")}
        assert {provisioned[uid] for uid in chosen.values()} == {variables[n]["query"] for n in ("datasource", "sidecar")}
        refs = [variables["run_id"]["datasource"]] + [a["datasource"] for a in d["annotations"]["list"]]
        for p in all_panels(d):
            refs += [p["datasource"]] if "datasource" in p else []
            refs += [t["datasource"] for t in p.get("targets", [])]
        for ref in refs:
            assert ref["uid"] in chosen, (name, ref)  # every panel reads through a variable: none names a uid
            assert provisioned.get(chosen[ref["uid"]]) == ref["type"], (name, ref)


def test_dashboard_provider_points_at_the_mounted_dashboards(root):
    prov = yaml.safe_load((root / "grafana/provisioning/dashboards/dashboards.yml").read_text())
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    mounts = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["grafana"]["volumes"]}
    path = prov["providers"][0]["options"]["path"]
    assert mounts[path] == "./grafana/dashboards"


def _no_overlap(panels: list[dict]) -> None:
    taken: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in taken, f"{p['title']!r} overlaps {taken[(x, y)]!r}"
                taken[(x, y)] = p["title"]


def test_panels_do_not_overlap_collapsed_or_expanded():
    for d in dashboards().values():
        _no_overlap(d["panels"])
        rows = [p for p in d["panels"] if p["type"] == "row"]
        for r in rows:  # each collapsed row, expanded alone, lays out below its header
            _no_overlap([{**r, "gridPos": {**r["gridPos"]}}] + r["panels"])
        ids = [p["id"] for p in all_panels(d)]
        assert len(ids) == len(set(ids))


def test_rows_are_collapsed_except_the_overview_and_refresh_follows_the_scrape_interval(root):
    d = dashboards()["grpo-overview.json"]
    rows = [p for p in d["panels"] if p["type"] == "row"]
    assert not rows[0]["collapsed"] and all(r["collapsed"] and r["panels"] for r in rows[1:])
    prometheus = yaml.safe_load((root / "prometheus/prometheus.yml").read_text())
    assert d["refresh"] == prometheus["global"]["scrape_interval"]


def test_runs_are_multi_select_and_matched_by_regex():
    d = dashboards()["grpo-overview.json"]
    run = {v["name"]: v for v in d["templating"]["list"]}["run_id"]
    assert run["multi"] and run["includeAll"] and run["allValue"] == ".*"
    stack = {STACK_TARGETS, STACK_COLLECTOR, STACK_SIDECAR}  # the stack's own health: of no run
    for title, expr in dashboard_exprs(d):
        if title in stack:
            assert "run_id" not in expr, (title, expr)
            continue
        assert "ALERTS" in expr or 'run_id=~"$run_id"' in expr, (title, expr)
        assert 'run_id="$run_id"' not in expr
    assert stack <= {title for title, _ in dashboard_exprs(d)}


def _panel(d: dict, title: str) -> dict:
    return next(p for p in all_panels(d) if p.get("title") == title)


def test_thresholds_come_from_the_rule_settings_and_kl_is_log_scaled():
    d, s = dashboards()["grpo-overview.json"], RuleSettings()
    for title, value in (("KL to the reference", s.kl_threshold),
                         ("Mismatch KL (k3)", s.mismatch_kl_threshold),
                         ("Clip ratios (low, high, region)", s.clip_ratio_threshold),
                         ("Clipped completions (no EOS)", s.completions_clipped_threshold)):
        defaults = _panel(d, title)["fieldConfig"]["defaults"]
        assert defaults["thresholds"]["steps"][-1]["value"] == value, title
        assert defaults["custom"]["thresholdsStyle"]["mode"] != "off", title
    for title in ("KL to the reference", "Mismatch KL (k3)"):
        assert _panel(d, title)["fieldConfig"]["defaults"]["custom"]["scaleDistribution"]["type"] == "log"


# Estimates that go below zero (k1 KL, chi-square from samples): a log axis would hide them.
MAY_BE_NEGATIVE = ("grpo_kl_k1", "grpo_mismatch_kl{", "grpo_mismatch_chi2", "advantage", "reward", "loss")


def test_log_scales_only_for_never_negative_signals():
    d = dashboards()["grpo-overview.json"]
    logs = [p for p in all_panels(d) if p.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
            .get("scaleDistribution", {}).get("type") == "log"]
    assert logs
    for panel in logs:
        for target in panel["targets"]:
            assert not any(n in target["expr"] for n in MAY_BE_NEGATIVE), (panel["title"], target["expr"])


def test_panels_draw_few_series_per_run_by_default():
    """Issue 22: one panel had 54 series; now at most about ten queries a panel (each one series per run)."""
    d = dashboards()["grpo-overview.json"]
    crowded = {p["title"]: len(p["targets"]) for p in all_panels(d) if len(p.get("targets", [])) > 11}
    assert crowded == {}


def test_per_run_threshold_overrides_are_drawn_for_their_runs():
    s = RuleSettings(overrides={"exp-42": {"kl_threshold": 2.0, "clip_ratio_threshold": 0.3}})
    d = dashboards(s)["grpo-overview.json"]
    for title, name in (("KL to the reference", "kl_threshold"), ("Clip ratios (low, high, region)", "clip_ratio_threshold")):
        exprs = [t["expr"] for t in _panel(d, title)["targets"]]
        assert f'run_id:grpo_threshold:{name}{{run_id=~"$run_id"}}' in exprs, title
    plain = [t["expr"] for t in _panel(dashboards()["grpo-overview.json"], "KL to the reference")["targets"]]
    assert not any("grpo_threshold" in e for e in plain)  # no override, no line


def test_mixed_units_get_a_right_axis():
    d = dashboards()["grpo-overview.json"]
    for title, pattern in (("Loss and gradient norm", "grad_norm.*"), ("Learning rate and KL coefficient", "beta.*"),
                           ("Step index and steps per second", ".*/s.*")):
        (override,) = _panel(d, title)["fieldConfig"]["overrides"]
        assert override["matcher"] == {"id": "byRegexp", "options": pattern}
        assert {"id": "custom.axisPlacement", "value": "right"} in override["properties"]


def test_per_second_rates_never_share_an_axis_with_other_units():
    """Issue D4: "Phase durations" drew its observations /s on its axis in seconds (0.0258/s read "25.8 ms")."""
    import re
    d = dashboards()["grpo-overview.json"]
    one_unit = {"Tokens per second"}  # a throughput gauge beside the tokens counter's rate: all per second
    mixed = {}
    for p in all_panels(d):
        if p["type"] != "timeseries" or p["title"] in one_unit:
            continue
        moved = [o["matcher"]["options"] for o in p["fieldConfig"]["overrides"]]
        left = [t["legendFormat"] for t in p["targets"] if not any(re.fullmatch(m, t["legendFormat"]) for m in moved)]
        rates = [lg for lg in left if "/s" in lg]
        if rates and len(rates) < len(left):
            mixed[p["title"]] = left
    assert mixed == {}
    phases = _panel(d, "Phase durations (quantiles per phase)")["fieldConfig"]
    assert phases["defaults"]["unit"] == "s"
    assert phases["overrides"] == [{
        "matcher": {"id": "byRegexp", "options": ".*/s.*"},
        "properties": [{"id": "unit", "value": "short"}, {"id": "custom.axisPlacement", "value": "right"}]}]


def test_histogram_quantiles_use_the_step_covering_window():
    recorded = {r["record"]: r["expr"] for r in recording_rules(RuleSettings())["groups"][0]["rules"]}
    for name, expr in recorded.items():
        if name.endswith("_bucket:rate"):
            assert f"[{RuleSettings().histogram_window}]" in expr, name


def test_overview_has_run_variable_alerts_and_sidecar_samples():
    d = dashboards()["grpo-overview.json"]
    assert [v["name"] for v in d["templating"]["list"]] == ["datasource", "sidecar", "run_id", "compare", "trl_key"]
    exprs = [e for _, e in dashboard_exprs(d)]
    assert 'ALERTS{alertstate="firing"}' in exprs
    assert any("histogram_quantile" in e and "phase" in e for e in exprs)
    urls = [t["url"] for p in all_panels(d) for t in p.get("targets", []) if t["datasource"]["uid"] == "${sidecar}"]
    assert "/api/runs/${run_id:percentencode}/samples" in urls
    # Several runs or "All": one samples table per selected run; the alerts take `a|b` and `.*`.
    assert _panel(d, "Samples of the latest step (sidecar)")["repeat"] == "run_id"
    params = _panel(d, "Alerts received by the sidecar")["targets"][0]["url_options"]["params"]
    assert {"key": "run_id", "value": "${run_id:pipe}"} in params
    # Runs compared by step, from the sidecar's exact step history (a scrape sees a sample of the steps).
    trend = _panel(d, "Step-exact history by step (sidecar)")
    assert trend["type"] == "trend" and trend["options"]["xField"] == "step" and trend["repeat"] == "run_id"
    assert trend["targets"][0]["url"] == "/api/runs/${run_id:percentencode}/steps"
    # The runs table: a page of the runs with data in the time range, not every run the sidecar holds.
    runs = _panel(d, "Runs (sidecar)")["targets"][0]
    assert runs["url"] == "/api/runs" and {p["key"]: p["value"] for p in runs["url_options"]["params"]} == {
        "since": "${__from}", "until": "${__to}", "limit": "100"}


def test_one_panel_overlays_the_selected_runs_by_step():
    """The step-aligned comparison: one panel (not repeated), x = the step, one series per selected run."""
    d = dashboards()["grpo-overview.json"]
    panel = _panel(d, "Runs compared by step: ${compare} (sidecar)")
    assert panel["type"] == "trend" and panel["options"]["xField"] == "step" and "repeat" not in panel
    target = panel["targets"][0]
    assert target["datasource"]["uid"] == "${sidecar}" and target["url"] == "/api/steps"
    params = {p["key"]: p["value"] for p in target["url_options"]["params"]}
    # Several runs as `a|b`, "All" as the variable's allValue `.*`: the sidecar reads both. Of thousands of
    # runs, the sidecar sends the 100 most recently updated with data in the dashboard's time range (Unix ms),
    # each downsampled to 1000 rows, and says what it left out (docs/operations.md).
    assert params == {"run_id": "${run_id:pipe}", "metrics": "${compare}", "since": "${__from}", "until": "${__to}",
                      "max_runs": "100", "points": "1000"}
    assert "100 most recently updated" in panel["description"]
    run_var = next(v for v in d["templating"]["list"] if v["name"] == "run_id")
    assert run_var["multi"] and run_var["includeAll"] and run_var["allValue"] == ".*"
    # The one table is split by its run_id column: a series per run, named by the run.
    assert panel["transformations"] == [{"id": "partitionByValues", "options": {
        "fields": ["run_id"], "keepFields": False, "naming": {"asLabels": True}}}]
    assert panel["fieldConfig"]["defaults"]["displayName"] == "${__field.labels.run_id}"
    compare = next(v for v in d["templating"]["list"] if v["name"] == "compare")
    assert compare["query"].split(",")[0] == "grpo.kl" and not compare["multi"]


def test_trls_logged_numbers_have_a_row_next_to_ours():
    """Issue 62: the number W&B shows for a TRL key is on the dashboard, and beside our exact one where they differ."""
    d = dashboards()["grpo-overview.json"]
    keys = {v["name"]: v for v in d["templating"]["list"]}["trl_key"]
    assert keys["multi"] and keys["includeAll"] and keys["allValue"] == ".*"
    assert keys["query"]["query"] == 'label_values(grpo_trl_logged{run_id=~"$run_id"}, metric)'
    (picked,) = _panel(d, "As logged by TRL: $trl_key")["targets"]
    logged = 'grpo_trl_logged{run_id=~"$run_id", metric=~"$trl_key"}'
    assert picked["expr"] == f"max by (run_id, metric) {current_copy(logged, ('metric',))}"
    clips = [t["expr"] for t in _panel(d, "Clip ratios: ours (exact) and as logged by TRL")["targets"]]
    ours = 'grpo_clip_ratio_high_max{run_id=~"$run_id"}'
    assert f"max by (run_id) {current_copy(ours)}" in clips
    logged = 'grpo_trl_logged{run_id=~"$run_id", metric="clip_ratio/high_max"}'
    assert f"max by (run_id) {current_copy(logged, ('metric',))}" in clips
    kl = [t["expr"] for t in _panel(d, "KL and entropy: ours (exact) and as logged by TRL")["targets"]]
    ours = 'grpo_trl_kl{run_id=~"$run_id"}'
    assert f"max by (run_id) {current_copy(ours)}" in kl
    logged = 'grpo_trl_logged{run_id=~"$run_id", metric="kl"}'
    assert f"max by (run_id) {current_copy(logged, ('metric',))}" in kl
    # drawn through the key picker, not again in a leftover panel of every key at once
    assert not [p["title"] for p in all_panels(d) if p.get("title", "").startswith("More as logged")]


def test_gauges_are_drawn_from_the_copy_each_run_last_vouched_for(promtool, tmp_path):
    """A relaunch under other target labels (here another service name), or a run that moved to another collector
    replica, leaves a copy of the run's last values that a collector serves until its metric_expiration: the
    panels draw the copy whose exporter vouched for it last (`grpo.process.alive_until`), per rank. Through
    promtool, on the generated expressions."""
    from otel_grpo import catalog
    from otel_grpo.generate._configs import dump
    from otel_grpo.generate._panels import signal_queries

    old = 'job="grpo-trainer", instance="r/rank0", run_id="r"'
    new = 'job="grpo-trainer-2", instance="r/rank0", run_id="r"'
    alive = "grpo_process_alive_until_seconds"
    series = [  # every 15 s; the first process dies after its 4th collection, the relaunch starts at the 5th
        ("grpo_kl", old, "9 9 9 9 9 9 9 9"), (alive, old, "100 110 120 130 130 130 130 130"),
        ("grpo_reward_fn_mean", old + ', reward_fn="fmt"', "1 1 1 1 1 1 1 1"),
        ("grpo_kl", new, "_ _ _ _ 0.1 0.2 0.3 0.4"), (alive, new, "_ _ _ _ 150 160 170 180"),
        ("grpo_reward_fn_mean", new + ', reward_fn="fmt"', "_ _ _ _ 0.5 0.5 0.5 0.5"),
    ]
    for rank in ("0", "1"):  # ranks exporting side by side are each their own copy
        labels = f'job="grpo-trainer", instance="s/rank{rank}", run_id="s", rank="{rank}"'
        series += [("grpo_kl", labels, f"{rank}.5x7"), (alive, labels, f"{100 + int(rank)}+10x7")]
    kl = signal_queries(catalog.get("kl"))[0].expr.replace("$run_id", "r|s")
    fn = signal_queries(catalog.get("reward_fn_mean"))[0].expr.replace("$run_id", "r|s")
    checks = [{"expr": f"{kl}", "eval_time": "90s", "exp_samples": [{"labels": '{run_id="r"}', "value": 0.3},
                                                                   {"labels": '{run_id="s"}', "value": 1.5}]},
              {"expr": fn, "eval_time": "90s",
               "exp_samples": [{"labels": '{run_id="r", reward_fn="fmt"}', "value": 0.5}]},
              # before the relaunch, the first process's copy
              {"expr": kl, "eval_time": "30s", "exp_samples": [{"labels": '{run_id="r"}', "value": 9},
                                                              {"labels": '{run_id="s"}', "value": 1.5}]}]
    test = {"interval": "15s", "input_series": [{"series": f"{n}{{{labels}}}", "values": v} for n, labels, v in series],
            "promql_expr_test": checks}
    (tmp_path / "t.yml").write_text(dump({"rule_files": [], "evaluation_interval": "15s", "tests": [test]}))
    out = subprocess.run([promtool, "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_gauge_panel_draws_a_healthy_run_from_its_real_series(promtool, tmp_path):
    """The freshest-copy match (`current_copy`) keeps a gauge only where the liveness series of its copy has the
    same labels but the gauge's own point attributes: every gauge panel draws a run that logged its signals, on the
    labels a real pull endpoint serves (the streaks' `signal` and `bound` included). Through promtool."""
    import re
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from otel_grpo import catalog
    from otel_grpo.generate._configs import dump
    from otel_grpo.telemetry import Telemetry, TelemetrySettings

    values = {s.key: 0.5 for s in catalog.SIGNALS
              if s.kind is catalog.Kind.GAUGE and s.label is None and s.key not in catalog.STATE_GAUGES}
    tel = Telemetry(TelemetrySettings(run_id="r", output_dir=tmp_path, metrics_exporters=["prometheus"],
                                      traces_exporters=["none"], prometheus_port=0, spill_samples=False))
    try:
        tel.log_metrics(1, {**values, "rewards/fmt/mean": 0.25})
        assert tel.flush(10)
        with urllib.request.urlopen(f"http://127.0.0.1:{tel.prometheus_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    finally:
        tel.shutdown()
    scraped = [s for family in text_string_to_metric_families(text) for s in family.samples
               if s.labels.get("run_id") == "r"]
    served = {s.name for s in scraped}
    series = [{"series": s.name + "{" + ", ".join(f'{k}="{v}"' for k, v in {**s.labels, "job": "grpo-trainer",
                                                                           "instance": "h:9"}.items()) + "}",
               "values": f"{s.value}+0x4"} for s in scraped]
    alive = catalog.get("alive").prometheus_name
    checks = []
    for _, expr in dashboard_exprs(dashboards()["grpo-overview.json"]):
        drawn = re.search(r"(grpo_\w+)\{", expr)
        if alive not in expr or drawn.group(1) not in served:  # not a gauge's current copy, or not logged here
            continue
        expr = expr.replace("$__rate_interval", "1m").replace("$run_id", "r")
        expr = re.sub(r"\$\w+", ".*", expr)
        checks.append({"expr": f"count by (run_id) ({expr}) > bool 0", "eval_time": "30s",
                       "exp_samples": [{"labels": '{run_id="r"}', "value": 1}]})
    assert len(checks) > 100 and any("grpo_step_streak" in c["expr"] for c in checks)
    test = {"interval": "15s", "input_series": series, "promql_expr_test": checks}
    (tmp_path / "t.yml").write_text(dump({"rule_files": [], "evaluation_interval": "15s", "tests": [test]}))
    out = subprocess.run([promtool, "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
