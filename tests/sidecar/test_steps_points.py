"""`points`: the step history downsampled for a chart (M4), on both stores, through the API."""

from __future__ import annotations

import pytest

PB = {"Content-Type": "application/x-protobuf"}
STEPS = 300
SPIKE, DIP, GAP = 137, 211, 50


def _metrics(step: int) -> dict:
    kl = 50.0 if step == SPIKE else (float("nan") if step == GAP else 0.01 + 0.0001 * (step % 7))
    return {"kl": kl, "reward": -3.0 if step == DIP else 0.5 + 0.001 * (step % 11)}


@pytest.fixture
def long_run(client, otlp):
    spans = otlp.spans("long", range(STEPS), samples=0, metrics=_metrics)
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    return client


def _get(client, path: str = "/api/runs/long/steps", **params):
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def _real(rows: list[dict], full: list[dict]) -> None:
    """Every row is a stored step with its stored values, in step order."""
    by_step = {r["step"]: r for r in full}
    assert all(r == by_step[r["step"]] for r in rows)
    assert [r["step"] for r in rows] == sorted({r["step"] for r in rows})


def test_a_single_step_spike_and_dip_survive_downsampling(long_run):
    full = _get(long_run, metrics="grpo.kl,grpo.reward.mean")
    assert len(full) == STEPS
    rows = _get(long_run, metrics="grpo.kl,grpo.reward.mean", points=12)
    assert len(rows) <= 12
    _real(rows, full)
    steps = [r["step"] for r in rows]
    assert SPIKE in steps and DIP in steps and steps[0] == 0 and steps[-1] == STEPS - 1
    assert max(r["grpo.kl"] for r in rows if r["grpo.kl"] is not None) == 50.0
    assert min(r["grpo.reward.mean"] for r in rows) == -3.0


def test_every_column_downsampled_keeps_the_spike(long_run):
    full = _get(long_run)
    rows = _get(long_run, points=200)
    assert len(rows) <= 200 < STEPS
    _real(rows, full)
    assert SPIKE in [r["step"] for r in rows] and DIP in [r["step"] for r in rows]


@pytest.mark.parametrize("metrics", ["grpo.kl,grpo.reward.mean,grpo.rollout_is.max", None], ids=["3 columns", "all"])
def test_points_bounds_the_rows_whatever_the_number_of_columns(long_run, metrics):
    """At most `points` rows for any number of columns, as documented: where one bucket's first, last,
    lowest and highest steps alone are more (2 + 2 x columns), the steps farthest from their column's
    median come first. And the budget is used: more points, more rows (columns sharing their
    extremes leave room for more buckets)."""
    chosen = {"metrics": metrics} if metrics else {}
    full = _get(long_run, **chosen)
    counts = []
    for points in (2, 3, 5, 12, 40, 100, STEPS - 1):
        rows = _get(long_run, points=points, **chosen)
        _real(rows, full)
        steps = [r["step"] for r in rows]
        assert len(rows) <= points and steps[0] == 0 and steps[-1] == STEPS - 1, (points, len(rows))
        if points >= (3 if metrics else 12):  # all columns: the phases' timings are noisy too
            assert SPIKE in steps, points
        counts.append(len(rows))
    assert counts == sorted(counts) and counts[-1] > STEPS // 2, counts


def test_a_step_range_downsampled_stays_in_it(long_run):
    full = _get(long_run, metrics="grpo.kl", step_min=100, step_max=180)
    rows = _get(long_run, metrics="grpo.kl", step_min=100, step_max=180, points=8)
    assert len(rows) <= 8
    _real(rows, full)
    assert rows[0]["step"] == 100 and rows[-1]["step"] == 180 and SPIKE in [r["step"] for r in rows]


def test_without_points_or_with_enough_every_step_comes_back(long_run):
    plain = long_run.get("/api/runs/long/steps", params={"metrics": "grpo.kl"})
    assert len(plain.json()) == STEPS
    assert long_run.get("/api/runs/long/steps", params={"metrics": "grpo.kl", "points": STEPS}).content == plain.content
    assert long_run.get("/api/runs/long/steps", params={"points": STEPS}).content == long_run.get("/api/runs/long/steps").content


def test_the_runs_table_downsamples_each_run(long_run):
    rows = _get(long_run, "/api/steps", run_id="long", metrics="grpo.kl", points=4)
    assert len(rows) <= 4 and SPIKE in [r["step"] for r in rows]


@pytest.mark.parametrize("path", ["/api/runs/long/steps", "/api/steps?run_id=long"])
@pytest.mark.parametrize("bad", ["0", "1", "10001", "-5", "many", ""])
def test_a_bad_points_is_a_422_naming_it(long_run, path, bad):
    response = long_run.get(path, params={"points": bad})
    assert response.status_code == 422
    assert "points" in response.text and response.json()["detail"][0]["msg"]


@pytest.mark.parametrize(("end", "text"), [(1795800000.2567, "2026-11-27T17:20:00.257Z"),  # rounds, not truncates
                                           (1795800059.9996, "2026-11-27T17:21:00.000Z"),  # into the next minute
                                           (1.0, "1970-01-01T00:00:01.000Z")])
def test_both_stores_write_a_step_time_alike(db, end, text):
    from otel_grpo.sidecar.otlp._extract import Batch, StepRecord
    from otel_grpo.sidecar.store import open_store

    store = open_store(db)
    try:
        batch = Batch()
        batch.runs["t"] = {}
        batch.steps.append(StepRecord("t", 0, b"\x01" * 8, end - 1, end, {"kl": 0.5}))
        store.write_batch(batch, end)
        assert [r["time"] for r in store.steps("t", ["kl"])] == [text]
        assert [r["time"] for r in store.steps("t")] == [text]
    finally:
        store.close()


def _sparse(step: int) -> dict:
    """KL non-finite at three steps (NaN, +inf, -inf), entropy logged every other step only."""
    kl = {7: float("nan"), 8: float("inf"), 9: float("-inf")}.get(step, 0.01 * step)
    return {"kl": kl, **({"entropy": 1.0 + step} if step % 2 == 0 else {})}


@pytest.mark.parametrize("path,params", [("/api/runs/sparse/steps", {}), ("/api/steps", {"run_id": "sparse"})],
                         ids=["one run", "runs"])
def test_a_row_tells_a_step_not_logged_from_a_non_finite_value(client, otlp, path, params):
    """The API's contract (docs/api.md): a column the step did not log is missing from its row, a value
    that was not finite is null; the same whether the request names columns or takes them all."""
    spans = otlp.spans("sparse", range(12), samples=0, metrics=_sparse)
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    named = _get(client, path, metrics="grpo.kl,grpo.policy.entropy", **params)
    assert [("grpo.policy.entropy" in r) for r in named] == [s % 2 == 0 for s in range(12)]
    assert [r["grpo.kl"] for r in named[7:10]] == [None, None, None]
    assert all(isinstance(r["grpo.kl"], float) for i, r in enumerate(named) if i not in (7, 8, 9))
    whole = _get(client, path, **params)
    assert [{k: r[k] for k in r if k in ("step", "grpo.kl", "grpo.policy.entropy")} for r in whole] == \
        [{k: r[k] for k in r if k != "run_id" and k != "time"} for r in named]
    # Downsampled, a non-finite step is kept as an extreme is: the chart draws its gap.
    few = _get(client, path, metrics="grpo.kl", points=4, **params)
    assert len(few) <= 4 and any(r["step"] in (7, 8, 9) and r["grpo.kl"] is None for r in few)
