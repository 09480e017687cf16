"""What a relaunched job's records claim, from `Telemetry` through OTLP into a real sidecar on both backends.

A resumed job evaluates at its checkpoint's step before it trains on (verl's `val_before_train`, on by default;
transformers' `eval_on_start`): that step ran once, by the crashed attempt, and must keep its training values and
samples beside the relaunch's evaluation.
"""

from __future__ import annotations

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
RUN = "claims"


def _telemetry(url: str, tmp_path, name: str, monkeypatch) -> Telemetry:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{url}/v1/traces")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    return Telemetry(TelemetrySettings(run_id=RUN, output_dir=tmp_path / name, metrics_exporters=["none"],
                                       traces_exporters=["otlp"]))


def _train(tel: Telemetry, steps, tag: str) -> None:
    for step in steps:
        with tel.step(step) as s:
            s.record({"reward": 0.1 * step, "kl": 0.01 * step})
            s.samples([{"prompt": "p", "completion": f"{tag}-{step}-{i}", "reward": 0.1 * step} for i in range(4)],
                      group_size=4)


def _step(url: str, number: int) -> dict:
    rows = httpx.get(f"{url}/api/runs/{RUN}/steps", timeout=10).json()
    return next((r for r in rows if r["step"] == number), {})


def _completions(url: str, number: int) -> list[str]:
    rows = httpx.get(f"{url}/api/runs/{RUN}/samples", params={"step": number, "limit": 100}, timeout=10)
    return sorted(r["completion"] for r in rows.json()) if rows.status_code == 200 else []


def test_an_evaluation_at_the_resumed_steps_checkpoint_keeps_that_steps_training(sidecar_factory, db, tmp_path,
                                                                                 monkeypatch):
    sidecar = sidecar_factory(db=db)

    def step(number: int) -> dict:
        return _step(sidecar.url, number)

    def completions(number: int) -> list[str]:
        return _completions(sidecar.url, number)

    crashed = _telemetry(sidecar.url, tmp_path, "a", monkeypatch)
    _train(crashed, range(1, 6), "first")
    assert crashed.flush(10)
    crashed.shutdown()  # crashed after step 5; its last checkpoint: step 3
    wait_for(lambda: len(completions(5)) == 4, "the crashed attempt's steps stored", timeout=30)

    resumed = _telemetry(sidecar.url, tmp_path, "b", monkeypatch)
    resumed.log_metrics(3, {"val-core/acc": 0.5}, source="verl", evaluation=True)  # before its first step
    _train(resumed, range(4, 6), "second")
    resumed.finish()
    wait_for(lambda: completions(5) == [f"second-5-{i}" for i in range(4)], "the relaunch's step 5", timeout=30)
    wait_for(lambda: step(3).get("grpo.eval/core/acc") == 0.5, "the evaluation stored at step 3", timeout=30)

    three = step(3)
    assert three["grpo.reward.mean"] == pytest.approx(0.3) and three["grpo.kl"] == pytest.approx(0.03)
    assert completions(3) == [f"first-3-{i}" for i in range(4)]  # trained once, by the crashed attempt
    assert completions(4) == [f"second-4-{i}" for i in range(4)]  # trained again: the relaunch's only


def test_a_relaunchs_evaluation_rows_at_its_checkpoints_step_are_stored_beside_that_steps_training(
        sidecar_factory, db, tmp_path, monkeypatch):
    """The relaunch (spilling into the crashed attempt's output dir) evaluates with sample rows at its checkpoint's
    step 3 before it trains on: its rows, numbered from 0 as the crashed attempt's training rows of step 3 were,
    are stored beside those, each once; `otel-grpo replay` of the spill, which holds both attempts' rows of step 3,
    changes nothing."""
    from tests._support.replay import replay_spill

    sidecar = sidecar_factory(db=db)
    crashed = _telemetry(sidecar.url, tmp_path, "run", monkeypatch)
    _train(crashed, range(6), "first")
    assert crashed.flush(10)
    crashed.shutdown()
    resumed = _telemetry(sidecar.url, tmp_path, "run", monkeypatch)
    with resumed.logged_step(3, evaluation=True) as s:
        s.samples([{"prompt": "q", "completion": f"eval-3-{i}", "reward": 1.0} for i in range(4)], group_size=4)
    _train(resumed, range(4, 6), "second")
    resumed.finish()
    expected = sorted([f"first-3-{i}" for i in range(4)] + [f"eval-3-{i}" for i in range(4)])
    wait_for(lambda: _completions(sidecar.url, 5) == [f"second-5-{i}" for i in range(4)], "the relaunch's step 5",
             timeout=30)
    wait_for(lambda: _completions(sidecar.url, 3) == expected, "both attempts' rows of step 3", timeout=30)
    count = httpx.get(f"{sidecar.url}/api/runs/{RUN}", timeout=10).json()["sample_count"]
    assert count == 6 * 4 + 4
    replay_spill(sidecar.url, tmp_path / "run")
    assert _completions(sidecar.url, 3) == expected
    assert _completions(sidecar.url, 4) == [f"second-4-{i}" for i in range(4)]
    assert httpx.get(f"{sidecar.url}/api/runs/{RUN}", timeout=10).json()["sample_count"] == count


