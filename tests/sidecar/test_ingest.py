"""OTLP/HTTP ingest through the app (TestClient): decoding, extraction, spec-shaped answers."""

from __future__ import annotations

import gzip
import json

from google.rpc import status_pb2  # googleapis-common-protos, to check our hand-declared Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


def test_protobuf_request_stores_steps_phases_and_samples(client, otlp):
    body = otlp.request(otlp.spans("run-a", range(3), samples=4)).SerializeToString()
    r = client.post("/v1/traces", content=body, headers=PB)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/x-protobuf"
    response = ExportTraceServiceResponse.FromString(r.content)
    assert not response.HasField("partial_success")

    runs = client.get("/api/runs").json()
    assert [(x["run_id"], x["first_step"], x["last_step"], x["sample_count"], x["model"]) for x in runs] == [
        ("run-a", 0, 2, 12, "tiny")]
    steps = client.get("/api/runs/run-a/steps").json()
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert steps[2]["grpo.kl"] == 0.02 and steps[2]["grpo.reward_fn.mean/format"] == 0.25
    assert {f"grpo.phase.duration/{p}" for p in ("rollout", "reward", "update")} <= steps[0].keys()
    assert all(steps[0][f"grpo.phase.duration/{p}"] >= 0 for p in ("rollout", "reward", "update"))

    samples = client.get("/api/runs/run-a/samples").json()  # default: the latest step
    assert [(s["step"], s["sample_index"]) for s in samples] == [(2, 0), (2, 1), (2, 2), (2, 3)]
    first = samples[1]
    assert first["completion"] == "answer 1 of step 2" and first["reward.format"] == 1.0
    assert first["truncated"] is False and first["completion_original_length"] == 101
    assert first["selection"] == "top" and first["advantage"] == -0.5


def test_json_request_with_hex_ids_gzip_and_redelivery_is_idempotent(client, otlp):
    body = otlp.to_json(otlp.request(otlp.spans("run-j", range(2))))
    headers = {**JS, "Content-Encoding": "gzip"}
    for _ in range(2):  # the same export delivered twice stores the same rows once
        r = client.post("/v1/traces", content=gzip.compress(body), headers=headers)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/json"
        assert r.json() == {}
    assert client.get("/api/runs").json()[0]["sample_count"] == 8
    assert len(client.get("/api/runs/run-j/samples", params={"step_min": 0}).json()) == 8


def test_phase_spans_arriving_before_their_step_span_are_attached(client, otlp):
    spans = otlp.spans("run-p", [7], samples=0)
    phases = [s for s in spans if s.name.startswith("grpo.phase.")]
    rest = [s for s in spans if not s.name.startswith("grpo.phase.")]
    assert client.post("/v1/traces", content=otlp.request(phases).SerializeToString(), headers=PB).status_code == 200
    assert client.post("/v1/traces", content=otlp.request(rest).SerializeToString(), headers=PB).status_code == 200
    (row,) = client.get("/api/runs/run-p/steps").json()
    assert row["step"] == 7 and "grpo.phase.duration/update" in row and row["grpo.kl"] == 0.07


def test_run_id_falls_back_to_resource_and_bad_spans_are_partial_success(client, otlp):
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    request = otlp.request(otlp.spans("run-r", [1], samples=1))
    spans = request.resource_spans[0].scope_spans[0].spans
    for span in spans:  # drop the span attribute: the resource's grpo.run_id must be used
        kept = [kv for kv in span.attributes if kv.key != "grpo.run_id"]
        del span.attributes[:]
        span.attributes.extend(kept)
    broken = spans.add(name="grpo.step", span_id=b"\x01" * 8, trace_id=b"\x02" * 16, kind=Span.SPAN_KIND_INTERNAL)
    broken.attributes.add(key="grpo.step").value.string_value = "not a number"
    step_span = next(s for s in spans if s.name == "grpo.step")
    step_span.attributes.add(key="grpo.metric.step").value.double_value = 1.0  # the catalog's `step` signal
    huge = spans.add(name="grpo.samples", span_id=b"\x03" * 8, trace_id=b"\x02" * 16)
    huge.attributes.add(key="grpo.step").value.string_value = "9" * 20  # beyond int64: rejected, not a 500
    r = client.post("/v1/traces", content=request.SerializeToString(), headers=PB)
    assert r.status_code == 200
    partial = ExportTraceServiceResponse.FromString(r.content).partial_success
    assert partial.rejected_spans == 2 and "grpo.step" in partial.error_message
    (row,) = client.get("/api/runs/run-r/steps").json()
    assert row["step"] == 1 and row["stat.step"] == 1.0  # a stat named like a column is renamed


