"""The read API, alerts webhook, ops endpoints and CORS through TestClient."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from otel_grpo import catalog

PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture
def loaded(client, otlp):
    spans = otlp.spans("run-a", range(4), samples=6, completion=lambda s, i: f"step {s} <b>answer</b> 50%_{i}")
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    return client


def test_steps_select_metrics_and_range(loaded):
    rows = loaded.get("/api/runs/run-a/steps",
                      params={"metrics": "grpo.kl,grpo.reward.mean", "step_min": 1, "step_max": 2}).json()
    assert rows == [
        {"run_id": "run-a", "step": 1, "time": rows[0]["time"], "grpo.kl": 0.01, "grpo.reward.mean": 1.5},
        {"run_id": "run-a", "step": 2, "time": rows[1]["time"], "grpo.kl": 0.02, "grpo.reward.mean": 2.5},
    ]
    assert rows[0]["time"].endswith("Z")
    # The Prometheus name and the catalog key select the same column, written under its one name; a
    # column the run never logged is in no row (as a step that did not log a column has no entry).
    for alias in ("grpo_kl", "kl"):
        repeated = loaded.get(f"/api/runs/run-a/steps?metrics={alias}&metrics=missing").json()
        assert repeated[0] == {"run_id": "run-a", "step": 0, "time": repeated[0]["time"], "grpo.kl": 0.0}


@pytest.mark.parametrize("metrics", ["grpo.kl,grpo.reward.mean", None])
def test_steps_fields_leave_out_what_a_chart_does_not_read(client, otlp, metrics):
    """`fields` names the row's own fields to write: a chart's `fields=step` rows are the full rows
    without `run_id` and `time`, selected columns or all, downsampled or not; the default is unchanged."""
    run = 'odd %s "run" %'  # written into a bytes format: its `%` and quotes must come out as they are
    spans = otlp.spans(run, range(12), samples=0, metrics=lambda s: {"kl": float("nan")} if s == 7 else
                       {"eval_accuracy": 0.5} if s == 3 else {})
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    base = {"metrics": metrics} if metrics else {}
    path = f"/api/runs/{run}/steps"
    for extra in ({}, {"points": 4}):
        full = client.get(path, params={**base, **extra}).json()
        assert full and all(r["run_id"] == run and r["time"].endswith("Z") for r in full)
        for fields, kept in (("step", {"step"}), ("step,time", {"step", "time"}), ("time,run_id", {"run_id", "time"}),
                             ("run_id,step,time", {"run_id", "step", "time"})):
            got = client.get(path, params={**base, **extra, "fields": fields}).json()
            assert got == [{k: v for k, v in r.items() if k in kept or k not in {"run_id", "step", "time"}}
                           for r in full], fields
    compact = client.get(path, params={**base, "fields": "step"}).json()
    assert compact[7]["grpo.kl"] is None and ("eval_accuracy" in compact[3]) == (metrics is None)
    if metrics:
        assert compact[3] == {"grpo.kl": 0.03, "grpo.reward.mean": 3.5, "step": 3}
    assert client.get(path, params={**base, "fields": ["step", "time"]}).json()[0].keys() >= {"step", "time"}
    bad = client.get(path, params={"fields": "step,rowid"})
    assert bad.status_code == 422 and "fields" in bad.text and "rowid" in bad.text
    assert client.get(path, params={"fields": ""}).json() == client.get(path).json()  # empty: the default


def test_steps_name_every_column_by_the_catalog(loaded):
    """One name per signal: the catalog's in every row, the Prometheus name beside it in /metrics."""
    response = loaded.get("/api/runs/run-a/steps", params={"step_min": 1, "step_max": 1})
    (row,) = response.json()
    assert row["grpo.kl"] == 0.01 and row["grpo.reward.mean"] == 1.5
    assert response.headers["link"] == '<metrics>; rel="describedby"'
    described = str(response.url.join("metrics"))  # a relative reference, resolved against the request's URL
    assert loaded.get(described).json() == loaded.get("/api/runs/run-a/metrics").json()
    assert "grpo.phase.duration/rollout" in row
    assert not {"kl", "reward"} & row.keys()
    columns = {c["name"]: c for c in loaded.get("/api/runs/run-a/metrics").json()}
    assert columns["grpo.kl"] == {"name": "grpo.kl", "prometheus": "grpo_kl", "key": "kl", "unit": "nat",
                                  "description": catalog.get("kl").description}
    assert columns["grpo.phase.duration/rollout"]["prometheus"] == 'grpo_phase_duration_seconds{phase="rollout"}'
    assert set(columns) == row.keys() - {"run_id", "step", "time"}
    by_template = loaded.get("/api/runs/run-a/steps",
                             params={"metrics": "grpo.phase.duration/rollout", "step_min": 1, "step_max": 1}).json()
    assert by_template[0]["grpo.phase.duration/rollout"] == row["grpo.phase.duration/rollout"]
    spec = loaded.get("/openapi.json").json()
    step_column = spec["components"]["schemas"]["StepColumn"]
    assert {"name", "prometheus", "key"} <= step_column["properties"].keys()
    assert "grpo_kl" in step_column["properties"]["prometheus"]["description"]