def test_steps_run_again_in_the_same_process_after_new_attempt_replace_the_failed_ones(sidecar_factory, db,
                                                                                      tmp_path, monkeypatch):
    """A notebook's `train()` fails at step 6 and a `train(resume_from_checkpoint=...)` in the same process runs
    steps 5-6 again (the TRL callbacks call `new_attempt()` at train begin): step 6 shows the re-run's
    completions and scalars only, none of the failed attempt's keys, and the gauges follow."""
    sidecar = sidecar_factory(db=db)
    tel = _telemetry(sidecar.url, tmp_path, "a", monkeypatch)

    def step(number: int) -> dict:
        return _step(sidecar.url, number)

    def completions(number: int) -> list[str]:
        return _completions(sidecar.url, number)

    try:
        _train(tel, range(1, 6), "first")
        with tel.step(6) as s:
            s.record({"reward": 12.0, "kl_max": 9.0})
            s.samples([{"prompt": "p", "completion": f"first-6-{i}", "reward": 1.0} for i in range(4)])
        assert tel.flush(10)
        wait_for(lambda: len(completions(6)) == 4, "the failed attempt's step 6", timeout=30)
        assert "grpo.kl.max" in step(6)
        first = tel.attempt
        assert tel.new_attempt() > first
        _train(tel, range(5, 7), "rerun")
        assert tel.flush(10)
        wait_for(lambda: completions(6) == [f"rerun-6-{i}" for i in range(4)], "the re-run's step 6", timeout=30)
        six = step(6)
        assert six["grpo.reward.mean"] == pytest.approx(0.6) and "grpo.kl.max" not in six
        assert completions(5) == [f"rerun-5-{i}" for i in range(4)]
        assert completions(4) == [f"first-4-{i}" for i in range(4)]
    finally:
        tel.finish()