def test_malformed_inputs_get_spec_answers_and_the_service_keeps_serving(make_client, otlp):
    client = make_client(max_body_bytes=64 * 1024)
    bomb = gzip.compress(b"\0" * (8 * 1024 * 1024))  # 8 MiB of zeros in ~8 KiB
    cases = [
        (b"\xff\xff\xff", PB, 400),
        (b"{not json", JS, 400),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', JS, 400),
        (b'{"resourceSpans": 3}', JS, 400),
        (b"[]", JS, 400),
        (b"[" * 50_000, JS, 400),  # nesting deeper than the JSON parser's recursion limit
        (b"\x1f\x8b\x08garbage", {**PB, "Content-Encoding": "gzip"}, 400),
        (gzip.compress(b"abc")[:-6], {**PB, "Content-Encoding": "gzip"}, 400),
        (bomb, {**PB, "Content-Encoding": "gzip"}, 413),
        (b"x" * (65 * 1024), PB, 413),
        (b"{}", {"Content-Type": "text/plain"}, 415),
        (b"{}", {**JS, "Content-Encoding": "br"}, 415),
    ]
    for body, headers, status in cases:
        r = client.post("/v1/traces", content=body, headers=headers)
        assert r.status_code == status, (headers, body[:20], r.text)
        if status == 400:
            media = headers["Content-Type"]
            assert r.headers["content-type"] == media
            if media == PB["Content-Type"]:
                assert status_pb2.Status.FromString(r.content).code == 3
            else:
                assert r.json()["code"] == 3 and r.json()["message"]
    valid = otlp.request(otlp.spans("after", [0], samples=2)).SerializeToString()
    assert client.post("/v1/traces", content=valid, headers=PB).status_code == 200
    assert client.get("/api/runs/after/samples").json()[1]["sample_index"] == 1
    metrics = client.get("/metrics").text
    assert 'otel_grpo_sidecar_requests_rejected_total{reason="too_large"} 2.0' in metrics
    assert 'otel_grpo_sidecar_requests_rejected_total{reason="malformed"} 8.0' in metrics


def test_overload_answers_503_with_retry_after(make_client, otlp):
    client = make_client(max_concurrent_ingest=1, retry_after_s=3)
    gate = client.app.state.gate
    assert gate.try_acquire()  # another ingest holds the only slot
    body = otlp.request(otlp.spans("busy", [0])).SerializeToString()
    r = client.post("/v1/traces", content=body, headers=PB)
    assert r.status_code == 503 and r.headers["retry-after"] == "3"
    assert status_pb2.Status.FromString(r.content).code == 14
    gate.release()
    assert client.post("/v1/traces", content=body, headers=PB).status_code == 200


def test_ingest_and_read_tokens_are_separate(make_client, otlp):
    client = make_client(ingest_token="in-secret", read_token="read-secret")
    body = otlp.request(otlp.spans("tok", [0])).SerializeToString()
    assert client.post("/v1/traces", content=body, headers=PB).status_code == 401
    assert client.post("/v1/traces", content=body, headers={**PB, "Authorization": "Bearer read-secret"}).status_code == 401
    assert client.post("/v1/traces", content=body, headers={**PB, "Authorization": "Bearer in-secret"}).status_code == 200
    assert client.get("/api/runs").status_code == 401
    assert client.get("/api/runs", headers={"Authorization": "Bearer in-secret"}).status_code == 401
    assert client.get("/api/runs", headers={"Authorization": "Bearer read-secret"}).json()[0]["run_id"] == "tok"
    assert client.get("/healthz").status_code == 200 and client.get("/metrics").status_code == 200


def test_status_message_is_wire_compatible_with_google_rpc_status():
    from otel_grpo.sidecar.otlp import Status

    ours = Status(code=3, message="bad body").SerializeToString()
    assert status_pb2.Status.FromString(ours) == status_pb2.Status(code=3, message="bad body")
    assert json.loads(json.dumps({"code": 3}))["code"] == 3


