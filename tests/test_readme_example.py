"""docs/usage.md's "Instrument your own loop" example (the README's until issue 66), run with real tensors.

Users copy that snippet first; this keeps its calls and signatures true to the code.
"""

from __future__ import annotations

import json

import torch
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_grpo
from otel_grpo import signals

B, T, G = 16, 12, 8


def _batch(gen: torch.Generator) -> dict[str, torch.Tensor]:
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    lp = -torch.rand(B, T, generator=gen)
    return {
        "mask": mask,
        "truncated": lengths == T,
        "rollout_lp": lp + 0.01 * torch.randn(B, T, generator=gen),
        "old_lp": lp,
        "lp": lp + 0.05 * torch.randn(B, T, generator=gen),
        "ref_lp": lp - 0.1 * torch.rand(B, T, generator=gen),
        "ent": torch.rand(B, T, generator=gen),
        "correct": (torch.rand(B, generator=gen) > 0.5).float(),
        "format": torch.ones(B),
    }


def test_readme_loop_emits_metrics_spans_and_samples(tmp_path):
    reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
    tracer_provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=2048))
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    tel = otel_grpo.Telemetry(
        otel_grpo.TelemetrySettings(run_id="exp-42", output_dir=tmp_path),
        meter_provider=MeterProvider(metric_readers=[reader]),
        tracer_provider=tracer_provider,
    )
    gen = torch.Generator().manual_seed(0)
    with tel:  # as docs/usage.md's `with Telemetry.from_env(...) as tel:`
        for step in range(3):
            b = _batch(gen)
            with tel.step(step) as s:
                with s.phase("rollout"):
                    mask, truncated, rollout_lp = b["mask"], b["truncated"], b["rollout_lp"]
                with s.phase("reward"):
                    parts = {"correct": b["correct"], "format": b["format"]}
                    rewards = 0.9 * parts["correct"] + 0.1 * parts["format"]
                    grouped = rewards.view(-1, G)
                    adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
                with s.phase("update"):
                    lp, old_lp, ref_lp, ent = b["lp"], b["old_lp"], b["ref_lp"], b["ent"]
                stats = (signals.reward_stats(rewards, group_size=G, components=parts, advantages=adv)
                         | signals.length_stats(mask, truncated)
                         | signals.policy_stats(lp, old_lp, adv, mask, 0.2, 0.28, ref_logprobs=ref_lp, entropy=ent)
                         | signals.mismatch_stats(old_lp, rollout_lp, mask))
                reduced = signals.reduce_stats(stats, None)
                s.record(reduced, learning_rate=1e-6, grad_norm=0.5)
                s.samples([{"prompt": f"p{i // G}", "completion": f"c{i}", "reward": float(rewards[i]),
                            "rewards": {k: float(v[i]) for k, v in parts.items()}, "advantage": float(adv[i])}
                           for i in range(B)])
        tel.log_metrics(3, {"kl": 0.1, "clip_ratio/high_mean": 0.02, "mismatch/mismatch_kl": 3e-4})
        weights, new_mask, is_stats = signals.rollout_correction(
            b["old_lp"], b["rollout_lp"], b["mask"], level="token", mode="truncate", threshold=(0.5, 2.0))
        assert weights.shape == new_mask.shape == (B, T) and "rollout_is_mean" in signals.reduce_stats(is_stats)
    assert tel.closed  # leaving the block finished the run: flushed and closed

    names = {m.name for rm in reader.get_metrics_data().resource_metrics
             for sm in rm.scope_metrics for m in sm.metrics}
    # the last step (log_metrics) logged KL, clipping and mismatch only: the loop's reward and learning-rate
    # gauges are not served as current after it; every step's values are in its span
    assert {"grpo.kl", "grpo.clip_ratio.high", "grpo.mismatch.kl", "grpo.sample.reward", "grpo.phase.duration",
            "grpo.steps"} <= names
    assert not {"grpo.reward.mean", "grpo.reward_fn.mean", "grpo.learning_rate"} & names
    step_spans = [s for s in spans.get_finished_spans() if s.name == "grpo.step"]
    assert [s.attributes["grpo.step"] for s in step_spans] == [0, 1, 2, 3]
    assert step_spans[0].attributes["grpo.metric.reward_fn_mean/correct"] >= 0.0
    assert step_spans[2].attributes["grpo.metric.learning_rate"] == 1e-6 and "grpo.metric.reward" in step_spans[2].attributes
    assert step_spans[3].attributes["grpo.metric.clip_ratio_high_mean"] == 0.02
    spilled = [json.loads(line) for line in (tmp_path / "samples" / "step_0.jsonl").read_text().splitlines()]
    assert spilled and all("completion" in row for row in spilled)