def test_metrics_lists_a_column_logged_only_early_in_a_long_run(client, otlp):
    """Every column the run ever logged, however long ago: an evaluation at step 50 of 300, a column
    the latest steps carry no longer, one that came only with the last export."""
    def early(step: int) -> dict:
        return {"eval_accuracy": 0.5} if step == 50 else {"learning_rate": 1e-6} if step < 100 else {}

    for first in range(0, 300, 100):
        spans = otlp.spans("long", range(first, first + 100), samples=0, metrics=early)
        assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    late = otlp.spans("long", range(300, 301), samples=0, metrics=lambda s: {"late_only": 2.0})
    assert client.post("/v1/traces", content=otlp.request(late).SerializeToString(), headers=PB).status_code == 200
    columns = [c["name"] for c in client.get("/api/runs/long/metrics").json()]
    assert {"eval_accuracy", "grpo.learning_rate", "late_only", "grpo.kl", "grpo.phase.duration/rollout"} <= set(columns)
    assert columns == sorted(columns) and len(columns) == len(set(columns))
    # The same set as the columns of every step's row, no more.
    rows = client.get("/api/runs/long/steps").json()
    assert set(columns) == {k for row in rows for k in row} - {"run_id", "step", "time"}
    rows = client.get("/api/runs/long/steps", params={"metrics": "eval_accuracy", "points": 100}).json()
    assert [(r["step"], r["eval_accuracy"]) for r in rows if "eval_accuracy" in r] == [(50, 0.5)]


def test_grafana_step_history_reads_catalog_names(loaded):
    """The committed dashboard's Infinity query of the step history, sent as Grafana sends it: its
    columns come back under the names it asks for (the legend Grafana draws), one per signal."""
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "grafana/dashboards/grpo-overview.json").read_text())
    panels = [p for row in dashboard["panels"] for p in [row, *row.get("panels", [])]]
    (target,) = next(p for p in panels if p["title"] == "Step-exact history by step (sidecar)")["targets"]
    params = {q["key"]: q["value"] for q in target["url_options"]["params"]}
    asked = params["metrics"].split(",")
    assert all(catalog.by_name(name) is not None for name in asked)
    rows = loaded.get(target["url"].replace("${run_id:percentencode}", "run-a"), params=params).json()
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    # Only the columns asked for, and those the run logged at the step: Infinity's backend parser makes
    # a field of every key any row has, null where a row lacks it (a column of no row: no field).
    assert all({"run_id", "step", "time", "grpo.kl", "grpo.reward.mean"} <= r.keys() <= {"run_id", "step", "time", *asked}
               for r in rows)
    assert [r["grpo.kl"] for r in rows] == [0.0, 0.01, 0.02, 0.03]


def test_samples_filters_and_ordering(loaded):
    get = lambda **p: loaded.get("/api/runs/run-a/samples", params=p).json()  # noqa: E731
    assert {s["step"] for s in get()} == {3}
    assert {s["step"] for s in get(step=1)} == {1}
    assert {s["step"] for s in get(step_min=1, step_max=2)} == {1, 2}
    assert [s["reward"] for s in get(step=0, reward_min=1.0, reward_max=2.0)] == [1.0, 1.5, 2.0]
    by_reward = get(step_min=0, order_by="reward", desc=True, limit=3)
    assert [s["reward"] for s in by_reward] == [2.5] * 3
    by_dynamic = get(step=0, order_by="completion_original_length", desc=True)
    assert [s["completion_original_length"] for s in by_dynamic] == [105, 104, 103, 102, 101, 100]
    by_text = get(step=0, order_by="completion")
    assert [s["sample_index"] for s in by_text] == [0, 1, 2, 3, 4, 5]
    assert [s["sample_index"] for s in get(step=2, q="50%_4")] == [4]  # % and _ are literal
    assert get(step=2, q="nothing like it") == []
    page = get(step_min=0, limit=5, offset=5)
    assert [(s["step"], s["sample_index"]) for s in page] == [(0, 5), (1, 0), (1, 1), (1, 2), (1, 3)]


