"""`instrument` on a real trl.GRPOTrainer: exported signals equal TRL's numbers where the definitions
coincide and our signals on TRL's own tensors where they do not; samples equal the completions."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd
import pytest

from otel_grpo import signals
from otel_grpo.integrations import OtelGrpoCallback, instrument
from otel_grpo.integrations.trl import _accumulate, _compat
from expected import as_logged_by_step, close, exported_as_logged, generation_stats, micro_batch_stats
from trl_run import exported, in_memory_telemetry, make_recording_trainer, metrics_by_name

NAMES, WEIGHTS = ["reward_words", "reward_short"], [1.0, 0.5]
# TRL key -> our stat key, where TRL's definition is ours (one micro-batch per logged step)
SAME_AS_TRL = {
    "reward": "reward", "reward_std": "reward_std", "frac_reward_zero_std": "frac_reward_zero_std",
    "rewards/reward_words/mean": "reward_fn_mean/reward_words", "rewards/reward_short/std": "reward_fn_std/reward_short",
    "completions/mean_length": "completion_length_mean", "completions/max_length": "completion_length_max",
    "completions/clipped_ratio": "completions_clipped_ratio", "entropy": "entropy", "loss": "loss",
    "clip_ratio/low_mean": "clip_ratio_low_mean", "clip_ratio/high_mean": "clip_ratio_high_mean",
    "clip_ratio/region_mean": "clip_ratio_region_mean", "kl": "trl_kl", "grad_norm": "grad_norm",
    "learning_rate": "learning_rate", "num_tokens": "num_tokens", "epoch": "epoch",
}


def run(tmp_path: Path, sampling: bool = False, **config):
    trainer = make_recording_trainer(tmp_path / "train", sampling=sampling, model_dir=tmp_path / "model", **config)
    tel, reader, exporter = in_memory_telemetry(tmp_path / "telemetry")
    assert instrument(trainer, telemetry=tel) is tel
    trainer.train()
    metrics = metrics_by_name(reader)
    return trainer, exported(exporter), metrics


def expected_for(trainer, step: int, logging_steps: int, sampling=None) -> dict[str, float]:
    """Our signals on the tensors TRL produced during the steps a logged step covers."""
    lo = step - logging_steps
    gens = [g for g in trainer.records["generations"] if lo <= g["step"] < step]
    mbs = [m for m in trainer.records["micro_batches"] if lo <= m["step"] < step]
    eos = trainer.processing_class.eos_token_id
    parts = [generation_stats([g], WEIGHTS, NAMES, trainer.num_generations, eos, sampling) for g in gens]
    parts += [micro_batch_stats(mbs, (trainer.epsilon_low, trainer.epsilon_high), trainer.beta)]
    return dict(signals.reduce_stats(signals.Stats.merge(*parts)))


def test_one_process_equals_trl_and_tensors(tmp_path):
    trainer, out, metrics = run(tmp_path, max_steps=4, num_iterations=2, log_completions=True)
    steps = {int(k): v for k, v in out["steps"].items()}
    assert sorted(steps) == [1, 2, 3, 4]
    for must in ("reward", "reward_p05", "reward_p95", "reward_group_std", "advantage_std", "completion_length_std",
                 "distinct_1", "distinct_2", "clip_ratio_low_min", "policy_ratio_max", "approx_kl", "kl", "kl_k1",
                 "kl_max", "kl_seq_mean", "trl_kl", "entropy", "loss", "grad_norm", "learning_rate", "beta",
                 "num_tokens", "epoch", "step"):
        assert must in steps[1], must
    assert "reward" not in steps[2]  # the reused generation batch is not counted twice
    logged = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    for step, trl_logs in logged.items():
        for trl_key, key in SAME_AS_TRL.items():
            if trl_key in trl_logs:
                assert close(steps[step][key], trl_logs[trl_key]), (step, trl_key, steps[step][key], trl_logs[trl_key])
        expected = expected_for(trainer, step, 1)
        for key in ("kl", "kl_k1", "kl_max", "kl_seq_mean", "approx_kl", "policy_ratio_mean", "reward_p50",
                    "reward_group_std", "advantage_mean", "distinct_2", "completion_length_std"):
            if key in expected:
                assert close(steps[step][key], expected[key]), (step, key)
        # TRL's kl is bias-corrected k3; grpo.kl is plain k3, so they differ once the policy moved
    assert steps[4]["trl_kl"] != steps[4]["kl"]
    assert steps[4]["beta"] == 0.04 and steps[3]["num_tokens"] > steps[2]["num_tokens"] > 0
    assert steps[3]["tokens_per_second"] > 0 and steps[2]["tokens_per_second"] == 0  # step 2 reuses the batch

    # no grpo.extra.* from TRL's own keys; the run is marked finished
    assert not [n for n in metrics if n.startswith("grpo.extra.")]
    assert metrics["grpo.run.finished"].data.data_points[0].value == 1.0
    assert {"rollout", "reward", "reward.reward_words", "reward.reward_short", "reference", "update"} <= {
        p for p, _ in out["phases"]}

    # samples: the completions TRL generated, each once (TRL's parquet repeats a reused batch)
    parquet = pd.concat(pd.read_parquet(p) for p in sorted((tmp_path / "train" / "completions").glob("*.parquet")))
    generated = {(r.prompt, r.completion, round(r.reward_words, 6), round(r.reward_short, 6), round(r.advantage, 5))
                 for r in parquet.itertuples()}
    rows = [(s["prompt"], s["completion"], round(s["reward.reward_words"], 6), round(s["reward.reward_short"], 6),
             round(s["advantage"], 5)) for s in out["samples"]]
    assert len(rows) == len(set(rows)) == 2 * 4 == len(parquet) // 2
    assert set(rows) == generated
    for s in out["samples"]:
        assert close(s["reward"], s["reward.reward_words"] + 0.5 * s["reward.reward_short"])
        assert s["completion_length"] >= 1 and s["group"] == 0 and s["policy_version"] in (0, 2)
    spilled = [json.loads(line) for f in (tmp_path / "telemetry" / "samples").glob("*.jsonl") for line in f.open()]
    assert len(spilled) == len(rows)


def test_accumulation_and_logging_steps_are_exact(tmp_path):
    trainer, out, metrics = run(tmp_path, max_steps=4, num_iterations=2, gradient_accumulation_steps=2,
                                logging_steps=2)
    steps = {int(k): v for k, v in out["steps"].items()}
    # the first optimizer step reaches the step index (a hang before it pages); its stats go with step 2's
    assert set(steps.pop(1)) == {"log_interval"} and sorted(steps) == [2, 4]
    trl = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    for step in (2, 4):
        expected = expected_for(trainer, step, 2)
        for key in ("reward", "reward_std", "reward_p50", "reward_group_std", "advantage_std", "completion_length_mean",
                    "completion_length_std", "distinct_1", "entropy", "clip_ratio_low_mean", "clip_ratio_high_mean",
                    "clip_ratio_region_mean", "clip_ratio_high_max", "policy_ratio_min", "policy_ratio_max",
                    "approx_kl", "kl", "kl_max", "kl_seq_mean"):
            assert close(steps[step][key], expected[key]), (step, key, steps[step][key], expected[key])
        assert close(steps[step]["loss"], trl[step]["loss"])

    # Issue 62: beside our exact values, every number TRL logged (W&B's), exactly as logged, at its step
    # (each logged step's spans, the end-of-training summary's included) and as the gauges serve them now
    logged = as_logged_by_step(trainer.state.log_history)
    assert exported_as_logged(steps) == logged and {"kl", "clip_ratio/high_max", "total_flos"} <= set(logged[4])
    served = {p.attributes["metric"]: p.value for p in metrics["grpo.trl.logged"].data.data_points}
    assert served == logged[4]
    # the KL step check judges the exact grpo.kl once per logged step, neither TRL's kl nor its logged one too
    (point,) = metrics["grpo.step.kl"].data.data_points
    assert point.count == 2 and point.sum == pytest.approx(steps[2]["kl"] + steps[4]["kl"])
    # every generation batch's rows arrive once, none lost between logged steps
    generated = [(p, c) for g in trainer.records["generations"] for p, c in zip(g["prompts"], g["completions"])]
    rows = [(s["prompt"], s["completion"]) for s in out["samples"]]
    assert len(trainer.records["generations"]) == 2 and sorted(rows) == sorted(generated)


@pytest.mark.parametrize("fold_bytes", [_accumulate.FOLD_BYTES, 1], ids=["at-the-logged-step", "one-by-one"])
def test_batches_of_different_lengths_in_one_logged_step_are_exact(tmp_path, monkeypatch, fold_bytes):
    """A logged step's generation batches and micro-batches get their stats in one pass over their
    concatenation (padded to the longest), or one by one when little memory may be held: the
    values are ours on the concatenated tensors either way."""
    monkeypatch.setattr(_accumulate, "FOLD_BYTES", fold_bytes)
    trainer, out, _ = run(tmp_path, max_steps=6, num_iterations=1, logging_steps=3, max_completion_length=32)
    steps = {int(k): v for k, v in out["steps"].items()}
    assert set(steps.pop(1)) == {"log_interval"} and sorted(steps) == [3, 6]
    for step in (3, 6):
        widths = {g["completion_ids"].shape[1] for g in trainer.records["generations"] if step - 3 <= g["step"] < step}
        assert len(widths) > 1, widths  # the batches really differ in length
        expected = expected_for(trainer, step, 3)
        for key in ("reward", "reward_p50", "reward_group_std", "advantage_std", "completion_length_mean",
                    "completion_length_std", "terminated_length_mean", "distinct_1", "distinct_2", "entropy",
                    "clip_ratio_region_mean", "policy_ratio_max", "approx_kl", "kl", "kl_max", "kl_seq_mean",
                    "kl_by_length/le_64"):
            assert close(steps[step][key], expected[key]), (step, key, steps[step][key], expected[key])
    assert len(out["samples"]) == 6 * trainer.args.per_device_train_batch_size
    # TRL's completions/max_length is the mean of each generation batch's maximum (docs/signals.md: differs):
    # ours is the window's maximum, TRL's number is there as logged
    trl = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    for step in (3, 6):
        maxima = [float(g["completion_mask"].sum(1).max()) for g in trainer.records["generations"]
                  if step - 3 <= g["step"] < step]
        assert close(trl[step]["completions/max_length"], sum(maxima) / len(maxima))
        assert steps[step]["completion_length_max"] == max(maxima)
        assert steps[step]["trl_logged/completions/max_length"] == trl[step]["completions/max_length"]


def test_sampling_logprobs_give_mismatch_and_rollout_is(tmp_path):
    trainer, out, _ = run(tmp_path, sampling=True, max_steps=2, num_iterations=2)
    args = trainer.args
    threshold = (args.vllm_importance_sampling_clip_min or 0.0, args.vllm_importance_sampling_clip_max)
    assert args.vllm_importance_sampling_mode == "sequence_mask"
    expected = expected_for(trainer, 1, 1, sampling=("sequence", "mask", threshold))
    got = out["steps"]["1"]
    for key in ("mismatch_kl", "mismatch_k3_kl", "mismatch_log_ppl_abs_diff", "mismatch_logprob_abs_diff_max",
                "is_ratio_mean", "is_ratio_max", "mismatch_chi2_seq", "rollout_is_mean", "rollout_is_eff_sample_size",
                "rollout_is_seq_masked_fraction"):
        assert close(got[key], expected[key]), key
    gen = trainer.records["generations"][0]
    m = gen["completion_mask"].bool()
    assert close(got["trl_is_ratio_mean"], gen["importance_sampling_ratio"][m].double().mean().item())
    assert close(got["trl_is_ratio_max"], gen["importance_sampling_ratio"][m].max().item())
    assert got["trl_is_ratio_max"] < 1.11 < got["is_ratio_max"]  # after TRL's correction vs raw


def test_outside_the_supported_range_warns_once_and_exports_logged_values(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(_compat, "SUPPORTED_TRL", ">=99")
    with caplog.at_level(logging.WARNING, logger="otel_grpo.integrations.trl"):
        trainer, out, metrics = run(tmp_path, max_steps=2)
    warnings = [r for r in caplog.records if r.name == "otel_grpo.integrations.trl"]
    assert len(warnings) == 1 and "outside the supported range" in warnings[0].getMessage()
    steps = {int(k): v for k, v in out["steps"].items()}
    trl_logs = trainer.state.log_history[0]
    assert close(steps[1]["trl_kl"], trl_logs["kl"]) and "kl" not in steps[1]
    assert close(steps[1]["reward"], trl_logs["reward"])
    assert "train_runtime" in steps[2] and "grpo.train.runtime_seconds" not in metrics  # OTel name below
    assert "grpo.train.runtime" in metrics and "grpo.epoch" in metrics
    # as the log history has it: transformers' printer (disable_tqdm) pops it from the dict callbacks get
    assert "total_flos" in trainer.state.log_history[-1] and "grpo.train.total_flos" in metrics
    assert not [n for n in metrics if n.startswith("grpo.extra.")]


def test_compat_finds_keys_trl_no_longer_uses_in_its_source():
    from otel_grpo.integrations.trl._capture import KEYS, RETURNS
    from otel_grpo.integrations.trl._compat import _changed_parameters, _keys_not_in_source, _returns_at

    for method, keys in KEYS.items():  # what _capture reads is in the installed TRL
        assert _keys_not_in_source(method, keys) == [], method
    assert _keys_not_in_source("_compute_loss", ("completion_mask", "renamed_mask")) == ["renamed_mask"]
    for method, (position, name) in RETURNS.items():  # and returned where _capture reads it
        assert _returns_at(method, position, name), method
    assert not _returns_at("_generate", RETURNS["_generate"][0] + 1, "tool_mask")  # a reordered tuple is found
    assert _changed_parameters(lambda model, batch: None, ("model", "inputs")) == ["inputs"]
    assert _changed_parameters(lambda model, **kw: None, ("model", "inputs")) == []


def test_callback_maps_trl_keys_none_and_eval(tmp_path):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    tel, reader, _ = in_memory_telemetry(tmp_path)
    callback = OtelGrpoCallback(tel)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    callback.on_log(args, TrainerState(global_step=3), TrainerControl(),
                    logs={"reward": None, "kl": float("nan"), "rewards/fmt/mean": 1.0, "my_metric": 2.0})
    # transformers logs an evaluation apart: a log with `eval_` keys is an evaluation's, every key of it
    callback.on_log(args, TrainerState(global_step=3), TrainerControl(),
                    logs={"eval_reward": 0.5, "eval_loss": 1.5, "epoch": 1.0})
    tel.flush()
    metrics = metrics_by_name(reader)
    nonfinite = {p.attributes["signal"]: p.value for p in metrics["grpo.nonfinite"].data.data_points}
    assert nonfinite == {"reward": 1, "trl_kl": 1, "loss": 0, "grad_norm": 0}  # the last two: from the start
    assert {p.attributes["metric"]: p.value for p in metrics["grpo.eval"].data.data_points} == {
        "reward": 0.5, "loss": 1.5}
    assert [p.attributes["reward_fn"] for p in metrics["grpo.reward_fn.mean"].data.data_points] == ["fmt"]
    assert "grpo.extra.my_metric" in metrics  # a user's own key stays an extra
    assert [p.value for p in metrics["grpo.epoch"].data.data_points] == [1.0]  # the trainer's state
    tel.shutdown()


def test_a_crash_shuts_down_without_finishing(tmp_path):
    from trl_run import recording_class

    class Failing(recording_class()):
        def _calculate_rewards(self, *args, **kwargs):
            if self.state.global_step == 1:
                raise RuntimeError("reward server down")
            return super()._calculate_rewards(*args, **kwargs)

    from tests._support.tiny_trl import make_grpo_trainer

    trainer = make_grpo_trainer(tmp_path / "train", trainer_class=Failing, model_dir=tmp_path / "model", max_steps=3)
    trainer.records = {"generations": [], "micro_batches": []}
    tel, reader, _ = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    with pytest.raises(RuntimeError, match="reward server down"):
        trainer.train()
    assert tel._closed
    points = {name: m.data.data_points[-1].value for name, m in metrics_by_name(reader).items()
              if name in ("grpo.reward.mean", "grpo.run.finished")}
    assert "grpo.reward.mean" in points and points.get("grpo.run.finished") == 0  # a crash is not a finish


def test_ctrl_c_finishes_the_run(tmp_path):
    from trl_run import recording_class

    class Interrupted(recording_class()):
        def _calculate_rewards(self, *args, **kwargs):
            if self.state.global_step == 1:
                raise KeyboardInterrupt
            return super()._calculate_rewards(*args, **kwargs)

    from tests._support.tiny_trl import make_grpo_trainer

    trainer = make_grpo_trainer(tmp_path / "train", trainer_class=Interrupted, model_dir=tmp_path / "model", max_steps=3)
    trainer.records = {"generations": [], "micro_batches": []}
    tel, reader, _ = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    metrics = metrics_by_name(reader)
    assert tel._closed and metrics["grpo.run.finished"].data.data_points[0].value == 1.0


def test_a_reward_function_without_values_is_counted_nonfinite(tmp_path):
    from trl_run import recording_class

    class NoShortReward(recording_class()):
        def _calculate_rewards(self, *args, **kwargs):
            rewards = super()._calculate_rewards(*args, **kwargs)
            rewards[:, 1] = float("nan")  # as when reward_short returns None for every completion
            return rewards

    from tests._support.tiny_trl import make_grpo_trainer

    trainer = make_grpo_trainer(tmp_path / "train", trainer_class=NoShortReward, model_dir=tmp_path / "model",
                                max_steps=1)
    trainer.records = {"generations": [], "micro_batches": []}
    tel, reader, exporter = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    trainer.train()
    assert trainer.state.log_history[0]["rewards/reward_short/mean"] is None  # TRL's all-NaN mean
    metrics = metrics_by_name(reader)
    nonfinite = {(p.attributes["signal"]): p.value for p in metrics["grpo.nonfinite"].data.data_points}
    assert nonfinite == {"reward_fn_mean/reward_short": 1, "reward_fn_std/reward_short": 1, "loss": 0,
                         "grad_norm": 0}
    assert "reward_fn_mean/reward_words" in exported(exporter)["steps"]["1"]
