"""`/api/runs` page by page (filters, a stable order, cursors) and `/api/runs/{id}` by its key, on both
backends; the SQLite plans that keep a page's cost its own rows."""

from __future__ import annotations

import base64
import json
import re
import time
from datetime import datetime, timezone

import pytest

from otel_grpo.sidecar.otlp._extract import Batch, StepRecord
from otel_grpo.sidecar.store import open_store
from otel_grpo.sidecar.store._runs import RunQuery

NOW = time.time()


def _write(store, run_id: str, at: float, steps=(0,)) -> None:
    batch = Batch()
    batch.runs[run_id] = {"grpo.model": "tiny"}
    for step in steps:
        batch.steps.append(StepRecord(run_id, step, f"{run_id}/{step}".encode()[:8].ljust(8, b"-"), at, at, {"kl": 0.1}))
    store.write_batch(batch, now=at)


def _next(response) -> str | None:
    """The relative URL of the `Link: rel="next"` header, or None."""
    m = re.fullmatch(r'<(\?[^>]*)>; rel="next"', response.headers.get("link", ""))
    return m[1] if m else None


def _walk(client, first: str) -> tuple[list[str], list[int]]:
    """Every page from `first` on, by their next links: the run ids in order, each page's total."""
    ids, totals, url = [], [], first
    while url is not None:
        r = client.get(url)
        assert r.status_code == 200, r.text
        ids += [row["run_id"] for row in r.json()]
        totals.append(int(r.headers["x-total-count"]))
        url = _next(r)
        if url is not None:
            url = "/api/runs" + url
    return ids, totals


@pytest.fixture
def many(client):
    """25 runs: `run-00` updated first (oldest), `run-24` last; 5 of them (`x_*`) with an underscore."""
    store = client.app.state.store
    for i in range(25):
        name = f"x_{i:02d}" if i % 5 == 0 else f"run-{i:02d}"
        _write(store, name, NOW - 10_000 + i * 100)  # 100 s apart, the newest 7,600 s ago
    return client


def test_pages_walk_every_run_once_in_a_stable_order(many):
    ids, totals = _walk(many, "/api/runs?limit=7")
    newest_first = [r["run_id"] for r in many.get("/api/runs", params={"limit": 1000}).json()]
    assert ids == newest_first and len(ids) == 25 and len(set(ids)) == 25
    assert totals == [25] * 4  # pages of 7, 7, 7, 4: the total on each
    assert ids[0] == "run-24" and ids[-1] == "x_00"
    by_id, _ = _walk(many, "/api/runs?limit=10&order=run_id")
    assert by_id == sorted(newest_first)
    # The first page without parameters: the 100 most recently updated, as before paging.
    assert [r["run_id"] for r in many.get("/api/runs").json()] == newest_first
    assert _next(many.get("/api/runs")) is None
    # Offsets page too (a page number's start); the next link then carries a cursor instead.
    page = many.get("/api/runs", params={"limit": 5, "offset": 20})
    assert [r["run_id"] for r in page.json()] == newest_first[20:] and _next(page) is None
    page = many.get("/api/runs", params={"limit": 5, "offset": 5})
    assert [r["run_id"] for r in page.json()] == newest_first[5:10]
    assert "offset" not in _next(page) and [r["run_id"] for r in many.get("/api/runs" + _next(page)).json()] == newest_first[10:15]


def test_a_run_updated_while_paging_is_neither_repeated_nor_lost_by_id_order(many):
    first = many.get("/api/runs", params={"limit": 10, "order": "run_id"})
    _write(many.app.state.store, "run-02", NOW)  # data arrives meanwhile: by last update it would jump pages
    rest, _ = _walk(many, "/api/runs" + _next(first))
    ids = [r["run_id"] for r in first.json()] + rest
    assert ids == sorted(ids) and len(ids) == 25 == len(set(ids))


