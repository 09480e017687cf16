"""Absent is absent on a real TRL GRPOTrainer, through `instrument` and `OtelGrpoCallback`: at each logged step the
gauges serve that step's values only.

num_iterations=2 with logging_steps=1: steps 2 and 4 reuse the batch generated at steps 1 and 3, and TRL logs no
reward or length there. From step 3 on every completion runs to the length limit (EOS suppressed until then), so
the terminated lengths are undefined at step 3 (TRL logs 0.0 for them), and the reward function `reward_short`
returns None for every completion of step 3 (TRL logs None).
"""

from __future__ import annotations

import math

import pytest
from opentelemetry.sdk.metrics.export import Gauge
from transformers import TrainerCallback

from otel_grpo.integrations import OtelGrpoCallback, instrument
from otel_grpo.integrations.trl._keys import map_logs
from tests._support.tiny_trl import make_grpo_trainer
from expected import as_logged
from trl_run import in_memory_telemetry, metrics_by_name, recording_class

MAX_LEN = 8
PER_GENERATION = ("grpo.reward.mean", "grpo.reward_fn.mean", "grpo.completion.length.mean",
                  "grpo.completion.clipped_ratio")
TERMINATED = ("grpo.completion.terminated_length.mean", "grpo.completion.terminated_length.min",
              "grpo.completion.terminated_length.max")


class _Snapshots(TrainerCallback):
    """After our callback's `on_log`: what the metric reader serves, per logged step (training logs only)."""

    def __init__(self, trainer, tel, reader) -> None:
        self.trainer, self.tel, self.reader, self.seen = trainer, tel, reader, {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            assert self.tel.flush(10)
            self.seen[state.global_step] = {name: {tuple(sorted(p.attributes.items())): p.value
                                                   for p in m.data.data_points}
                                            for name, m in metrics_by_name(self.reader).items()
                                            if isinstance(m.data, Gauge)}

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:  # the generation at step 3: no completion ends before the limit
            self.trainer.generation_config.min_new_tokens = MAX_LEN


def _trainer(tmp_path):
    class NoShortRewardAtStep3(recording_class()):
        def _calculate_rewards(self, *args, **kwargs):
            rewards = super()._calculate_rewards(*args, **kwargs)
            if self.state.global_step == 2:  # generating for step 3
                rewards[:, 1] = float("nan")  # as when reward_short returns None for every completion
            return rewards

    trainer = make_grpo_trainer(tmp_path / "train", trainer_class=NoShortRewardAtStep3, model_dir=tmp_path / "model",
                                max_steps=4, num_iterations=2, max_completion_length=MAX_LEN)
    trainer.records = {"generations": [], "micro_batches": []}
    return trainer


@pytest.mark.parametrize("path", ["instrument", "callback"])
def test_a_step_serves_only_its_own_values(tmp_path, path):
    trainer = _trainer(tmp_path)
    tel, reader, _ = in_memory_telemetry(tmp_path / "telemetry")
    if path == "instrument":
        instrument(trainer, telemetry=tel)
    else:
        trainer.add_callback(OtelGrpoCallback(tel))
    snapshots = _Snapshots(trainer, tel, reader)
    trainer.add_callback(snapshots)
    trainer.train()
    logged = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    assert "reward" in logged[1] and "reward" not in logged[2] and "completions/mean_length" not in logged[2]
    assert logged[3]["completions/clipped_ratio"] == 1.0 and logged[3]["completions/mean_terminated_length"] == 0.0
    assert logged[1]["completions/clipped_ratio"] < 1.0, "step 1 needs a terminated completion to show a change"
    seen = snapshots.seen
    assert sorted(seen) == [1, 2, 3, 4]
    for name in PER_GENERATION + TERMINATED:
        assert seen[1].get(name), f"{name} not served at step 1"
    for step in (2, 4):  # second iteration: no reward, no length logged, none served
        assert [name for name in PER_GENERATION + TERMINATED if seen[step].get(name)] == [], step
        assert seen[step]["grpo.trl.kl"] and seen[step]["grpo.step_index"] == {(("run_id", "trl-test"),): step}
    assert all(seen[3].get(name) for name in PER_GENERATION)
    assert [name for name in TERMINATED if seen[3].get(name)] == []  # undefined, not TRL's 0.0 nor step 1's
    assert list(seen[3]["grpo.completion.clipped_ratio"].values()) == [1.0]
    assert logged[3]["rewards/reward_short/mean"] is None
    assert {dict(k)["reward_fn"] for k in seen[1]["grpo.reward_fn.mean"]} == {"reward_words", "reward_short"}
    assert {dict(k)["reward_fn"] for k in seen[3]["grpo.reward_fn.mean"]} == {"reward_words"}
    # TRL's numbers as logged: each step serves exactly its own log (not step 1's reward at step 2; TRL's 0.0
    # terminated lengths at step 3, as W&B shows them; no reward_short mean there, which TRL logged as None)
    for step, entry in logged.items():
        served = {dict(k)["metric"]: v for k, v in seen[step]["grpo.trl.logged"].items()}
        assert served == as_logged(entry), step
    assert "rewards/reward_short/mean" not in as_logged(logged[3])


def test_trl_s_zero_for_lengths_no_completion_has_is_left_out():
    every = {"completions/clipped_ratio": 1.0, "completions/mean_terminated_length": 0.0,
             "completions/min_terminated_length": 0.0, "completions/max_terminated_length": 0.0,
             "eval_completions/clipped_ratio": 1.0, "eval_completions/mean_terminated_length": 0.0}
    assert map_logs(every) == {"completions_clipped_ratio": 1.0, "eval_metric/completions/clipped_ratio": 1.0}
    some = {"completions/clipped_ratio": 0.75, "completions/mean_terminated_length": 3.0}
    assert map_logs(some) == {"completions_clipped_ratio": 0.75, "terminated_length_mean": 3.0,
                              "trl_logged/completions/clipped_ratio": 0.75,
                              "trl_logged/completions/mean_terminated_length": 3.0}
    # as logged, TRL's 0.0 is what TRL logged (W&B shows it): kept there, for a training step's log; a None
    # (NaN) has no as-logged value, only the signal's NaN, which the emitter counts in grpo.nonfinite
    training = {k: v for k, v in every.items() if not k.startswith("eval_")}
    mapped = map_logs({**training, "reward": None})
    assert math.isnan(mapped.pop("reward"))
    assert mapped == {"completions_clipped_ratio": 1.0, **{f"trl_logged/{k}": v for k, v in training.items()}}