def test_samples_filter_on_any_numeric_column_and_count_every_page(loaded, client, otlp):
    """`filter_col` bounds any numeric column, a dynamic one included, over every row the other filters
    select (not a page of them); `X-Total-Count` counts those rows on all pages."""
    get = lambda **p: loaded.get("/api/runs/run-a/samples", params=p)  # noqa: E731
    r = get(step=0, limit=2)
    assert len(r.json()) == 2 and r.headers["X-Total-Count"] == "6"
    r = get(step=0, filter_col="completion_original_length", filter_min=103, order_by="sample_index", desc=True, limit=2)
    assert [s["sample_index"] for s in r.json()] == [5, 4] and r.headers["X-Total-Count"] == "3"
    r = get(step_min=0, filter_col="sample_index", filter_min=2, filter_max=2)
    assert [(s["step"], s["sample_index"]) for s in r.json()] == [(0, 2), (1, 2), (2, 2), (3, 2)]
    assert r.headers["X-Total-Count"] == "4"
    assert [s["sample_index"] for s in get(step=1, filter_col="reward.format", filter_max=0).json()] == [0, 2, 4]
    # A string (or a missing key) is not a number: no bound lets it through, even in "b" > 1.
    mixed = otlp.spans("mixed", range(1), samples=3, extra=lambda s, i: {"score": ["b", 0.5, 2.0][i]})
    assert client.post("/v1/traces", content=otlp.request(mixed).SerializeToString(), headers=PB).status_code == 200
    by = lambda **p: [s["sample_index"] for s in loaded.get("/api/runs/mixed/samples", params=p).json()]  # noqa: E731
    assert by(filter_col="score", filter_min=1) == [2]
    assert by(filter_col="score") == [1, 2] and by(filter_col="nope") == []
    assert loaded.get("/api/runs/mixed/samples", params={"filter_col": "nope"}).headers["X-Total-Count"] == "0"


LONG_CHARS = 200_000  # a long-context run's completion (the telemetry's max_text_chars raised)


def test_a_page_of_long_texts_is_bounded_and_each_sample_reads_whole(client, otlp):
    """`text_chars` (what the run explorer asks for) bounds a page by its rows: 50 completions of 200,000
    characters came whole, now as each text's first characters with `texts_cut` giving the full length;
    one sample still reads whole, and a page without `text_chars` (Grafana, scripts) is as it was."""
    completion = lambda index: (f"sample {index} " + "y" * LONG_CHARS)[:LONG_CHARS]  # noqa: E731
    for first in range(0, 50, 10):
        spans = otlp.spans("long-ctx", range(1), samples=10, first_index=first,
                           completion=lambda s, i, first=first: completion(first + i))
        assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    path = "/api/runs/long-ctx/samples"
    page = client.get(path, params={"step": 0, "limit": 500, "text_chars": 2000})
    rows = page.json()
    assert len(rows) == 50 and page.headers["X-Total-Count"] == "50"
    assert len(page.content) < 50 * 3000, len(page.content)
    assert all(len(r["completion"]) == 2000 and r["texts_cut"] == {"completion": LONG_CHARS} for r in rows)
    assert all(r["completion"] == completion(r["sample_index"])[:2000] and len(r["prompt"]) < 2000 for r in rows)
    whole = client.get(path, params={"step": 0, "filter_col": "sample_index", "filter_min": 7, "filter_max": 7}).json()
    assert [r["completion"] for r in whole] == [completion(7)] and "texts_cut" not in whole[0]
    assert all(len(r["completion"]) == LONG_CHARS for r in client.get(path, params={"step": 0}).json())


def test_text_chars_cuts_the_texts_of_a_sample_and_never_its_envelope(client, otlp):
    """A short `text_chars` cut the row's `time` (`2026-12-06T22:47`, no longer a time) and would its run id
    and the telemetry's bookkeeping: only what the model read or wrote, and other text columns, are cut."""
    run = "a-run-whose-id-is-longer-than-16"
    envelope = {"selection": "anomaly-and-more-than-16", "kept_because": "kl 1.5 beyond its threshold 1.0"}
    spans = otlp.spans(run, [0], samples=1, extra=lambda step, i: {**envelope, "extracted_answer": "x" * 40})
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    (whole,) = client.get(f"/api/runs/{run}/samples").json()
    (cut,) = client.get(f"/api/runs/{run}/samples", params={"text_chars": 16}).json()
    assert cut["texts_cut"] == {"completion": len(whole["completion"]), "extracted_answer": 40}
    assert cut["completion"] == whole["completion"][:16] and cut["extracted_answer"] == "x" * 16
    assert {k: cut[k] for k in ("run_id", "time", *envelope)} == {k: whole[k] for k in ("run_id", "time", *envelope)}
    assert len(whole["time"]) > 16 and cut["prompt"] == whole["prompt"] == "prompt 0/0"


