"""Names through the one resolver, per source, and what followed verl runs derive from their files:
memory, throughput (`GRPOThroughputDrop`) and per-group reward spread (`GRPONoLearningSignal`)."""

from __future__ import annotations

import json

import pytest

from otel_grpo.integrations.follow import JsonlStream, VerlMetrics, VerlRollouts
from otel_grpo.integrations.follow._rollouts import group_spread

from .test_exactly_once import verl_log
from .test_files import Run


def test_verl_memory_and_throughput_are_signals(tmp_path, verl):
    path = tmp_path / "exp.jsonl"
    verl_log(verl, path, {1: {"actor/perf/max_memory_allocated_gb": 30.5, "actor/perf/max_memory_reserved_gb": 40.0,
                              "actor/perf/cpu_memory_used_gb": 100.25, "perf/total_num_tokens": 8000,
                              "perf/time_per_step": 4.0, "perf/throughput": 250.0}})
    run = Run(tmp_path, [VerlMetrics(path)])
    run.once()
    assert run.gauge("grpo.memory.device_allocated_max") == 30.5
    assert run.gauge("grpo.memory.device_reserved_max") == 40.0
    assert run.gauge("grpo.memory.host_used") == 100.25
    assert run.gauge("grpo.throughput") == 2000.0  # 8000 tokens in 4 s, all GPUs
    assert run.gauge("grpo.throughput_per_gpu") == 250.0  # verl's own per-GPU figure
    assert not any(k.startswith("grpo.metric.actor_perf") for k in run.step_attrs(1))


def _grouped_dump(directory, step: int, scores: list[list[float]]) -> None:
    """`_write_generations`' format with G completions per prompt (verl repeats the input per completion)."""
    directory.mkdir(exist_ok=True)
    with open(directory / f"{step}.jsonl", "w") as fp:
        for g, group in enumerate(scores):
            for i, score in enumerate(group):
                fp.write(json.dumps({"input": f"prompt {g}", "output": f"answer {g}.{i}", "gts": "1", "score": score,
                                     "step": step}) + "\n")


def test_reward_spread_per_group_comes_from_the_dumps(tmp_path):
    rollouts = tmp_path / "rollouts"
    _grouped_dump(rollouts, 1, [[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.5, 0.5]])
    run = Run(tmp_path, [VerlRollouts(rollouts, settle_s=0.0)])
    run.once()
    assert run.gauge("grpo.reward.frac_zero_std") == 0.5  # two of four groups all equal: no learning signal
    assert group_spread([{"prompt": "p", "reward": 1.0}]) == {}  # one completion per prompt: no groups


def test_log_metrics_and_jsonl_resolve_per_source(tmp_path):
    run = Run(tmp_path, [JsonlStream("jsonl", tmp_path / "none.jsonl")])
    run.tel.log_metrics(1, {"kl": 0.25})
    run.tel.flush()
    assert run.gauge("grpo.kl") == 0.25  # without a source: our key, the plain k3
    run.tel.log_metrics(2, {"kl": 0.5, "rewards/org/model/mean": 0.75}, source="trl")
    run.tel.flush()
    assert run.gauge("grpo.kl") is None  # not logged at step 2: absent
    assert run.gauge("grpo.trl.kl") == 0.5  # TRL's name: its bias-corrected estimator
    assert run.gauge("grpo.reward_fn.mean") == 0.75  # a reward model named org/model, not an extra
    with pytest.raises(ValueError, match="source"):
        run.tel.log_metrics(3, {"kl": 1.0}, source="wandb")
    path = tmp_path / "trl.jsonl"
    path.write_text('{"step": 1, "kl": 0.125}\n')
    trl = Run(tmp_path / "t", [JsonlStream("jsonl", path, source="trl")])
    trl.once()
    assert trl.gauge("grpo.trl.kl") == 0.125 and trl.gauge("grpo.kl") is None


def test_a_verl_validation_before_training_is_no_step(tmp_path, verl):
    """`val_before_train` logs the validation alone at step 0 (the resumed step after a restart): its values go
    out, but the run has no step yet (GRPONoFirstStep) and `grpo.steps` counts training steps only."""
    path = tmp_path / "exp.jsonl"
    verl_log(verl, path, {0: {"val-core/gsm8k/reward/mean@4": 0.25, "val-aux/num_turns/mean": 1.0}})
    run = Run(tmp_path, [VerlMetrics(path)])
    run.once()
    assert run.steps() == [0] and run.step_attrs(0)["grpo.metric.eval_metric/core/gsm8k/reward/mean@4"] == 0.25
    assert run.gauges("grpo.eval", "metric") == {"core/gsm8k/reward/mean@4": 0.25, "aux/num_turns/mean": 1.0}
    assert run.gauge("grpo.extra.val_core_gsm8k_reward_mean_4") is None  # no longer an extra
    assert run.gauge("grpo.step_index") is None and run.gauge("grpo.steps") is None
    verl_log(verl, path, {1: {"actor/pg_loss": 0.1}, 2: {"actor/pg_loss": 0.2, "val-core/gsm8k/reward/mean@4": 0.5}})
    run.once()
    assert run.steps() == [0, 1, 2]  # step 2's validation rides with its training values: a step
    assert run.gauge("grpo.steps") == 2 and run.gauge("grpo.step_index") == 2
    assert run.gauges("grpo.eval", "metric")["core/gsm8k/reward/mean@4"] == 0.5  # an evaluation metric there too
    assert run.gauge("grpo.loss.policy") == 0.2
