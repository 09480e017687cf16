"""Two real ranks (torchrun, gloo on CPU) running an instrumented TRL GRPOTrainer: rank 0 exports what
one process computes on the concatenated batch of both ranks; rank 1 exports nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from otel_grpo import signals
from expected import close, generation_stats, micro_batch_stats
from tests._support.process_group import run_two_ranks
from tests._support.tiny_trl import save_tiny_model
from tests.telemetry._receiver import OTLPReceiver, attrs

HERE = Path(__file__).parent


@pytest.mark.parametrize("per_device", [4, 2], ids=["whole-groups-per-rank", "groups-straddle-ranks"])
def test_two_ranks_equal_one_process_on_the_concatenated_batch(tmp_path, per_device):
    save_tiny_model(tmp_path / "model")  # once, before the ranks load it
    run_two_ranks(HERE / "trl_run.py", str(tmp_path), "max_steps=2", "num_iterations=2",
                  f"per_device_train_batch_size={per_device}", timeout=300, env={"HF_HUB_OFFLINE": "1"}, cwd=tmp_path)

    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    rank0, rank1 = (json.loads((tmp_path / f"exported{r}.json").read_text()) for r in (0, 1))
    assert rank0["exporting"] and not rank1["exporting"]
    assert rank1["steps"] == {} and rank1["samples"] == []

    from transformers import PreTrainedTokenizerFast

    eos = PreTrainedTokenizerFast.from_pretrained(tmp_path / "model").eos_token_id
    gens = [generation_stats([r["generations"][0] for r in ranks], [1.0, 0.5], ["reward_words", "reward_short"], 4, eos)]
    mbs = [m for r in ranks for m in r["micro_batches"] if m["step"] == 0]
    expected = dict(signals.reduce_stats(signals.Stats.merge(*gens, micro_batch_stats(mbs, (0.2, 0.2), 0.04))))
    got = rank0["steps"]["1"]
    for key in ("reward", "reward_std", "reward_p05", "reward_p50", "reward_group_std", "frac_reward_zero_std",
                "reward_fn_mean/reward_words", "advantage_std", "completion_length_mean", "completion_length_std",
                "distinct_1", "distinct_2", "entropy", "clip_ratio_region_mean", "policy_ratio_max", "approx_kl",
                "kl", "kl_k1", "kl_max", "kl_seq_mean"):
        assert close(got[key], expected[key]), (key, got[key], expected[key])
    assert got["samples"] == expected["samples"] == 2 * per_device  # 2 ranks; a rank without a group of its own adds none
    trl = rank0["log_history"][0]
    for trl_key, key in (("reward", "reward"), ("reward_std", "reward_std"), ("entropy", "entropy"),
                         ("completions/mean_length", "completion_length_mean"), ("loss", "loss")):
        assert close(got[key], trl[trl_key]), key
    # The step's selection ran over both ranks' rows: rank 0 exports rows of each, each once
    every = {(p, c, r) for r, rank in enumerate(ranks)
             for p, c in zip(rank["generations"][0]["prompts"], rank["generations"][0]["completions"])}
    rows = [(s["prompt"], s["completion"], s["source_rank"]) for s in rank0["samples"]]
    assert len(set(rows)) == len(rows) and set(rows) <= every
    assert {r for _, _, r in rows} == {0, 1}


def test_two_ranks_with_several_generation_batches_per_logged_step(tmp_path):
    """A logged step covering two generation batches (one group each, straddling the ranks) and
    their micro-batches: computed in one pass per rank, reduced once, equal to one process on
    every batch."""
    save_tiny_model(tmp_path / "model")
    run_two_ranks(HERE / "trl_run.py", str(tmp_path), "max_steps=2", "num_iterations=1", "logging_steps=2",
                  "per_device_train_batch_size=2", timeout=300, env={"HF_HUB_OFFLINE": "1"}, cwd=tmp_path)

    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    rank0 = json.loads((tmp_path / "exported0.json").read_text())
    # the first optimizer step reaches the step index only; the logged step 2 covers both steps
    assert set(rank0["steps"]) == {"1", "2"} and set(rank0["steps"]["1"]) == {"log_interval"} and all(len(r["generations"]) == 2 for r in ranks)
    from transformers import PreTrainedTokenizerFast

    eos = PreTrainedTokenizerFast.from_pretrained(tmp_path / "model").eos_token_id
    gens = [generation_stats([r["generations"][i] for r in ranks], [1.0, 0.5], ["reward_words", "reward_short"], 4,
                             eos) for i in (0, 1)]
    mbs = [m for r in ranks for m in r["micro_batches"]]
    expected = dict(signals.reduce_stats(signals.Stats.merge(*gens, micro_batch_stats(mbs, (0.2, 0.2), 0.04))))
    got = rank0["steps"]["2"]
    for key in ("reward", "reward_std", "reward_p50", "reward_group_std", "frac_reward_zero_std", "advantage_std",
                "completion_length_mean", "completion_length_std", "distinct_1", "distinct_2", "entropy",
                "clip_ratio_region_mean", "policy_ratio_max", "approx_kl", "kl", "kl_max", "kl_seq_mean"):
        assert close(got[key], expected[key]), (key, got[key], expected[key])
    assert got["samples"] == expected["samples"] == 2 * 2 * 2  # two batches of two rows on each of two ranks


@pytest.mark.parametrize("fail_at", ["capture", "stats"])
def test_a_capture_failure_on_one_rank_stops_capture_on_every_rank_and_training_finishes(tmp_path, fail_at):
    """Rank 1's capture breaks at its first generation batch, in the hook or when the logged step
    computes its stats: had rank 0 gone on reducing, it would wait in a collective that rank 1 never
    joins. Both stop together; TRL's logged values still export."""
    save_tiny_model(tmp_path / "model")
    done = run_two_ranks(HERE / "trl_run.py", str(tmp_path), "max_steps=3", "num_iterations=2",
                         "per_device_train_batch_size=4", "fail_rank=1", f'fail_at="{fail_at}"', timeout=300,
                         env={"HF_HUB_OFFLINE": "1"}, cwd=tmp_path)

    assert "injected capture failure" in done.stderr  # rank 1's one warning, with its traceback
    assert "failed on another rank" in done.stderr  # rank 0's
    rank0 = json.loads((tmp_path / "exported0.json").read_text())
    assert sorted(rank0["steps"]) == ["1", "2", "3"]  # every logged step
    for step in rank0["steps"].values():
        assert not {"reward_p50", "kl_max", "distinct_1"} & set(step)  # computed from tensors only: none
    logged = [e for e in rank0["log_history"] if "loss" in e]
    assert len(logged) == 3 and sum("reward" in e for e in logged) == 2  # two generation batches
    for entry in logged:  # TRL's own values, as TRL logged them
        got = rank0["steps"][str(entry["step"])]
        assert all(close(got[k], entry[t]) for t, k in (("loss", "loss"), ("reward", "reward")) if t in entry)
    assert rank0["samples"] == []