def test_csv_and_jsonl_exports(loaded):
    text = loaded.get("/api/runs/run-a/samples.csv", params={"step": 1}).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 6 and rows[0]["completion"] == "step 1 <b>answer</b> 50%_0"
    assert {"reward.format", "selection", "truncated"} <= rows[0].keys()
    lines = loaded.get("/api/runs/run-a/samples.jsonl", params={"step_min": 0}).text.splitlines()
    assert len(lines) == 24 and json.loads(lines[0])["step"] == 0


@pytest.mark.parametrize("params", [
    {"step": 2, "filter_col": "reward", "filter_max": 1.0},  # a core column, an upper bound
    {"step_min": 0, "filter_col": "completion_original_length", "filter_min": 103, "filter_max": 104,
     "order_by": "reward", "desc": True},  # a dynamic column, both bounds, every step, an order
    {"step_min": 0, "q": "<b>answer", "filter_col": "reward.format", "filter_min": 1},  # a search, filtered
])
def test_exports_are_the_rows_the_range_filter_keeps(loaded, params):
    """A download is the filtered table, not the whole step: CSV and JSONL hold exactly the rows (and the
    order) of the JSON rows for the same parameters: one parsing of the filters (the routes' shared query)."""
    base = "/api/runs/run-a/samples"
    rows = loaded.get(base, params={**params, "limit": 10_000}).json()
    unfiltered = loaded.get(base, params={k: v for k, v in params.items() if not k.startswith("filter_")})
    assert 0 < len(rows) < int(unfiltered.headers["X-Total-Count"])
    jsonl = [json.loads(line) for line in loaded.get(base + ".jsonl", params=params).text.splitlines()]
    assert jsonl == rows
    table = list(csv.DictReader(io.StringIO(loaded.get(base + ".csv", params=params).text)))
    assert [(int(r["step"]), int(r["sample_index"])) for r in table] == [(r["step"], r["sample_index"]) for r in rows]


@pytest.mark.parametrize("path", ["/api/runs/nope/steps", "/api/runs/nope/samples", "/api/runs/nope/samples.csv",
                                  "/api/runs/nope", "/api/runs/nope/metrics", "/api/runs/nope/sample-steps"])
def test_unknown_run_is_404_with_a_message(loaded, path):
    r = loaded.get(path)
    assert r.status_code == 404 and r.json() == {"detail": "run 'nope' not found"}


def test_the_dashboards_all_as_a_run_is_404_saying_to_pick_runs(loaded):
    """Grafana's "All" of the run variable is `.*`: a sidecar panel asking for that run says what to pick."""
    r = loaded.get("/api/runs/.%2A/samples")
    assert r.status_code == 404 and r.json() == {"detail": (
        "run '.*' not found: '.*' is the dashboard's \"All\"; pick one or several runs in its `run` variable (a "
        "table per run)")}


def test_an_alert_names_the_step_it_belongs_to(client):
    """The last step to end at or before the alert started, whatever rows a chart has at hand."""
    from otel_grpo.sidecar.otlp._extract import Batch, StepRecord

    base = 1_795_800_000.0  # 2026-11-27T17:20:00Z
    batch = Batch()
    batch.runs["r"] = {}
    for step in range(5, 10):  # step 5 ends at base + 5 s, ... step 9 at base + 9 s
        batch.steps.append(StepRecord("r", step, bytes([step]) * 8, base + step - 1, base + step, {"kl": 0.1}))
    client.app.state.store.write_batch(batch)
    starts = {"a": "2026-11-27T17:20:07Z", "b": "2026-11-27T17:20:07.999999999Z", "c": "2026-11-27T18:20:08.5+01:00",
              "d": "2026-11-27T17:19:00Z", "e": "2026-11-28T00:00:00Z", "f": "yesterday"}
    alerts = [{"status": "firing", "labels": {"alertname": name, "run_id": "r"}, "annotations": {},
               "startsAt": at, "fingerprint": name} for name, at in starts.items()]
    alerts.append({"status": "firing", "labels": {"alertname": "g", "run_id": "other"}, "annotations": {},
                   "startsAt": "2026-11-27T17:20:07Z", "fingerprint": "g"})
    alerts.append({"status": "firing", "labels": {"alertname": "h"}, "annotations": {},
                   "startsAt": "2026-11-27T17:20:07Z", "fingerprint": "h"})
    assert client.post("/api/alerts", json={"version": "4", "alerts": alerts}).status_code == 200
    steps = {r["alertname"]: r["step"] for r in client.get("/api/alerts").json()}
    # at step 7's end; just before step 8's; step 8's end (+01:00); before any (the first step);
    # after all; not a time; a run without steps; no run
    assert steps == {"a": 7, "b": 7, "c": 8, "d": 5, "e": 9, "f": None, "g": None, "h": None}