def test_filters_by_name_status_and_time(many):
    store = many.app.state.store
    _write(store, "Live-Run", time.time() - 5)  # "active" is judged against the clock at the request
    alert = {"status": "firing", "labels": {"alertname": "GRPOKLHigh", "run_id": "run-03"}, "annotations": {},
             "startsAt": "2026-11-22T05:00:00Z", "fingerprint": "f1"}
    assert many.post("/api/alerts", json={"version": "4", "alerts": [alert]}).status_code == 200

    def ids(**params) -> list[str]:
        r = many.get("/api/runs", params={"limit": 1000, **params})
        assert r.status_code == 200, r.text
        assert int(r.headers["x-total-count"]) == len(r.json())
        return [row["run_id"] for row in r.json()]

    assert ids(q="_") == ["x_20", "x_15", "x_10", "x_05", "x_00"]  # LIKE's wildcards are taken literally
    assert ids(q="LIVE") == ["Live-Run"] and ids(q="run-2") == ["run-24", "run-23", "run-22", "run-21"]
    assert ids(q="%") == [] and ids(q="nothing") == []
    assert ids(status="firing") == ["run-03"]
    assert ids(status="active") == ["Live-Run"]  # data within run_active_s (600 s)
    assert len(ids(status="idle")) == 24 and "run-03" not in ids(status="idle")
    assert ids(status="firing,active") == ["Live-Run", "run-03"] == ids(status=["active", "firing"])
    assert len(ids(status="firing,active,idle")) == 26
    assert ids(status="active", q="run") == ["Live-Run"]
    rows = {r["run_id"]: r for r in many.get("/api/runs", params={"limit": 1000}).json()}
    assert (rows["run-03"]["status"], rows["Live-Run"]["status"], rows["run-04"]["status"]) == ("firing", "active", "idle")
    # A time range: runs with data in it (last update at or after `since`, first seen at or before `until`).
    def at(i: int, shift: float = 0) -> str:  # ISO 8601 of run i's time, shifted by seconds
        return datetime.fromtimestamp(NOW - 10_000 + i * 100 + shift, timezone.utc).isoformat()

    assert ids(since=at(11, -1), until=at(12, 1)) == ["run-12", "run-11"]
    assert ids(since=at(11, 1), until=at(13, -1).replace("+00:00", "")) == ["run-12"]  # no zone: UTC
    ms = int((NOW - 10_000 + 2_050) * 1000)  # Unix milliseconds, as Grafana's ${__from}
    assert ids(since=str(ms), q="run-2") == ["run-24", "run-23", "run-22", "run-21"]
    assert ids(until=str(int(NOW - 10_000 + 150))) == ["run-01", "x_00"]  # Unix seconds
    # A cursor keeps the filters it was given with.
    walked, totals = _walk(many, "/api/runs?limit=2&status=idle&q=run-1")
    assert walked == ["run-19", "run-18", "run-17", "run-16", "run-14", "run-13", "run-12", "run-11"]
    assert set(totals) == {8}


BAD = [
    ({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"offset": -1}, "offset"),
    ({"status": "running"}, "status"), ({"order": "sample_count"}, "order"),
    ({"since": "yesterday"}, "since"), ({"since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z"}, "since"),
    ({"cursor": "not-a-cursor"}, "cursor"), ({"q": "a\x00b"}, "q"), ({"q": "x" * 129}, "q"),
]


def test_bad_parameters_are_422_naming_the_parameter(many):
    for params, name in BAD:
        r = many.get("/api/runs", params=params)
        assert r.status_code == 422, (params, r.text)
        assert any(e["loc"][-1] == name and e["msg"] for e in r.json()["detail"]), (params, r.json())


def test_a_cursor_belongs_to_its_order_and_excludes_an_offset(many):
    cursor = _next(many.get("/api/runs", params={"limit": 3})).rsplit("cursor=", 1)[1]
    r = many.get("/api/runs", params={"order": "run_id", "cursor": cursor})
    assert r.status_code == 422 and "order=run_id" in r.text
    r = many.get("/api/runs", params={"cursor": cursor, "offset": 3})
    assert r.status_code == 422 and "either offset or cursor" in r.text


def test_one_run_by_its_key_is_the_row_the_list_gives(many):
    listed = {r["run_id"]: r for r in many.get("/api/runs", params={"limit": 1000}).json()}
    for run_id in ("run-07", "x_15"):
        assert many.get(f"/api/runs/{run_id}").json() == listed[run_id]
    assert set(listed["run-07"]) == {"run_id", "service_name", "model", "host", "first_step", "last_step", "first_seen",
                                    "last_update", "sample_count", "status", "latest_reward", "latest_kl"}
    assert many.get("/api/runs/run-99").status_code == 404