def test_the_trl_callbacks_start_a_new_attempt_at_a_train_begin_after_training_steps(tmp_path):
    """The first train begin keeps the process's attempt (its start, which the job's other ranks share); one after
    a training step went out (train(resume_from_checkpoint=...) after a failed train()) starts a newer one. An
    evaluation alone claims nothing, so it does not call for one."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from otel_grpo.integrations.trl import OtelGrpoCallback

    tel = Telemetry(TelemetrySettings(run_id=RUN, output_dir=tmp_path, metrics_exporters=["none"],
                                      traces_exporters=["none"]))
    callback = OtelGrpoCallback(telemetry=tel)
    args, state, control = TrainingArguments(output_dir=str(tmp_path), report_to=[]), TrainerState(), TrainerControl()
    started = tel.attempt
    try:
        callback.on_train_begin(args, state, control)
        with tel.logged_step(0, evaluation=True) as s:  # eval_on_start
            s.record({"reward": 1.0})
        callback.on_train_begin(args, state, control)
        assert tel.attempt == started
        with tel.step(1) as s:
            s.record({"reward": 1.0})
        callback.on_train_begin(args, state, control)  # train(resume_from_checkpoint=...) after a failed train()
        assert tel.attempt > started
        failed = tel.attempt
        callback.on_train_begin(args, state, control)  # nothing trained under it yet: kept
        assert tel.attempt == failed
    finally:
        tel.finish()


def test_every_rank_exporting_keeps_rank_zeros_samples(sidecar_factory, tmp_path, monkeypatch):
    """`export_all_ranks`: each rank's Telemetry starts at its own instant, yet they are one attempt. Rank 0 sends
    the step's kept rows (the global selection's), rank 1 its step span alone: the rows stay."""
    sidecar = sidecar_factory()

    def completions(number: int) -> list[str]:
        return _completions(sidecar.url, number)

    settings = _telemetry(sidecar.url, tmp_path, "ranks", monkeypatch)
    settings.shutdown()
    settings = settings.settings.model_copy(update={"export_all_ranks": True, "sample_reduce": "per_rank"})
    monkeypatch.setenv("WORLD_SIZE", "2")
    ranks = []
    for rank in (0, 1):  # rank 1's starts later: a larger attempt
        monkeypatch.setenv("RANK", str(rank))
        ranks.append(Telemetry(settings.model_copy(update={"output_dir": tmp_path / f"rank{rank}"})))
    zero, one = ranks
    assert (zero.rank, one.rank) == (0, 1)
    try:
        for step in (1, 2):
            with zero.step(step) as s:
                s.record({"reward": 0.5})
                s.samples([{"prompt": "p", "completion": f"zero-{step}-{i}", "reward": 0.5} for i in range(4)])
            assert zero.flush(10)
            wait_for(lambda: len(completions(step)) == 4, f"rank 0's step {step}", timeout=30)
            with one.step(step) as s:
                s.record({"reward": 0.5, "from_rank_one": 1.0})
            assert one.flush(10)

        def rank_one_stored() -> bool:
            rows = httpx.get(f"{sidecar.url}/api/runs/{RUN}/steps", timeout=10).json()
            return sum(1 for r in rows if any("from_rank_one" in k for k in r)) == 2

        wait_for(rank_one_stored, "rank 1's steps", timeout=30)
        assert completions(1) == [f"zero-1-{i}" for i in range(4)] and completions(2) == [f"zero-2-{i}" for i in range(4)]
    finally:
        zero.finish()
        one.finish()


def test_every_rank_exporting_through_a_relaunch_keeps_each_jobs_ranks_together(sidecar_factory, db, tmp_path,
                                                                              monkeypatch):
    """`export_all_ranks`, rank 1's Telemetry made before rank 0's (so its attempt is the smaller), and rank 1's
    records reaching the sidecar first: rank 0's claim of the step keeps rank 1's scalars. The relaunch resumes at
    step 2: its own rank 1's values replace the crashed job's there, and the crashed rank 1's steps 2 and 3, sent
    late, stay out of the relaunched run."""
    sidecar = sidecar_factory(db=db)

    def steps() -> dict[int, dict]:
        return {r["step"]: r for r in httpx.get(f"{sidecar.url}/api/runs/{RUN}/steps", timeout=10).json()}

    def rank_one(step: int):
        return next((v for k, v in steps().get(step, {}).items() if "from_rank_one" in k), None)

    base = _telemetry(sidecar.url, tmp_path, "base", monkeypatch)
    base.shutdown()
    monkeypatch.setenv("WORLD_SIZE", "2")

    def job(name: str) -> tuple[Telemetry, Telemetry]:
        ranks = {}
        for rank in (1, 0):  # rank 1 first: the smaller attempt
            monkeypatch.setenv("RANK", str(rank))
            ranks[rank] = Telemetry(base.settings.model_copy(update={
                "export_all_ranks": True, "sample_reduce": "per_rank", "output_dir": tmp_path / f"{name}{rank}"}))
        assert (ranks[0].rank, ranks[1].rank) == (0, 1) and ranks[1].attempt < ranks[0].attempt
        return ranks[0], ranks[1]

    def train(tel: Telemetry, step: int, reward: float, **extra: float) -> None:
        with tel.step(step) as s:
            s.record({"reward": reward, **extra})
        assert tel.flush(10)

    zero, one = job("crashed")
    try:
        train(one, 1, 0.5, from_rank_one=1.0)
        wait_for(lambda: rank_one(1) == 1.0, "rank 1's step 1", timeout=30)
        for step in (1, 2, 3):
            train(zero, step, 0.1 * step)
        wait_for(lambda: 3 in steps(), "rank 0's step 3", timeout=30)
        assert rank_one(1) == 1.0, "rank 0's first claim of step 1 emptied rank 1's scalars"
        again_zero, again_one = job("relaunch")
        try:
            train(again_zero, 2, 0.9)
            wait_for(lambda: 3 not in steps() and 2 in steps() and rank_one(2) is None,
                     "the relaunch's step 2, the crashed step 3 retired", timeout=30)
            train(again_one, 2, 2.0, from_rank_one=2.0)
            wait_for(lambda: rank_one(2) == 2.0, "the relaunch's rank 1 at step 2", timeout=30)
            for step in (2, 3):  # the crashed job's rank 1, late
                train(one, step, 0.3, from_rank_one=1.0)
            train(again_zero, 4, 1.0)
            wait_for(lambda: 4 in steps(), "the relaunch's step 4", timeout=30)
            assert sorted(steps()) == [1, 2, 4] and rank_one(1) == 1.0 and rank_one(2) == 2.0
        finally:
            again_zero.finish()
            again_one.finish()
    finally:
        zero.finish()
        one.finish()