@pytest.mark.parametrize("offset", [-600.0, 600.0])  # the trainer's clock 10 min ahead of Prometheus's, behind
def test_an_alert_of_a_trainer_whose_clock_is_off_names_the_step_it_belongs_to(client, offset):
    """Steps end on the trainer's clock, an alert starts on Prometheus's: the rules' clock offset annotation
    (Prometheus's clock minus the trainer's) places it; without it (older rules), or empty (a run that exports
    no clock), the two clocks are taken to agree, as before."""
    from datetime import datetime, timezone

    from otel_grpo.sidecar.otlp._extract import Batch, StepRecord

    base = 1_795_800_000.0  # on the trainer's clock: step k ends at base + 60 k
    batch = Batch()
    batch.runs["r"] = {}
    for step in range(30):
        batch.steps.append(StepRecord("r", step, bytes([step + 1]) * 8, base + 60 * step - 50, base + 60 * step,
                                      {"kl": 0.1}))
    client.app.state.store.write_batch(batch)
    # On Prometheus's clock: 30 s after step 12 ended; step 20's end to the millisecond.
    starts = {"mid": base + 60 * 12 + 30 + offset, "at_end": base + 60 * 20 + offset}
    annotations = {"": {catalog.CLOCK_OFFSET_ANNOTATION: f"{offset:.3f}"}, "-old": {},
                   "-noclock": {catalog.CLOCK_OFFSET_ANNOTATION: ""}}
    alerts = [{"status": "firing", "labels": {"alertname": name + kind, "run_id": "r"}, "annotations": a,
               "startsAt": datetime.fromtimestamp(at, timezone.utc).isoformat().replace("+00:00", "Z"),
               "fingerprint": name + kind} for name, at in starts.items() for kind, a in annotations.items()]
    assert client.post("/api/alerts", json={"version": "4", "alerts": alerts}).status_code == 200
    steps = {r["alertname"]: r["step"] for r in client.get("/api/alerts").json()}
    assert steps["mid"] == 12 and steps["at_end"] == 20
    # Without the offset: 10 steps early (its first step where none had ended yet) or late, as before.
    early = offset < 0
    assert steps["mid-old"] == steps["mid-noclock"] == (2 if early else 22)
    assert steps["at_end-old"] == steps["at_end-noclock"] == (10 if early else 29)


def test_an_alert_whose_clock_offset_is_no_clock_offset_is_placed_as_if_the_clocks_agreed(client):
    """Anyone who can post alerts writes their annotations: an offset beyond any clock's (`1e306` overflowed the
    step's arithmetic) must not make every read of the alerts fail; the alert is placed as without one."""
    from otel_grpo.sidecar.otlp._extract import Batch, StepRecord
    from otel_grpo.sidecar.store._queries import MAX_CLOCK_OFFSET_S

    base = 1_795_800_000.0  # 2026-11-27T17:20:00Z; step k ends at base + k
    batch = Batch()
    batch.runs["r"] = {}
    for step in range(1, 4):
        batch.steps.append(StepRecord("r", step, bytes([step]) * 8, base + step - 1, base + step, {"kl": 0.1}))
    client.app.state.store.write_batch(batch)
    offsets = ["1e306", "-1e306", "inf", "nan", f"{MAX_CLOCK_OFFSET_S * 1.01:.3f}", "x", "1e-400"]
    alerts = [{"status": "firing", "labels": {"alertname": f"a{i}", "run_id": "r"},
               "annotations": {catalog.CLOCK_OFFSET_ANNOTATION: offset}, "startsAt": "2026-11-27T17:20:02.5Z",
               "fingerprint": f"fp{i}"} for i, offset in enumerate(offsets)]
    assert client.post("/api/alerts", json={"version": "4", "alerts": alerts}).status_code == 200
    for params in ({}, {"run_id": "r"}, {"status": "firing"}):
        r = client.get("/api/alerts", params=params)
        assert r.status_code == 200
        assert sorted((a["alertname"], a["step"]) for a in r.json()) == [(f"a{i}", 2) for i in range(len(offsets))]


