"""`order_by` on a dynamic column whose values are of mixed kinds: one documented order (`_dialect.MIXED_ORDER`) that
SQLite and PostgreSQL give alike, whatever the PostgreSQL database's collation, and that pages walk without a
repeat or a gap. Each test runs on SQLite, a PostgreSQL database of byte-order text (C.UTF-8, as the other tests
make), and one whose default collation is ICU's root locale (as an en_US database's: `a` < `Z` < `é`)."""

from __future__ import annotations

import itertools
import math
import random

import orjson
import psycopg
import pytest

from otel_grpo.sidecar import SidecarSettings, create_app

PB = {"Content-Type": "application/x-protobuf"}
ABSENT = object()
"""A sample without the column at all (no key in its data)."""
_ICU_DATABASES = itertools.count(1)


@pytest.fixture(params=["sqlite", "postgresql", "postgresql-icu"])
def db(request, tmp_path):
    """This module's stores (the conftest's `db` and one more): an SQLite file, a new PostgreSQL database, a new
    PostgreSQL database that collates text by ICU's root locale."""
    if request.param == "sqlite":
        return tmp_path / "sidecar.db"
    if request.param == "postgresql":
        return request.getfixturevalue("pg_url")
    server = request.getfixturevalue("pg_server")
    name = f"icu_{next(_ICU_DATABASES)}"
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'und' "
                     "LOCALE 'C.UTF-8'")
    return server.url(name)


def documented_key(value) -> tuple:
    """The order the route documents, written out independently of the SQL: booleans (false first), numbers by value
    as 64-bit floats, strings by code point, then arrays and objects by their JSON text; None for a null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return (0, float(value), "")
    if isinstance(value, (int, float)):
        return (1, float(value), "")
    if isinstance(value, str):
        return (2, 0.0, value)
    return (3, 0.0, orjson.dumps(value).decode())


def expected_order(values: list, desc: bool) -> list[int]:
    """The sample indices of `values` (index i holds values[i]) in the documented order: nulls and missing keys last
    both ways, ties by arrival (the row id: ascending, or descending with `desc`)."""
    stored = [None if v is ABSENT or (isinstance(v, float) and math.isnan(v)) else v for v in values]
    valued = sorted((i for i, v in enumerate(stored) if v is not None), key=lambda i: (documented_key(stored[i]), i),
                    reverse=desc)
    return valued + sorted((i for i, v in enumerate(stored) if v is None), reverse=desc)


def _load(client, otlp, values: list) -> None:
    spans = otlp.spans("mix", [0], samples=len(values),
                       extra=lambda step, i: {} if values[i] is ABSENT else {"judge": values[i]})
    r = client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB)
    assert r.status_code == 200 and "rejected" not in r.text, r.text


def _order(client, desc: bool, limit: int = 10_000, offset: int = 0) -> list[int]:
    params = {"order_by": "judge", "desc": desc, "limit": limit, "offset": offset}
    r = client.get("/api/runs/mix/samples", params=params)
    assert r.status_code == 200, r.text
    return [row["sample_index"] for row in r.json()]


MIXED = [
    3, "10", True, float("nan"), -7.25, "9", ABSENT, 1e300, "abc", False, 2**62 + 1, "Z", -1e300, ["b", "a"], "é",
    3.0, ABSENT, 0, "", [1, 2], float(2**62), "-1", -0.0, True, float("nan"), "a", 10, 0.1, ["a"],
]
"""Ints, floats (negative, huge, equal to an int: 3 and 3.0, 0 and -0.0, 2**62 + 1 and the float it rounds to),
strings that read as numbers, case and accents, booleans, nulls (NaN arrives as null), missing keys, arrays."""


@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
def test_a_mixed_column_sorts_in_the_documented_order(client, otlp, desc):
    _load(client, otlp, MIXED)
    got = _order(client, desc)
    assert got == expected_order(MIXED, desc)
    if not desc:  # spelled out once, as the route's description says it
        rows = {r["sample_index"]: r.get("judge", "<absent>") for r in
                client.get("/api/runs/mix/samples", params={"limit": 100}).json()}
        assert [rows[i] for i in got] == [
            False, True, True, -1e300, -7.25, 0, -0.0, 0.1, 3, 3.0, 10, 2**62 + 1, float(2**62), 1e300,
            "", "-1", "10", "9", "Z", "a", "abc", "é", ["a"], ["b", "a"], [1, 2],
            None, "<absent>", "<absent>", None]


@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
def test_pages_walk_the_order_without_repeats_or_gaps(client, otlp, desc):
    _load(client, otlp, MIXED)
    whole = _order(client, desc)
    for limit in (1, 4, 7):
        pages = [_order(client, desc, limit, offset) for offset in range(0, len(MIXED) + limit, limit)]
        assert all(len(p) == limit for p in pages[:len(MIXED) // limit])
        assert list(itertools.chain.from_iterable(pages)) == whole


def _random_value(rng: random.Random):
    def text() -> str:
        return "".join(rng.choice("aAzZé0129 -.\u00e0\u4e2d\U0001f600") for _ in range(rng.randint(0, 4)))

    return rng.choice([
        lambda: rng.randint(-10, 10), lambda: rng.randint(-2**63, 2**63 - 1), lambda: rng.uniform(-10, 10),
        lambda: rng.choice([0.5, -0.5, 1e-300, -1e-300, 1e308, 2.0**53, 2.0**53 + 2]),
        lambda: rng.randint(0, 2**53 + 3), text, lambda: str(rng.randint(-20, 20)), lambda: rng.random() < 0.5,
        lambda: float("nan"), lambda: ABSENT, lambda: [text() for _ in range(rng.randint(1, 3))],
        lambda: [rng.randint(-9, 99) for _ in range(rng.randint(1, 3))],
        lambda: [rng.random() < 0.5] * rng.randint(1, 2), lambda: [round(rng.uniform(-5, 5), 3) for _ in range(2)],
    ])()


def test_random_mixed_values_sort_as_documented(client, otlp):
    """Many values of every kind, ties included: the order is the documented one both ways."""
    values = [_random_value(random.Random(seed)) for seed in range(128)]  # one span: 128 events at most (the SDK)
    _load(client, otlp, values)
    for desc in (False, True):
        assert _order(client, desc) == expected_order(values, desc)


def test_route_documents_the_order(tmp_path):
    app = create_app(SidecarSettings(db=tmp_path / "s.db"))
    described = app.openapi()["paths"]["/api/runs/{run_id}/samples"]["get"]["parameters"]
    order_by = next(p for p in described if p["name"] == "order_by")["description"]
    assert "booleans" in order_by and "numbers" in order_by and "last" in order_by


@pytest.mark.parametrize("column", ["completion", "prompt"])
def test_core_text_columns_sort_by_code_point_too(client, otlp, column):
    words = ["b", "Z", "é", "a", "B", "", "ab"]
    text = lambda step, i: words[i]  # noqa: E731
    spans = otlp.spans("mix", [0], samples=len(words), completion=text,
                       extra=(lambda step, i: {"prompt": words[i]}) if column == "prompt" else None)
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    for desc in (False, True):
        got = [r[column] for r in client.get("/api/runs/mix/samples", params={"order_by": column, "desc": desc}).json()]
        assert got == sorted(words, reverse=desc)