def test_two_ranks_with_the_telemetry_instrument_builds_export_once_from_a_child_process(tmp_path):
    """`instrument(trainer)` without a telemetry: rank 0's emits from its child process; rank 1 exports
    nothing and starts none. TRL's own cross-rank values arrive, with samples of both ranks."""
    save_tiny_model(tmp_path / "model")
    with OTLPReceiver() as rx:
        run_two_ranks(HERE / "trl_run.py", str(tmp_path), "max_steps=2", f"otlp={rx.port}", timeout=300,
                      env={"HF_HUB_OFFLINE": "1"}, cwd=tmp_path)
    rank0, rank1 = (json.loads((tmp_path / f"exported{r}.json").read_text()) for r in (0, 1))
    assert (rank0["emitter"], rank1["emitter"]) == ("ProcessSink", "NullSink")
    assert rank0["exporting"] and not rank1["exporting"]
    resources = {(a["grpo.rank"], a["grpo.world_size"]) for req in rx.traces for rs in req.resource_spans
                 for a in [attrs(rs.resource.attributes)]}
    assert resources == {(0, 2)}
    steps: dict[int, dict] = {}
    samples = []
    for span in rx.spans():
        a = attrs(span.attributes)
        if span.name == "grpo.step":
            steps.setdefault(a["grpo.step"], {}).update(a)
        elif span.name == "grpo.samples":
            samples += [attrs(e.attributes) for e in span.events]
    trl = {h["step"]: h for h in rank0["log_history"] if "reward" in h}
    assert sorted(trl) == [1, 2] and set(trl) <= set(steps)
    for step, logs in trl.items():
        for trl_key, key in (("reward", "reward"), ("entropy", "entropy"), ("completions/mean_length",
                                                                             "completion_length_mean")):
            assert close(steps[step][f"grpo.metric.{key}"], logs[trl_key]), (step, key)
    assert {s["source_rank"] for s in samples} == {0, 1}