@pytest.mark.parametrize("params,name", [
    ({"limit": 0}, "limit"), ({"limit": "x"}, "limit"), ({"step": "one"}, "step"),
    ({"step_min": 3, "step_max": 1}, "step_min"), ({"reward_min": 2, "reward_max": 1}, "reward_min"),
    ({"order_by": 'say "hi"'}, "order_by"), ({"reward_min": "nan"}, "reward_min"),
    ({"desc": "maybe"}, "desc"), ({"offset": -1}, "offset"),
    ({"filter_min": 1}, "filter_col"), ({"filter_col": "prompt", "filter_min": 1}, "filter_col"),
    ({"filter_col": "kl", "filter_min": 2, "filter_max": 1}, "filter_min"),
    ({"filter_col": "kl", "filter_max": "inf"}, "filter_max"), ({"text_chars": 15}, "text_chars"),
])
def test_bad_parameters_are_422_naming_the_parameter(loaded, params, name):
    r = loaded.get("/api/runs/run-a/samples", params=params)
    assert r.status_code == 422
    assert any(e["loc"][-1] == name for e in r.json()["detail"]), r.json()


def test_alertmanager_webhook_upserts_and_lists(client):
    alert = {"status": "firing", "labels": {"alertname": "GrpoKlDrift", "run_id": "run-a", "severity": "warning"},
             "annotations": {"summary": "KL 0.4 on run-a"}, "startsAt": "2026-11-22T05:00:00Z",
             "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prom/graph", "fingerprint": "abc123"}
    payload = {"version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0, "status": "firing", "receiver": "sidecar",
               "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am",
               "alerts": [alert]}
    assert client.post("/api/alerts", json=payload).json() == {"stored": 1}
    resolved = {**alert, "status": "resolved", "endsAt": "2026-11-22T05:10:00Z"}
    assert client.post("/api/alerts", json={**payload, "status": "resolved", "alerts": [resolved]}).status_code == 200
    rows = client.get("/api/alerts", params={"run_id": "run-a"}).json()
    assert len(rows) == 1 and rows[0]["status"] == "resolved" and rows[0]["alertname"] == "GrpoKlDrift"
    assert rows[0]["annotations"]["summary"] == "KL 0.4 on run-a"
    assert client.get("/api/alerts", params={"status": "firing"}).json() == []
    assert client.post("/api/alerts", json={**payload, "version": "3"}).status_code == 422
    assert client.get("/api/alerts", params={"status": "bogus"}).status_code == 422


def test_ops_endpoints_and_metrics(loaded):
    assert loaded.get("/healthz").json() == {"status": "ok"}
    assert loaded.get("/readyz").json() == {"status": "ready"}
    text = loaded.get("/metrics").text
    assert "otel_grpo_sidecar_spans_ingested_total 24.0" in text  # 4 steps x (step, 3 phases, samples, other)
    assert "otel_grpo_sidecar_sample_events_ingested_total 24.0" in text
    assert 'otel_grpo_sidecar_bytes_ingested_total{content_type="application/x-protobuf"}' in text
    assert 'otel_grpo_sidecar_request_duration_seconds_count{method="POST",route="/v1/traces",status="200"} 1.0' in text
    size = [line for line in text.splitlines() if line.startswith("otel_grpo_sidecar_store_size_bytes")]
    assert float(size[0].split()[1]) > 0

    run_id = loaded.get("/api/runs").json()[0]["run_id"]
    assert loaded.get(f"/api/runs/{run_id}/steps").status_code == 200  # a run's steps read are held, and counted
    lines = loaded.get("/metrics").text.splitlines()
    assert float(next(line for line in lines if line.startswith("otel_grpo_sidecar_step_cache_bytes")).split()[1]) > 0


def test_each_app_has_its_own_registry(make_client, tmp_path):
    from prometheus_client import REGISTRY

    a, b = make_client(), make_client(db=tmp_path / "other.db")  # same metric names, no clash
    assert a.app.state.registry is not b.app.state.registry
    assert REGISTRY.get_sample_value("otel_grpo_sidecar_spans_ingested_total") is None


def test_cors_only_when_configured(make_client):
    plain = make_client()
    assert "access-control-allow-origin" not in plain.get("/api/runs", headers={"Origin": "http://x"}).headers
    cors = make_client(cors_origins=["http://grafana:3000"])
    r = cors.get("/api/runs", headers={"Origin": "http://grafana:3000"})
    assert r.headers["access-control-allow-origin"] == "http://grafana:3000"


def test_panels_name_catalog_signals(client):
    panels = client.get("/api/panels").json()
    titles = [p["title"] for p in panels]
    assert "Phase durations" in titles and "Effective sample size" in titles
    for panel in panels:
        for series in panel["series"]:
            signal = catalog.get(series["key"])
            assert series["description"] == signal.description
            assert (series["name"], series["prometheus"]) == (signal.name, signal.prometheus_name)
            assert series.get("attribute") == signal.label


def test_openapi_documents_ingest_content_types(client):
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/v1/traces"]["post"]["requestBody"]["content"]
    assert {"application/x-protobuf", "application/json"} <= body.keys()
    assert "/api/runs/{run_id}/samples" in spec["paths"] and "/api/alerts" in spec["paths"]


