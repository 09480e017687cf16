"""`/api/steps`: several runs' step history in one table (Grafana's step-aligned run comparison)."""

from __future__ import annotations

PB = {"Content-Type": "application/x-protobuf"}


def _load(client, otlp, run_id: str, steps) -> None:
    spans = otlp.spans(run_id, steps, samples=1)
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200


def test_selected_runs_come_in_one_table_run_after_run(client, otlp):
    _load(client, otlp, "run-a", range(3))
    _load(client, otlp, "run-b", range(2))
    _load(client, otlp, "a|b", range(1))  # a run id may hold `|`: the whole value counts too

    def rows(run_id: str, **params) -> list[tuple]:
        body = client.get("/api/steps", params={"run_id": run_id, "metrics": "grpo.kl", **params})
        assert body.status_code == 200, body.text
        return [(r["run_id"], r["step"], r["grpo.kl"]) for r in body.json()]

    both = [("run-a", 0, 0.0), ("run-a", 1, 0.01), ("run-a", 2, 0.02), ("run-b", 0, 0.0), ("run-b", 1, 0.01)]
    assert rows("run-a|run-b") == both
    assert rows("run-a|unknown|run-b") == both  # a selection leaves unknown runs out
    assert rows(".*") == [("a|b", 0, 0.0)] + both  # Grafana's "All"
    assert rows("a|b") == [("a|b", 0, 0.0)]
    assert rows("run-a|run-b", step_min=1, limit=1) == [("run-a", 1, 0.01), ("run-b", 1, 0.01)]
    assert rows("unknown") == []


def test_a_bad_range_is_a_400_naming_the_parameter(client):
    r = client.get("/api/steps", params={"run_id": ".*", "step_min": 5, "step_max": 1})
    assert r.status_code in (400, 422) and "step_min" in r.text
    assert client.get("/api/steps").status_code == 422  # run_id is required