def test_spans_of_a_run_id_the_api_could_not_address_are_rejected_with_the_reason(client, otlp):
    from otel_grpo.catalog.spans import RUN_SUBRESOURCES

    bad = ["run-a/steps", "run-a/samples.csv", "../escape", "/abs", ".*"]
    spans = [s for run in ["run-a", *bad] for s in otlp.spans(run, [3], samples=1)]
    r = client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB)
    assert r.status_code == 200
    partial = ExportTraceServiceResponse.FromString(r.content).partial_success
    assert partial.rejected_spans == 2 * len(bad)  # each run's step and samples spans (phases: their children)
    assert "'run-a/steps' ends in '/steps'" in partial.error_message
    assert [run["run_id"] for run in client.get("/api/runs").json()] == ["run-a"]
    # so every sub-resource of the stored run is its own, and the run itself is addressable
    assert client.get("/api/runs/run-a").json()["run_id"] == "run-a"
    assert [s["step"] for s in client.get("/api/runs/run-a/steps").json()] == [3]
    assert {"steps", "metrics", "samples"} <= RUN_SUBRESOURCES


def test_a_nul_in_keys_and_texts_reads_as_the_replacement_character_on_both_backends(client, otlp):
    """PostgreSQL text cannot hold a NUL: one in a metric's name failed the whole request there (the other runs'
    spans lost with it), one in a sample's attribute failed every read sorting or filtering by a column. Ingest
    now stores each NUL it keeps as U+FFFD, on both backends, which then answer alike; a run id's is refused."""
    import csv
    import io

    extra = lambda step, i: {"extracted_answer": f"{i}\x00{i}", "note\x00key": "x", "tags": [f"t\x00{i}"],  # noqa: E731
                             "kl_ref_mean": i / 4}
    spans = [*otlp.spans("good", [1], samples=2), *otlp.spans("bad\x00run", [1], samples=1),
             *otlp.spans("nul", [1], samples=3, metrics=lambda step: {"bad\x00name": 1.0}, extra=extra)]
    r = client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB)
    assert r.status_code == 200
    partial = ExportTraceServiceResponse.FromString(r.content).partial_success
    assert partial.rejected_spans == 2 and "holds a control character" in partial.error_message
    assert sorted(run["run_id"] for run in client.get("/api/runs").json()) == ["good", "nul"]
    assert [s["step"] for s in client.get("/api/runs/good/steps").json()] == [1]
    assert client.get("/api/runs/nul/steps").json()[0]["bad\ufffdname"] == 1.0
    assert "bad\ufffdname" in {c["name"] for c in client.get("/api/runs/nul/metrics").json()}

    def samples(**params) -> list[tuple]:
        r = client.get("/api/runs/nul/samples", params={"step": 1, **params})
        assert r.status_code == 200, r.text
        return [(row["sample_index"], row["extracted_answer"], row["note\ufffdkey"], row["tags"]) for row in r.json()]
    assert samples() == [(i, f"{i}\ufffd{i}", "x", [f"t\ufffd{i}"]) for i in range(3)]
    assert [row[0] for row in samples(order_by="kl_ref_mean", desc=True)] == [2, 1, 0]
    assert [row[0] for row in samples(order_by="extracted_answer", desc=True)] == [2, 1, 0]
    assert [row[0] for row in samples(filter_col="kl_ref_mean", filter_min=0.2)] == [1, 2]
    r = client.get("/api/runs/nul/samples.csv", params={"step": 1, "order_by": "kl_ref_mean"})
    assert r.status_code == 200
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [(row["extracted_answer"], row["note\ufffdkey"]) for row in rows] == [(f"{i}\ufffd{i}", "x")
                                                                                 for i in range(3)]


def test_the_reserved_run_id_endings_are_the_sidecars_run_routes(client):
    """`check_run_id` keeps a run id from ending in a route of `/api/runs/{run_id}/...`; a new route there must
    be reserved too, or a run whose id ends in its name could no longer be read."""
    from otel_grpo.catalog.spans import RUN_SUBRESOURCES

    prefix = "/api/runs/{run_id}/"
    routes = {path[len(prefix):] for path in client.app.openapi()["paths"] if path.startswith(prefix)}
    assert routes == RUN_SUBRESOURCES
