"""A real OTLP/HTTP round trip: Telemetry -> SDK exporters -> local receiver -> opentelemetry-proto decode."""

from __future__ import annotations

from otel_grpo.catalog import get
from otel_grpo.signals import ReducedStats
from otel_grpo.telemetry import Telemetry, TelemetrySettings

from ._receiver import OTLPReceiver, attrs


def test_traces_and_metrics_arrive_decodable(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,team=rl")
    with OTLPReceiver() as rx:
        settings = TelemetrySettings(
            run_id="rt-1", model_name="tiny-gpt", otlp_protocol="http/protobuf",
            otlp_endpoint=f"http://127.0.0.1:{rx.port}", metrics_exporters=["otlp"], traces_exporters=["otlp"],
            output_dir=tmp_path, top_k=2, bottom_k=1, random_k=1, git_revision="abc123",
        )
        tel = Telemetry(settings)
        scalars = {f"custom_{i}": float(i) for i in range(140)} | {"kl": 0.125, "rewards/format/mean": 0.5}
        for step in range(3):
            with tel.step(step) as s:
                with s.phase("rollout"):
                    pass
                s.record(ReducedStats(scalars, samples={"sample_reward": [0.0, 0.5, 1.0], "sample_advantage": [-1.0, 0.0, 1.0]}))
                s.samples([{"prompt": f"p{i}", "completion": "c", "reward": i / 10} for i in range(10)])
        tel.shutdown()

    assert rx.content_types == {"application/x-protobuf"}
    resource = attrs(rx.traces[0].resource_spans[0].resource.attributes)
    assert resource["service.name"] == "grpo-trainer" and resource["grpo.run_id"] == "rt-1"
    assert resource["grpo.model"] == "tiny-gpt" and resource["vcs.revision"] == "abc123"
    assert resource["grpo.rank"] == 0 and resource["grpo.world_size"] == 1 and resource["host.name"]
    assert resource["deployment.environment"] == "test" and resource["team"] == "rl"

    spans = rx.spans()
    steps = sorted((s for s in spans if s.name == "grpo.step"), key=lambda s: attrs(s.attributes)["grpo.step"])
    assert len(steps) == 3
    step0 = attrs(steps[0].attributes)
    assert step0["grpo.run_id"] == "rt-1" and step0["grpo.step"] == 0
    assert step0["grpo.metric.kl"] == 0.125 and step0["grpo.metric.reward_fn_mean/format"] == 0.5
    assert step0["grpo.metric.custom_139"] == 139.0  # > 128 attributes survive our span limits
    assert steps[0].dropped_attributes_count == 0
    phases = [s for s in spans if s.name == "grpo.phase.rollout"]
    assert len(phases) == 3 and {bytes(p.parent_span_id) for p in phases} == {bytes(s.span_id) for s in steps}
    chunks = [s for s in spans if s.name == "grpo.samples"]
    assert len(chunks) == 3
    events = [attrs(e.attributes) for e in chunks[0].events]
    assert [e["selection"] for e in events] == ["top", "top", "bottom", "random"]
    assert {e.name for c in chunks for e in c.events} == {"grpo.sample"}

    kl = rx.metric_points("grpo.kl")
    assert kl and all(attrs(p.attributes) == {"run_id": "rt-1"} for _, p in kl)
    assert kl[-1][0].unit == "{nat}" and kl[-1][1].as_double == 0.125
    metric, hist = rx.metric_points("grpo.sample.reward")[-1]
    assert tuple(hist.explicit_bounds) == get("sample_reward").buckets and hist.count == 9
    _, steps_counter = rx.metric_points("grpo.steps")[-1]
    assert steps_counter.as_double == 3 or steps_counter.as_int == 3
    _, adv = rx.metric_points("grpo.sample.advantage")[-1]
    assert adv.count == 9 and adv.min == -1.0 and adv.sum == 0.0  # negatives survive the SDK and OTLP
