"""The security and robustness defects of issue 12, each reproduced exactly as reported."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient

from otel_grpo.sidecar import SidecarSettings, create_app
from otel_grpo.sidecar._hosts import host_allowed

PB = {"Content-Type": "application/x-protobuf"}
MiB = 1024 * 1024


def _post(client, otlp, run_id="run-a", steps=range(2), **kw):
    body = otlp.request(otlp.spans(run_id, steps, **kw)).SerializeToString()
    assert client.post("/v1/traces", content=body, headers=PB).status_code == 200


def test_made_up_methods_add_no_metric_series(client):
    before = client.get("/metrics").text
    for i in range(300):
        assert client.request(f"M{i:05d}", "/api/runs").status_code == 405
        assert client.get(f"/no/such/path/{i}").status_code == 404
    text = client.get("/metrics").text
    assert "M00042" not in text and "/no/such/path" not in text
    assert 'method="other",route="/api/runs",status="405"} 300.0' in text
    assert 'method="GET",route="unmatched",status="404"} 300.0' in text
    assert len(text) < len(before) + 10_000  # a handful of new series, not hundreds


class _CountReceived:
    """ASGI wrapper counting the request-body bytes the app pulled from the server."""

    def __init__(self, app) -> None:
        self.app, self.received = app, 0

    async def __call__(self, scope, receive, send):
        async def counting():
            message = await receive()
            self.received += len(message.get("body", b""))
            return message
        await self.app(scope, counting if scope["type"] == "http" else receive, send)


def test_alerts_check_the_token_and_size_before_reading_the_body(tmp_path):
    counted = _CountReceived(create_app(SidecarSettings(db=tmp_path / "s.db", ingest_token="s3cret")))
    with TestClient(counted) as client:
        big = b"x" * (100 * MiB)
        r = client.post("/api/alerts", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 401 and counted.received == 0
        auth = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}
        r = client.post("/api/alerts", content=big, headers=auth)
        assert r.status_code == 413 and counted.received == 0 and "limit" in r.json()["detail"]
        alert = {"status": "firing", "labels": {"alertname": "A"}, "startsAt": "2026-11-22T05:00:00Z", "fingerprint": "f"}
        ok = client.post("/api/alerts", content=json.dumps({"version": "4", "alerts": [alert]}), headers=auth)
        assert ok.status_code == 200 and ok.json() == {"stored": 1}
        bad = client.post("/api/alerts", content=b'{"version": "3", "alerts": []}', headers=auth)
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "version"
        assert client.post("/api/alerts", content=b"{not json", headers=auth).status_code == 422
    metrics = client.app.app.state.registry
    assert metrics.get_sample_value("otel_grpo_sidecar_requests_rejected_total", {"reason": "unauthorized"}) == 1
    assert metrics.get_sample_value("otel_grpo_sidecar_requests_rejected_total", {"reason": "too_large"}) == 1


@pytest.mark.parametrize("host,status", [
    ("evil.example", 421), ("evil.example:8000", 421), ("127.0.0.1.nip.io:8000", 421),
    ("127.0.0.1:8000", 200), ("[::1]:8000", 200), ("localhost:8000", 200), ("sidecar:8000", 200),
    ("10.1.2.3", 200), ("app.localhost", 200), ("sidecar.example.org", 200),
])
def test_host_header_guards_against_dns_rebinding(make_client, host, status):
    client = make_client(allowed_hosts=["sidecar.example.org"])
    for path in ("/api/runs", "/", "/v1/traces"):
        r = client.get(path, headers={"Host": host})
        assert (r.status_code == 421) == (status == 421), (path, r.status_code)
    if status == 421:
        assert "OTEL_GRPO_SIDECAR_ALLOWED_HOSTS" in client.get("/api/runs", headers={"Host": host}).json()["detail"]
    assert make_client(allowed_hosts=["*"]).get("/api/runs", headers={"Host": "evil.example"}).status_code == 200


@pytest.mark.parametrize("host,status", [
    ("a.grpo.example.org", 200), ("Team-1.GRPO.example.org.:443", 200), ("grpo.example.org", 421),
    ("a.b.grpo.example.org", 421), ("agrpo.example.org", 421), ("a.grpo.example.org.evil.example", 421),
    ("evil.example", 421),
])
def test_a_wildcard_host_matches_one_label_as_a_kubernetes_ingress_host(make_client, host, status):
    # the chart copies its Ingress hosts into ALLOWED_HOSTS; `*.grpo.example.org` matched no name, so an
    # Ingress with a wildcard host got 421 on every request
    client = make_client(allowed_hosts=["*.grpo.example.org"])
    assert (client.get("/api/runs", headers={"Host": host}).status_code == 421) == (status == 421), host
    assert host_allowed(host, frozenset({"*.grpo.example.org"})) == (status == 200)


@pytest.mark.parametrize("value", ["sidecar.example.org", " grafana.example.org, sidecar.example.org ",
                                   '["sidecar.example.org"]'])
def test_allowed_hosts_and_cors_origins_come_from_their_variables_as_comma_lists(make_client, monkeypatch, value):
    # docs/usage.md: "add dotted names you use to ALLOWED_HOSTS"; a plain name was refused as
    # 'error parsing value for field "allowed_hosts"' (JSON only), and the sidecar did not start
    monkeypatch.setenv("OTEL_GRPO_SIDECAR_ALLOWED_HOSTS", value)
    monkeypatch.setenv("OTEL_GRPO_SIDECAR_CORS_ORIGINS", value.replace("sidecar.", "http://grafana."))
    client = make_client()
    assert client.get("/api/runs", headers={"Host": "sidecar.example.org"}).status_code == 200
    assert client.get("/api/runs", headers={"Host": "evil.example"}).status_code == 421
    cors = client.get("/api/runs", headers={"Origin": "http://grafana.example.org"})
    assert cors.headers["access-control-allow-origin"] == "http://grafana.example.org"


def test_csv_neutralises_formulas_in_cells_and_headers(client, otlp):
    attack = {"=HYPERLINK(\"http://x\")": "@SUM(1+1)", "note": "+1", "tabbed": "\tx", "cr": "\rx", "neg": -2.5}
    _post(client, otlp, steps=[0], samples=2, completion=lambda s, i: "=cmd|' /C calc'!A0" if i else "-2+3",
          extra=lambda s, i: attack)
    text = client.get("/api/runs/run-a/samples.csv", params={"step": 0}).text
    header, *rows = list(csv.reader(io.StringIO(text)))
    assert "'=HYPERLINK(\"http://x\")" in header and "=HYPERLINK(\"http://x\")" not in header
    cells = [dict(zip(header, r)) for r in rows]
    assert [c["completion"] for c in cells] == ["'-2+3", "'=cmd|' /C calc'!A0"]
    assert {c["'=HYPERLINK(\"http://x\")"] for c in cells} == {"'@SUM(1+1)"}
    assert {(c["note"], c["tabbed"], c["cr"]) for c in cells} == {("'+1", "'\tx", "'\rx")}
    assert [c["advantage"] for c in cells] == ["-1.5", "-0.5"] and {c["neg"] for c in cells} == {"-2.5"}  # numbers stay numbers
    first = json.loads(client.get("/api/runs/run-a/samples.jsonl", params={"step": 0}).text.splitlines()[0])
    assert first["completion"] == "-2+3"  # JSON is not a spreadsheet: left as stored


RUN = "team/exp-1"
ENC = "team%2Fexp-1"


@pytest.mark.parametrize("path", ["", "/steps", "/metrics", "/samples", "/samples.csv", "/samples.jsonl",
                                  "/sample-steps"])
def test_run_ids_with_a_slash_are_readable_everywhere(client, otlp, path):
    _post(client, otlp, run_id=RUN, steps=range(3))
    _post(client, otlp, run_id="team", steps=[7])  # a run whose id is a prefix of the other
    for url in (f"/api/runs/{ENC}{path}", f"/api/runs/{RUN}{path}"):
        r = client.get(url)
        assert r.status_code == 200, (url, r.text)
        assert RUN in r.text or path in ("/metrics", "/sample-steps")
        assert '"run_id":"team"' not in r.text.replace(" ", "")
    assert client.get(f"/api/runs/{ENC}/sample-steps").json() == [2, 1, 0]
    assert client.get("/api/runs/team/sample-steps").json() == [7]
    assert client.get(f"/api/runs/{ENC}").json()["run_id"] == RUN
    assert client.get("/api/runs/team%2Fnope/samples").json() == {"detail": "run 'team/nope' not found"}


ENDPOINTS = ("samples", "samples.csv", "samples.jsonl", "steps")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("param", ["step", "step_min", "step_max"])
@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30])
def test_out_of_range_integers_are_422(client, otlp, endpoint, param, value):
    _post(client, otlp)
    r = client.get(f"/api/runs/run-a/{endpoint}", params={param: value})
    if endpoint == "steps" and param == "step":
        assert r.status_code == 200  # steps takes no `step`: ignored like any unknown parameter
        return
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", param]
    edge = 2**63 - 1 if value > 0 else -(2**63)
    assert client.get(f"/api/runs/run-a/{endpoint}", params={param: edge}).status_code == 200


@pytest.mark.parametrize("run_id", ["...", "a b?c#d%e", "ünï/cödé", "steps", "a/steps/b"])
def test_any_run_id_the_telemetry_accepts_reads_back(client, otlp, run_id):
    from urllib.parse import quote

    _post(client, otlp, run_id=run_id, steps=[3])
    enc = quote(run_id, safe="").replace(".", "%2E")  # as the web page sends it
    assert client.get(f"/api/runs/{enc}").json()["run_id"] == run_id
    assert client.get(f"/api/runs/{enc}/sample-steps").json() == [3]
    assert {r["run_id"] for r in client.get(f"/api/runs/{enc}/samples").json()} == {run_id}
    assert client.get(f"/api/runs/{enc}/steps").json()[0]["run_id"] == run_id


def test_run_ids_read_back_from_a_real_server(sidecar, otlp):
    """uvicorn decodes the path once (TestClient decodes it twice, so `%25` is checked here)."""
    import httpx
    from urllib.parse import quote

    for run_id in ("x%2Fy", "team/exp-1", "..."):
        body = otlp.request(otlp.spans(run_id, [1])).SerializeToString()
        assert httpx.post(sidecar.url + "/v1/traces", content=body, headers=PB).status_code == 200
        enc = quote(run_id, safe="").replace(".", "%2E")
        rows = httpx.get(f"{sidecar.url}/api/runs/{enc}/samples").json()
        assert {r["run_id"] for r in rows} == {run_id}, rows


@pytest.mark.parametrize("text", [" =1+1", "\n=1+1", " \t @A1", "\uff1dcmd()", "\u3000\uff0b1", "\r\n-1"])
def test_csv_neutralises_formulas_behind_blanks_and_in_full_width(client, otlp, text):
    _post(client, otlp, steps=[0], samples=1, completion=lambda s, i: text)
    body = client.get("/api/runs/run-a/samples.csv", params={"step": 0}).text
    header, row = list(csv.reader(io.StringIO(body)))
    assert dict(zip(header, row))["completion"] == "'" + text


def test_a_non_ascii_token_is_accepted_when_it_is_right(make_client, otlp):
    client = make_client(ingest_token="pässwört-令牌", read_token="lесеn")  # Cyrillic е, с: not ASCII
    assert client.get("/api/runs", headers={"Authorization": "Bearer lесеn".encode()}).status_code == 200
    assert client.get("/api/runs", headers={"Authorization": "Bearer lesen".encode()}).status_code == 401
    body = otlp.request(otlp.spans("t", [0])).SerializeToString()
    ok = {"Content-Type": "application/x-protobuf", "Authorization": "Bearer pässwört-令牌".encode()}
    assert client.post("/v1/traces", content=body, headers=ok).status_code == 200


def test_the_openapi_schema_types_json_reads_by_their_models(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/runs", "/api/runs/{run_id}/samples", "/api/runs/{run_id}/steps", "/api/alerts"):
        schema = paths[path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert schema.get("type") != "string", (path, schema)
    assert paths["/api/runs"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["type"] == "array"


def test_a_post_that_is_not_json_is_415_and_stores_nothing(client):
    # A page on any site may POST text/plain without a CORS preflight: with no ingest token (the local
    # stack's default) that stored an alert. Every JSON POST requires a JSON content type (OTLP ingest
    # takes its own two).
    paths = client.get("/openapi.json").json()["paths"]
    posts = [path for path, methods in paths.items() if "post" in methods and path != "/v1/traces"]
    assert "/api/alerts" in posts
    alert = {"status": "firing", "labels": {"alertname": "A"}, "startsAt": "2026-11-22T05:00:00Z", "fingerprint": "f"}
    body = json.dumps({"version": "4", "alerts": [alert]})
    for path in posts:
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            r = client.post(path, content=body, headers={"Content-Type": content_type})
            assert r.status_code == 415 and "application/json" in r.json()["detail"], (path, content_type, r.text)
        assert client.post(path, content=body).status_code == 415  # no Content-Type at all
    assert client.get("/api/alerts").json() == []
    ok = client.post("/api/alerts", content=body, headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200 and len(client.get("/api/alerts").json()) == 1


def test_a_nul_in_the_search_text_is_a_422_on_both_backends(client, otlp):
    # SQLite's LIKE stops at a NUL (q=%00 matched every row); PostgreSQL text cannot hold one.
    _post(client, otlp, steps=[0])
    for path in ("/api/runs/run-a/samples", "/api/runs/run-a/samples.csv", "/api/runs/run-a/samples.jsonl"):
        r = client.get(path, params={"step_min": 0, "q": "answer\x00"})
        assert r.status_code == 422 and "NUL" in r.text, (path, r.text)
    assert len(client.get("/api/runs/run-a/samples", params={"step_min": 0, "q": "answer"}).json()) == 4


def _drop_columns(db, table: str, *columns: str) -> None:
    """Break the schema behind the sidecar's back, as a bug in a statement would meet it."""
    import sqlite3

    import psycopg

    statements = [f"ALTER TABLE {table} DROP COLUMN {c}" for c in columns]
    if isinstance(db, str):
        with psycopg.connect(db, autocommit=True) as conn:
            for s in statements:
                conn.execute(s)
    else:
        with sqlite3.connect(db) as conn:
            for s in statements:
                conn.execute(s)


def test_a_programming_error_is_a_500_that_names_itself_not_a_retryable_503(make_client, db, otlp):
    client = make_client(ingest_workers=0)
    _post(client, otlp, steps=[0])
    _drop_columns(db, "runs", "step_epoch", "step_version")
    for answer in (client.get("/api/runs/run-a/steps"),
                   client.post("/v1/traces", content=otlp.request(otlp.spans("run-a", [1])).SerializeToString(),
                               headers=PB)):
        assert answer.status_code == 500 and "Retry-After" not in answer.headers, answer.text
        assert "step_" in answer.text and "rror" in answer.text, answer.text  # the error, by name
    assert client.get("/api/runs/run-a/samples", params={"step": 0}).status_code == 200  # the rest still works