def test_the_store_pages_alike_on_both_backends(db):
    store = open_store(db)
    try:
        for i in range(12):
            _write(store, f"r{i:02d}", 1000.0 + (i // 2))  # pairs share a last update: ties by run id
        page = store.run_page(RunQuery(limit=5, now=2000.0))
        assert [r["run_id"] for r in page.runs] == ["r11", "r10", "r09", "r08", "r07"] and page.total == 12
        page = store.run_page(RunQuery(limit=5, cursor=page.next_cursor, now=2000.0))
        assert [r["run_id"] for r in page.runs] == ["r06", "r05", "r04", "r03", "r02"]
        page = store.run_page(RunQuery(limit=5, cursor=page.next_cursor))
        assert [r["run_id"] for r in page.runs] == ["r01", "r00"] and page.next_cursor is None
        assert [r["run_id"] for r in store.runs(RunQuery(ids=["r03", "zz", "r07"]))] == ["r07", "r03"]
        assert store.run("r03", now=1001.0 + 600)["status"] == "active"
        assert store.run("r03", now=1001.0 + 601)["status"] == "idle"
        assert store.run("zz") is None
    finally:
        store.close()


def test_each_run_says_its_latest_reward_and_kl_on_both_backends(db):
    """The runs list's summary: the reward mean and KL at the latest step that logged each. A step that logs
    neither (an evaluation, or a statistic absent that step) leaves the previous one; TRL's logged `kl`
    (`trl_kl`) stands in for ours; a non-finite value is null, as in the steps API."""
    store = open_store(db)

    def write(run_id: str, step: int, scalars: dict) -> None:
        batch = Batch()
        batch.runs[run_id] = {"grpo.model": "tiny"}
        batch.steps.append(StepRecord(run_id, step, f"{run_id}{step}".encode()[:8].ljust(8, b"-"), 1000.0 + step,
                                      1000.0 + step, scalars))
        store.write_batch(batch, now=1000.0 + step)

    try:
        write("ours", 0, {"reward": 0.1, "kl": 0.01})
        write("ours", 1, {"reward": 0.5, "kl": 0.02})
        write("ours", 2, {"loss": 1.0})  # neither logged at the latest step
        write("trl", 0, {"reward": 0.25, "trl_kl": 0.003})
        write("bad", 0, {"reward": float("nan"), "kl": float("inf")})
        write("none", 0, {"loss": 1.0})
        for step in range(12):  # the last 8 steps are 4-11: a reward at step 3 is too far back, a KL at 4 is not
            write("long", step, {"reward": 3.0} if step == 3 else {"kl": 4.0} if step == 4 else {"loss": 1.0})
        write("warm", -2, {"reward": 0.25, "kl": 0.5})  # the sidecar takes any int64 step: below 0 too
        write("warm", 0, {"loss": 1.0})
        listed = {r["run_id"]: (r["latest_reward"], r["latest_kl"]) for r in store.runs(RunQuery(latest=True))}
        assert listed == {"ours": (0.5, 0.02), "trl": (0.25, 0.003), "bad": (None, None), "none": (None, None),
                          "long": (None, 4.0), "warm": (0.25, 0.5)}
        page = store.runs(RunQuery(latest=True, limit=2))  # the most recently updated two
        assert {r["run_id"]: r["latest_kl"] for r in page} == {"long": 4.0, "ours": 0.02}
        assert (store.run("ours")["latest_reward"], store.run("ours")["latest_kl"]) == (0.5, 0.02)
        assert "latest_reward" not in store.runs()[0]  # the steps API's selection of runs reads no summary
    finally:
        store.close()


def test_sqlite_pages_walk_the_index_and_never_sort_every_run(tmp_path):
    store = open_store(tmp_path / "s.db")
    try:
        _write(store, "a", 1.0)
        with store.read() as conn:
            for where in ("", " WHERE (last_update, run_id) < (?, ?)", " WHERE last_update >= ?"):
                params = {0: (), 2: (5.0, "a"), 1: (1.0,)}[where.count("?")]
                plan = " ".join(r[-1] for r in conn.execute(
                    "EXPLAIN QUERY PLAN SELECT run_id FROM runs" + where + " ORDER BY last_update DESC, run_id DESC "
                    "LIMIT 10", params))
                assert "runs_last_update" in plan and "TEMP B-TREE" not in plan, plan
    finally:
        store.close()


def _cursor(key: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


# Cursors that are well-formed JSON of the right types but no key a listing gave: an integer beyond
# a 64-bit column (SQLite raised OverflowError binding it), a float beyond any (JSON's 1e999 is
# inf), a lone surrogate (no UTF-8 for it: UnicodeEncodeError on both backends). Each was a bare 500.
FORGED = [["last_update", 10**30, "x"], ["last_update", -10**19, "x"], ["last_update", 1e999, "x"],
          ["last_update", 1, "\ud800"], ["run_id", "a\udfffb"]]


@pytest.mark.parametrize("path, extra", [("/api/runs", {}), ("/api/steps", {"run_id": ".*"})])
def test_a_forged_cursor_is_422_not_500(many, path, extra):
    for key in FORGED:
        params = {**extra, "cursor": _cursor(key), **({"order": "run_id"} if key[0] == "run_id" else {})}
        r = many.get(path, params=params)
        assert r.status_code == 422, (key, r.status_code, r.text)
        assert any(e["loc"][-1] == "cursor" for e in r.json()["detail"]), (key, r.json())