def test_retention_settings_apply_when_the_app_starts(make_client, otlp, tmp_path):
    first = make_client(db=tmp_path / "keep.db")
    for run in ("old-run", "new-run"):
        body = otlp.request(otlp.spans(run, range(4), samples=2)).SerializeToString()
        assert first.post("/v1/traces", content=body, headers=PB).status_code == 200
    first.__exit__(None, None, None)  # shut down; the next app starts on the same file
    again = make_client(db=tmp_path / "keep.db", retention_max_runs=1, retention_max_steps=2)
    runs = again.get("/api/runs").json()
    assert [(r["run_id"], r["first_step"], r["sample_count"]) for r in runs] == [("new-run", 2, 4)]
    assert [s["step"] for s in again.get("/api/runs/new-run/steps").json()] == [2, 3]


def _webhook(alerts: list[dict], group: dict[str, str], truncated: int = 0) -> dict:
    return {"version": "4", "groupKey": "{}:{}", "truncatedAlerts": truncated, "status": alerts[0]["status"] if alerts else "resolved",
            "receiver": "sidecar", "groupLabels": group, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://am", "alerts": alerts}


def _am_alert(status: str, fingerprint: str, starts: str, alertname: str = "GRPOCompletionsClipped",
              run_id: str = "run-a") -> dict:
    return {"status": status, "labels": {"alertname": alertname, "run_id": run_id, "severity": "warning"},
            "annotations": {"summary": f"{alertname} {run_id}"}, "startsAt": starts,
            "endsAt": "2026-11-22T06:00:00Z" if status == "resolved" else "0001-01-01T00:00:00Z",
            "generatorURL": "http://prom/graph", "fingerprint": fingerprint}


def test_alerts_mirror_alertmanager_one_row_per_episode(client):
    """Issue 22: a firing alert sent again with another startsAt stays one episode, which its resolution
    closes; a group's alert Alertmanager no longer lists is resolved; a new firing is a new episode."""
    group = {"alertname": "GRPOCompletionsClipped", "run_id": "run-a"}
    post = lambda alerts, **kw: client.post("/api/alerts", json=_webhook(alerts, **kw))  # noqa: E731
    assert post([_am_alert("firing", "fp1", "2026-11-22T05:00:00Z")], group=group).status_code == 200
    assert post([_am_alert("firing", "fp1", "2026-11-22T05:02:00Z")], group=group).status_code == 200
    assert post([_am_alert("resolved", "fp1", "2026-11-22T05:02:00Z")], group=group).status_code == 200
    rows = client.get("/api/alerts", params={"run_id": "run-a"}).json()
    assert [(r["status"], r["starts_at"], r["ends_at"]) for r in rows] == [
        ("resolved", "2026-11-22T05:00:00Z", "2026-11-22T06:00:00Z")]
    # The next episode; then a notification of the group without it (Alertmanager dropped it).
    post([_am_alert("firing", "fp1", "2026-11-22T07:00:00Z"), _am_alert("firing", "fp2", "2026-11-22T07:00:00Z")],
         group=group)
    post([_am_alert("firing", "fp9", "2026-11-22T07:00:00Z", run_id="run-b")], group={**group, "run_id": "run-b"})
    assert {r["fingerprint"] for r in client.get("/api/alerts", params={"status": "firing"}).json()} == {"fp1", "fp2", "fp9"}
    post([_am_alert("firing", "fp2", "2026-11-22T07:00:00Z")], group=group, truncated=1)  # truncated: closes nothing
    assert len(client.get("/api/alerts", params={"status": "firing"}).json()) == 3
    post([_am_alert("firing", "fp2", "2026-11-22T07:00:00Z")], group=group)
    firing = client.get("/api/alerts", params={"status": "firing"}).json()
    assert {r["fingerprint"] for r in firing} == {"fp2", "fp9"}  # fp1 gone from its group; run-b's untouched
    episodes = [r for r in client.get("/api/alerts").json() if r["fingerprint"] == "fp1"]
    assert sorted((r["starts_at"], r["status"]) for r in episodes) == [
        ("2026-11-22T05:00:00Z", "resolved"), ("2026-11-22T07:00:00Z", "resolved")]


def test_a_nul_in_an_alert_reads_as_the_replacement_character_on_both_backends(client):
    """As OTLP ingest does (`sidecar._nul`), the webhook stores each NUL of an alert as U+FFFD: PostgreSQL kept one
    in the labels' JSON as `\\u0000` and wrote U+FFFD in its plain columns, SQLite kept it, so the backends listed
    the alert differently, and PostgreSQL resolved it as soon as it fired (its stored fingerprint was not the one
    the notification listed)."""
    alert = _am_alert("firing", "fp\x001", "2026-11-22T05:00:00Z", alertname="Kl\x00Drift", run_id="run\x00a")
    alert["labels"]["team\x00"] = "rl\x00"
    alert["annotations"] = {"summary\x00": "KL\x00 high"}
    alert["generatorURL"] = "http://prom/graph?g0.expr=\x00"
    group = {"alertname": "Kl\x00Drift"}
    assert client.post("/api/alerts", json=_webhook([alert], group=group)).json() == {"stored": 1}
    (row,) = client.get("/api/alerts").json()
    assert {k: row[k] for k in ("fingerprint", "status", "alertname", "run_id", "labels", "annotations",
                                "generator_url")} == {
        "fingerprint": "fp\ufffd1", "status": "firing", "alertname": "Kl\ufffdDrift", "run_id": "run\ufffda",
        "labels": {"alertname": "Kl\ufffdDrift", "run_id": "run\ufffda", "severity": "warning", "team\ufffd": "rl\ufffd"},
        "annotations": {"summary\ufffd": "KL\ufffd high"}, "generator_url": "http://prom/graph?g0.expr=\ufffd"}
    assert client.get("/api/alerts", params={"run_id": "run\ufffda"}).json() == [row]
    # The group's labels are matched as the alert's are: a notification of it no longer listing the alert resolves it.
    other = _am_alert("firing", "fp2", "2026-11-22T05:00:00Z", alertname="Kl\x00Drift")
    assert client.post("/api/alerts", json=_webhook([other], group=group)).status_code == 200
    assert {r["fingerprint"]: r["status"] for r in client.get("/api/alerts").json()} == {
        "fp\ufffd1": "resolved", "fp2": "firing"}


def test_alerts_of_several_runs_and_of_all_runs(client):
    """The dashboards' run selection: `a|b` (Grafana's pipe format) and `.*` ("All")."""
    alerts = [_am_alert("firing", f"fp-{r}", "2026-11-22T05:00:00Z", run_id=r) for r in ("run-a", "run-b", "run-c")]
    assert client.post("/api/alerts", json=_webhook(alerts, group={})).status_code == 200
    runs = lambda q: sorted(r["run_id"] for r in client.get("/api/alerts", params={"run_id": q}).json())  # noqa: E731
    assert runs("run-a|run-c") == ["run-a", "run-c"]
    assert runs(".*") == ["run-a", "run-b", "run-c"]
    assert runs("run-b") == ["run-b"] and runs("nope") == []


def test_a_runs_alerts_are_those_labelled_with_its_exact_id(client, otlp):
    """The run page asks `/api/runs/{run_id}/alerts`: `/api/alerts?run_id=` reads `a|b` as Grafana's multi-run
    selection, so the page of run `exp|lr=1e-5` showed run `exp`'s alerts (and `lr=1e-5`'s) as its own."""
    from urllib.parse import quote

    runs = ("exp|lr=1e-5", "exp", "team/exp")
    spans = [s for run in runs for s in otlp.spans(run, [0], samples=1)]
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    alerts = [_am_alert("firing", f"fp-{r}", "2026-11-22T05:00:00Z", run_id=r) for r in (*runs, "lr=1e-5")]
    alerts.append(_am_alert("resolved", "fp-old", "2026-11-22T04:00:00Z", run_id="exp|lr=1e-5"))
    assert client.post("/api/alerts", json=_webhook(alerts, group={})).status_code == 200

    def of(run: str, **params) -> list[tuple[str, str]]:
        r = client.get(f"/api/runs/{quote(run, safe='')}/alerts", params=params)
        assert r.status_code == 200, r.text
        return [(a["run_id"], a["fingerprint"]) for a in r.json()]
    assert of("exp|lr=1e-5") == [("exp|lr=1e-5", "fp-exp|lr=1e-5"), ("exp|lr=1e-5", "fp-old")]  # newest first
    assert of("exp|lr=1e-5", status="resolved") == [("exp|lr=1e-5", "fp-old")]
    assert of("exp|lr=1e-5", limit=1) == [("exp|lr=1e-5", "fp-exp|lr=1e-5")]
    assert of("exp") == [("exp", "fp-exp")] and of("team/exp") == [("team/exp", "fp-team/exp")]
    assert client.get("/api/runs/exp/alerts").json() == client.get("/api/alerts", params={"run_id": "exp"}).json()
    r = client.get("/api/runs/lr=1e-5/alerts")  # alerts, but no run of that id: as the run's other routes
    assert r.status_code == 404 and r.json() == {"detail": "run 'lr=1e-5' not found"}
    assert client.get("/api/runs/exp/alerts", params={"limit": 0}).status_code == 422
