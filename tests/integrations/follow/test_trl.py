"""`otel-grpo follow --trl-output` on what a real `trl.GRPOTrainer` wrote: completions parquet and trainer state."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from otel_grpo._stop_request import StopRequest
from otel_grpo.integrations.follow import JsonlStream, TrlOutput
from expected import as_logged_by_step, exported_as_logged
from tests._support.waiting import wait_for
from tests.sidecar.conftest import free_port

from .conftest import FollowProcess
from .test_files import Run

STEPS = 4
WRITER = Path(__file__).with_name("trl_writer.py")


def _train(tmp_path_factory, mode: str) -> Path:
    pytest.importorskip("trl")
    out = tmp_path_factory.mktemp("trl") / "grpo-run"
    _write(out, STEPS, mode)
    return out


def _write(out: Path, steps: int, mode: str, *options: str, tag: str = "extra", code: int = 0) -> None:
    """trl_writer.py: a real TRL job writing into `out`, to its end (or its exit code `code`: 17, a crash)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_WRITER_TAG": tag}
    done = subprocess.run([sys.executable, str(WRITER), str(out), str(steps), mode, *options], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == code, done.stderr[-3000:]


@pytest.fixture(scope="module")
def trl_output(tmp_path_factory) -> Path:
    return _train(tmp_path_factory, "checkpoint")


@pytest.fixture(scope="module")
def trl_summary(tmp_path_factory) -> Path:
    """No checkpoint; `trainer.save_state()` after training (the summary) and an evaluation before step 1."""
    return _train(tmp_path_factory, "save_state")


def test_trl_completions_become_samples_once_per_generation_batch(tmp_path, trl_output):
    run = Run(tmp_path, [TrlOutput(trl_output, reward_weights=[1.0, 0.5])])
    assert run.follower.run(StopRequest()) is True  # checkpoint-4: global_step reached max_steps
    run.tel.finish()
    # the exit line's "N steps emitted": each step once, though its samples and scalars went out apart
    assert run.follower.emitted == STEPS
    spans = run.spans.get_finished_spans()
    by_step: dict[int, list[dict]] = {}
    for s in spans:
        if s.name == "grpo.samples":
            by_step.setdefault(s.attributes["grpo.step"], []).extend(dict(e.attributes) for e in s.events)
    # steps 2 and 4 reuse the batch generated for steps 1 and 3: TRL's files repeat it, we do not
    assert sorted(by_step) == [1, 3] and all(len(rows) == 8 for rows in by_step.values())
    import pyarrow.parquet as pq

    written = pq.read_table(trl_output / "completions" / "completions_00001.parquet").to_pylist()
    for event in by_step[1]:
        source = written[event["sample_index"]]
        assert event["prompt"] == source["prompt"] and event["completion"] == source["completion"]
        assert event["reward.reward_words"] == source["reward_words"]
        assert event["reward"] == pytest.approx(source["reward_words"] + 0.5 * source["reward_short"])
        assert event["advantage"] == pytest.approx(source["advantage"])
    # TRL's logged scalars (from the checkpoint's log_history) resolve through the catalog with source
    # "trl": TRL's kl is its bias-corrected grpo.trl.kl, as through instrument(), never the plain k3 grpo.kl
    scalar_steps = [s.attributes for s in spans if s.name == "grpo.step" and "grpo.metric.trl_kl" in s.attributes]
    assert sorted(a["grpo.step"] for a in scalar_steps) == [1, 2, 3, 4]
    assert not any("grpo.metric.kl" in s.attributes for s in spans)
    # and every number of each logged step exactly as TRL logged it (W&B's), as instrument exports it
    history = json.loads((trl_output / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    steps: dict[int, dict] = {}
    for a in (s.attributes for s in spans if s.name == "grpo.step"):
        steps.setdefault(a["grpo.step"], {}).update({k[len("grpo.metric."):]: v for k, v in a.items()
                                                     if k.startswith("grpo.metric.")})
    assert exported_as_logged(steps) == as_logged_by_step(history)
    assert run.gauge("grpo.steps") == 4  # each TRL step once, though steps 1 and 3 went out twice
    assert run.gauge("grpo.run.finished") == 1.0


def test_trl_files_without_an_end_stay_live(tmp_path, trl_output):
    """The parquet files alone (the job died before its last checkpoint): samples go out, the run is not finished."""
    partial = tmp_path / "crashed"
    shutil.copytree(trl_output / "completions", partial / "completions")
    run = Run(tmp_path, [TrlOutput(partial)])
    stop = StopRequest()
    threading.Timer(1.0, stop.request).start()
    assert run.follower.run(stop) is False
    run.tel.shutdown()
    assert {s.attributes["grpo.step"] for s in run.spans.get_finished_spans() if s.name == "grpo.samples"} == {1, 3}
    assert run.gauge("grpo.run.finished") == 0  # exported 0 from the first step: not finished


def test_a_crashed_job_whose_every_log_holds_train_runtime_stays_live(tmp_path):
    """`include_num_input_tokens_seen` puts `train_runtime` in every training log: a job that crashed after step 3
    of 6 is no finished run for it (the summary alone holds `train_loss`), and its logged steps go out as steps."""
    out = tmp_path / "grpo-run"
    _write(out, 6, "checkpoint", "save_steps=2", "crash_after=3", "tokens_seen=1", code=17)
    history = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    assert all("train_runtime" in e for e in history)
    run = Run(tmp_path, [TrlOutput(out, reward_weights=[1.0, 0.5])])
    stop = StopRequest()
    threading.Timer(1.0, stop.request).start()
    assert run.follower.run(stop) is False  # stopped while the run stays live: not finished
    run.tel.shutdown()
    assert run.gauge("grpo.run.finished") == 0
    assert run.gauge("grpo.steps") == 3  # steps 1-3 (checkpoint-2's state, step 3's completions), each a step


def test_trl_end_of_training_summary_marks_the_run_finished(tmp_path, trl_summary):
    """No checkpoint at all: the summary `trainer.save_state()` writes (train_loss) is the end. The evaluation
    before the first step (`eval_on_start`) goes out at step 0 as an evaluation: no step, no step index."""
    out = trl_summary
    assert not list(out.glob("checkpoint-*"))
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert "train_loss" in history[-1]
    assert history[0]["step"] == 0 and "eval_reward" in history[0]
    run = Run(tmp_path, [TrlOutput(out, reward_weights=[1.0, 0.5])])
    assert run.follower.run(StopRequest()) is True
    run.tel.finish()
    assert run.gauge("grpo.run.finished") == 1.0
    at_start = [dict(s.attributes) for s in run.spans.get_finished_spans() if s.attributes.get("grpo.step") == 0]
    assert {a.get("grpo.metric.eval_metric/reward") for a in at_start} >= {history[0]["eval_reward"]}
    assert run.gauge("grpo.steps") == STEPS  # the evaluation counts no step
    assert run.follower.emitted == STEPS  # nor in the exit line's "N steps emitted"
    assert run.gauge("grpo.step_index") == STEPS


def _as_logged_served(run) -> dict[str, float]:
    """What the `grpo.trl.logged` gauge serves now, by TRL's key."""
    data = run.reader.get_metrics_data()
    return {p.attributes["metric"]: p.value for rm in data.resource_metrics for sm in rm.scope_metrics
            for m in sm.metrics if m.name == "grpo.trl.logged" for p in m.data.data_points}


def _step_scalars(run) -> dict[int, dict]:
    steps: dict[int, dict] = {}
    for a in (s.attributes for s in run.spans.get_finished_spans() if s.name == "grpo.step"):
        steps.setdefault(a["grpo.step"], {}).update({k[len("grpo.metric."):]: v for k, v in a.items()
                                                     if k.startswith("grpo.metric.")})
    return steps


def test_trl_named_dicts_export_as_logged_through_log_metrics_and_jsonl(tmp_path, trl_summary):
    """Issue 62: a loop of the user's own that logs TRL's dicts (`log_metrics(..., source="trl")`) and a JSONL of
    them (`JsonlStream(source="trl")`) export every number of each training log exactly as TRL logged it
    (`grpo.trl.logged`), as instrument, the callback and --trl-output do; the evaluation stays `grpo.eval`."""
    history = json.loads((trl_summary / "trainer_state.json").read_text())["log_history"]
    assert "eval_reward" in history[0] and "train_runtime" in history[-1]  # an evaluation and the summary too
    expected = as_logged_by_step(history)
    assert sorted(expected) == list(range(1, STEPS + 1)) and "total_flos" in expected[STEPS]
    (tmp_path / "direct").mkdir()
    direct = Run(tmp_path / "direct", [JsonlStream("jsonl", tmp_path / "none.jsonl")])
    for entry in history:
        logs = {k: v for k, v in entry.items() if k != "step"}
        direct.tel.log_metrics(entry["step"], logs, source="trl",
                               evaluation=any(k.startswith("eval_") for k in logs))
    direct.tel.flush()
    lines = tmp_path / "trl.jsonl"
    lines.write_text("".join(json.dumps(e) + "\n" for e in history))
    (tmp_path / "jsonl").mkdir()
    followed = Run(tmp_path / "jsonl", [JsonlStream("jsonl", lines, source="trl")])
    followed.once()
    for run in (direct, followed):
        steps = _step_scalars(run)
        assert exported_as_logged(steps) == expected
        assert _as_logged_served(run) == expected[STEPS]  # the last step's records, the summary's included
        assert steps[0]["eval_metric/reward"] == history[0]["eval_reward"]
        assert run.gauge("grpo.steps") == STEPS and run.gauge("grpo.step_index") == STEPS  # the evaluation: no step


def _sample_events(run, step: int) -> list[dict]:
    return [dict(e.attributes) for s in run.spans.get_finished_spans()
            if s.name == "grpo.samples" and s.attributes["grpo.step"] == step for e in s.events]


def test_log_extra_columns_are_not_reward_functions(tmp_path, trl_output):
    """TRL writes `log_extra` columns after the reward columns: the trainer state names the reward functions
    (`rewards/<name>/mean`), and without it `--trl-reward-weights` counts them."""
    import pyarrow.parquet as pq

    written = pq.read_table(trl_output / "completions" / "completions_00001.parquet").to_pylist()
    assert {"chars", "note"} <= set(written[0])  # what TRL wrote: a numeric and a text extra column
    partial = tmp_path / "partial"  # the parquet files alone: no trainer state yet
    shutil.copytree(trl_output / "completions", partial / "completions")
    for directory, weights in ((trl_output, None), (partial, [1.0, 0.5])):
        run = Run(tmp_path / directory.name, [TrlOutput(directory, reward_weights=weights)])
        stop = StopRequest()
        threading.Timer(1.0, stop.request).start()
        run.follower.run(stop)
        events = _sample_events(run, 1)
        assert len(events) == 8
        for event in events:
            source = written[event["sample_index"]]
            w = weights or [1.0, 1.0]
            assert event["reward"] == pytest.approx(w[0] * source["reward_words"] + w[1] * source["reward_short"])
            assert "reward.chars" not in event and event["chars"] == source["chars"] and event["note"] == "extra"


def test_null_in_trls_log_history_is_counted_nonfinite_and_the_step_emitted(tmp_path, trl_output):
    """TRL's mean of only NaN values is logged as None, which the trainer state holds as null."""
    out = tmp_path / "run"
    shutil.copytree(trl_output, out)
    state_path = out / "checkpoint-4" / "trainer_state.json"
    state = json.loads(state_path.read_text())
    entry = next(e for e in state["log_history"] if e.get("step") == 2)
    for key in list(entry):
        if key not in ("step", "epoch"):
            entry[key] = None  # a step whose every logged value was NaN
    entry["epoch"] = None
    state_path.write_text(json.dumps(state))
    run = Run(tmp_path, [TrlOutput(out)])
    assert run.follower.run(StopRequest()) is True
    run.tel.finish()
    steps = [s.attributes["grpo.step"] for s in run.spans.get_finished_spans()
             if s.name == "grpo.step" and s.attributes["grpo.step"] == 2]
    assert steps  # emitted though nothing in it was finite
    data = run.reader.get_metrics_data()
    nonfinite = {p.attributes["signal"]: p.value for rm in data.resource_metrics for sm in rm.scope_metrics
                 for m in sm.metrics if m.name == "grpo.nonfinite" for p in m.data.data_points}
    assert nonfinite.get("trl_kl") == 1 and nonfinite.get("loss") == 1 and nonfinite.get("epoch") == 1


def test_trls_logged_kl_over_the_threshold_is_kl_evidence_for_the_alerts(tmp_path):
    """`otel-grpo follow --trl-output` has TRL's logged kl only (no plain k3): the `kl` step check judges it,
    so the exported grpo.step.beyond / grpo.step.streak of signal="kl" carry GRPOKLHigh's evidence."""
    from tests.telemetry._receiver import OTLPReceiver, attrs

    out = tmp_path / "grpo-run"
    (out / "checkpoint-4").mkdir(parents=True)
    kls = [0.05, 5.5, 5.5, 5.5]  # TRL's trainer state at its final checkpoint: global_step == max_steps, the end
    history = [{"epoch": 0.01 * s, "step": s, "kl": kl, "loss": 0.1, "reward": 1.0} for s, kl in enumerate(kls, 1)]
    (out / "checkpoint-4" / "trainer_state.json").write_text(
        json.dumps({"global_step": 4, "max_steps": 4, "log_history": history}))
    with OTLPReceiver() as rx:
        env = {**os.environ, "PYTHONPATH": os.getcwd(), "OTEL_GRPO_METRICS_EXPORTERS": "otlp",
               "OTEL_GRPO_TRACES_EXPORTERS": "none", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{rx.port}"}
        done = subprocess.run([sys.executable, "-m", "otel_grpo.cli", "follow", "--trl-output", str(out),
                               "--from-start", "--poll", "0.05", "--state", str(tmp_path / "s.json")],
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0 and "4 steps emitted" in done.stderr, done.stderr
        beyond, streak = {}, {}
        for _, p in rx.metric_points("grpo.step.beyond"):  # cumulative: the last export holds the totals
            a = attrs(p.attributes)
            beyond[(a["signal"], a["bound"], a["streak"])] = p.as_int or p.as_double
        for _, p in rx.metric_points("grpo.step.streak"):
            a = attrs(p.attributes)
            streak[(a["signal"], a["bound"])] = p.as_double
        kl_gauges = {m.name for name in ("grpo.kl", "grpo.trl.kl") for m, _ in rx.metric_points(name)}
    assert kl_gauges == {"grpo.trl.kl"}  # exported as TRL's estimate, judged as KL
    assert beyond[("kl", "5.0", "1")] == 3 and beyond[("kl", "5.0", "3")] == 1 and beyond[("kl", "10.0", "1")] == 0
    assert beyond[("kl", "0.1", "1")] == 3  # step 1's 0.05 is within every bound
    assert streak[("kl", "5.0")] == 3 and streak[("kl", "0.1")] == 3
    # the checks that judge TRL's kl (and the reward) by their names: no series of trl_kl for the rules to miss
    assert {k[0] for k in beyond} == {"kl", "kl_jump", "reward_collapse"}


def _notes(sidecar, run) -> dict[int, list[str]]:
    """Each step's stored samples by the attempt that wrote them (trl_writer's `note` column)."""
    r = httpx.get(f"{sidecar.url}/api/runs/{run}/samples", params={"step_min": 0, "limit": 10000}, timeout=10)
    out: dict[int, list[str]] = {}
    for row in r.json() if r.status_code == 200 else ():
        out.setdefault(row["step"], []).append(row.get("note"))
    return out


@pytest.mark.integration
def test_a_relaunched_trl_job_replaces_the_crashed_attempts_samples(tmp_path, sidecar):
    """Issue 62: a TRL job dies after logging step 5 (its last checkpoint: step 3) and is relaunched from that
    checkpoint into the same output dir while one follower keeps running. The relaunch rewrites
    completions_00004/5.parquet with its own rows: the sidecar shows those steps with the relaunch's samples only,
    never the crashed attempt's beside them; steps 1-3 stay the first attempt's."""
    pytest.importorskip("trl")
    out, state, log, run = tmp_path / "grpo-run", tmp_path / "state.json", tmp_path / "follow.log", "trl-relaunch"
    _write(out, 6, "checkpoint", "save_steps=3", "crash_after=5", tag="first", code=17)
    assert sorted(p.name for p in (out / "completions").iterdir())[-1] == "completions_00005.parquet"
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-3"]
    follower = FollowProcess(["--trl-output", str(out), "--run-id", run, "--state", str(state), "--from-start",
                              "--poll", "0.1"], sidecar.url, free_port(), log)
    try:
        # steps_per_generation=2: steps 1, 3 and 5 bring new rows (2 and 4 repeat them)
        wait_for(lambda: sorted(_notes(sidecar, run)) == [1, 3, 5], "the first attempt's samples")
        _write(out, 6, "checkpoint", "save_steps=3", "resume=1", "seed=1", tag="second")
        assert follower.wait() == 0, log.read_text()[-3000:]  # checkpoint-6: global_step == max_steps, the end
    finally:
        follower.stop_if_running()
    import pyarrow.parquet as pq

    for step in (4, 5, 6):  # what TRL's files hold now: the relaunch's rows
        written = pq.read_table(out / "completions" / f"completions_{step:05d}.parquet").to_pylist()
        assert {r["note"] for r in written} == {"second"}
    notes = _notes(sidecar, run)
    # The relaunch generates at step 4, its first, and at 6; its step 5 reuses step 4's rows (sent once), so the
    # crashed attempt's step-5 rows are gone with the rest of its step 5, not kept beside the relaunch's values
    assert sorted(notes) == [1, 3, 4, 6]
    assert {step: set(rows) for step, rows in notes.items()} == {1: {"first"}, 3: {"first"}, 4: {"second"},
                                                                  6: {"second"}}
    assert all(len(rows) == 8 for rows in notes.values())
    history = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    logged = {e["step"]: e["loss"] for e in history if "loss" in e}
    steps = {row["step"]: row for row in httpx.get(f"{sidecar.url}/api/runs/{run}/steps", timeout=10).json()}
    assert sorted(steps) == list(range(1, 7))  # the relaunch's log history holds the first attempt's steps 1-3 too
    assert {step: steps[step]["grpo.loss"] for step in steps} == pytest.approx(logged)


@pytest.mark.integration
@pytest.mark.parametrize("follower_stopped", [False, True], ids=["one-follower", "follower-restarted"])
def test_a_relaunch_that_rewrites_the_latest_steps_completions_replaces_them(tmp_path, sidecar, follower_stopped):
    """A TRL job saving every 2 steps logs steps 1-5 and dies during step 6; relaunched, it resumes from
    checkpoint-4, so its first file is completions_00005.parquet again: the latest step's, as an evaluation at step
    5 would write it. Its checkpoint-6 logs one entry at step 5 where the completions were written twice, which one
    attempt never does (each `log` writes both): the relaunch began at step 5. The sidecar then holds step 5 with the
    relaunch's samples and scalars only, with one follower running throughout or one stopped across the relaunch
    and started again on its state."""
    pytest.importorskip("trl")
    out, state, log, run = tmp_path / "grpo-run", tmp_path / "state.json", tmp_path / "follow.log", "trl-at-top"
    _write(out, 6, "checkpoint", "save_steps=2", "crash_after=5", tag="first", code=17)
    assert sorted(p.name for p in (out / "completions").iterdir())[-1] == "completions_00005.parquet"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    args = ["--trl-output", str(out), "--run-id", run, "--state", str(state), "--from-start", "--poll", "0.1"]
    follower = FollowProcess(args, sidecar.url, free_port(), log)
    try:
        # steps_per_generation=2: steps 1, 3 and 5 bring new rows (2 and 4 repeat them)
        wait_for(lambda: sorted(_notes(sidecar, run)) == [1, 3, 5], "the first attempt's samples")
        if follower_stopped:
            assert follower.terminate() == 0, log.read_text()[-3000:]  # saves its state, then exits
        _write(out, 6, "checkpoint", "save_steps=2", "resume=1", "seed=1", tag="second")
        if follower_stopped:
            follower = FollowProcess(args, sidecar.url, free_port(), log)
        assert follower.wait() == 0, log.read_text()[-3000:]  # checkpoint-6: global_step == max_steps, the end
    finally:
        follower.stop_if_running()
    import pyarrow.parquet as pq

    for step in (5, 6):  # what TRL's files hold now: the relaunch's rows
        written = pq.read_table(out / "completions" / f"completions_{step:05d}.parquet").to_pylist()
        assert {r["note"] for r in written} == {"second"}
    # the relaunch generates at step 5, its first; its step 6 reuses those rows (sent once)
    notes = _notes(sidecar, run)
    assert {step: sorted(set(rows)) for step, rows in notes.items()} == {1: ["first"], 3: ["first"], 5: ["second"]}
    assert all(len(rows) == 8 for rows in notes.values())
    history = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    logged = {e["step"]: e["loss"] for e in history if "loss" in e}
    steps = {row["step"]: row for row in httpx.get(f"{sidecar.url}/api/runs/{run}/steps", timeout=10).json()}
    assert {step: steps[step]["grpo.loss"] for step in steps} == pytest.approx(logged)
    assert "the job was relaunched; its steps from 5" in log.read_text()


@pytest.mark.integration
def test_a_restarted_follower_keeps_the_samples_it_sent_before(tmp_path, sidecar):
    """No relaunch: the follower is stopped after sending completions 1-5 (checkpoint-3 on disk) and started again
    on its state when the job has written step 6 and checkpoint-6. The trainer state's steps 4-6 it sends then are
    the same attempt's as the completions sent before: step 5's samples stay (they went when the restarted
    follower's records claimed the steps as a newer attempt, which the job's files never sent again)."""
    pytest.importorskip("trl")
    job, out, state, run = tmp_path / "job", tmp_path / "grpo-run", tmp_path / "state.json", "trl-restarted"
    _write(job, 6, "checkpoint", "save_steps=3", tag="first")
    (out / "completions").mkdir(parents=True)
    for step in range(1, 6):  # what the job had written when the follower stopped, times kept
        shutil.copy2(job / "completions" / f"completions_{step:05d}.parquet", out / "completions")
    shutil.copytree(job / "checkpoint-3", out / "checkpoint-3")
    args = ["--trl-output", str(out), "--run-id", run, "--state", str(state), "--from-start", "--poll", "0.1"]
    first = FollowProcess(args, sidecar.url, free_port(), tmp_path / "first.log")
    try:
        # steps_per_generation=2: steps 1, 3 and 5 bring new rows (2, 4 and 6 repeat them)
        wait_for(lambda: sorted(_notes(sidecar, run)) == [1, 3, 5], "the first follower's samples")
        assert first.terminate() == 0
    finally:
        first.stop_if_running()
    shutil.copy2(job / "completions" / "completions_00006.parquet", out / "completions")
    shutil.copytree(job / "checkpoint-6", out / "checkpoint-6")
    log = tmp_path / "again.log"
    again = FollowProcess(args, sidecar.url, free_port(), log)
    try:
        assert again.wait() == 0, log.read_text()[-3000:]  # checkpoint-6: global_step == max_steps, the end
    finally:
        again.stop_if_running()
    assert {step: len(rows) for step, rows in _notes(sidecar, run).items()} == {1: 8, 3: 8, 5: 8}
    steps = httpx.get(f"{sidecar.url}/api/runs/{run}/steps", timeout=10).json()
    assert [row["step"] for row in steps] == list(range(1, 7))


def _rewrite(path: Path, note: str) -> None:
    """Write `path` again as TRL's `log` does (pandas' to_parquet, in place), its rows marked `note`."""
    import pandas as pd

    frame = pd.read_parquet(path)
    frame["completion"] = [f"{note} {c}" for c in frame["completion"]]
    frame["note"] = note
    frame.to_parquet(path)


def _samples_attempts(run) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for span in run.spans.get_finished_spans():
        if span.name == "grpo.samples":
            out.setdefault(span.attributes["grpo.step"], set()).add(span.attributes["grpo.attempt"])
    return out


def test_a_rewrite_below_the_latest_step_is_a_relaunch_one_at_it_is_not(tmp_path, trl_output, caplog):
    """TRL rewrites the latest step's completions file for an evaluation (other rows) or the summary (the same):
    the same attempt. A file written again below the latest step is a relaunch: a newer attempt from there, kept
    across a restarted follower, whose scalars come from the trainer states it writes, from its first step."""
    out = tmp_path / "grpo-run"
    shutil.copytree(trl_output, out)
    history = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    shutil.rmtree(out / "checkpoint-4")  # the job died after logging step 4, its last checkpoint at step 2

    def checkpoint(step: int) -> None:
        (out / f"checkpoint-{step}").mkdir(exist_ok=True)
        (out / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(
            {"global_step": step, "max_steps": 6, "log_history": [e for e in history if e["step"] <= step]}))

    checkpoint(2)
    run = Run(tmp_path, [TrlOutput(out)])
    run.once()
    first = run.tel.attempt
    assert _samples_attempts(run) == {1: {first}, 3: {first}}
    _rewrite(out / "completions" / "completions_00004.parquet", "eval")  # an evaluation at the latest step
    run.once()
    assert _samples_attempts(run)[4] == {first}
    with caplog.at_level("WARNING", logger="otel_grpo.follow"):  # resumed from checkpoint-2: step 3 again
        _rewrite(out / "completions" / "completions_00003.parquet", "relaunch")
        run.once()
    (relaunch,) = _samples_attempts(run)[3] - {first}
    assert relaunch > first and "relaunched" in caplog.text
    # its checkpoint-4 holds the first attempt's steps 1-2 (from checkpoint-2) and its own 3-4: those go out as
    # its attempt, steps 1-2 are not sent again
    checkpoint(4)
    run.once()
    scalar_steps = [(s.attributes["grpo.step"], s.attributes["grpo.attempt"]) for s in run.spans.get_finished_spans()
                    if s.name == "grpo.step" and "grpo.metric.trl_kl" in s.attributes]
    assert scalar_steps == [(1, first), (2, first), (3, relaunch), (4, relaunch)]
    # a restarted follower goes on with the relaunch's attempt: step 4 written again is its latest step, not below
    run.tel.shutdown()
    again = Run(tmp_path, [TrlOutput(out)], from_start=False)
    _rewrite(out / "completions" / "completions_00004.parquet", "relaunch")
    again.once()
    assert _samples_attempts(again) == {4: {relaunch}}


@pytest.mark.parametrize("case", ["relaunch", "relaunch-follower-restarted", "evaluation"])
def test_a_rewrite_at_the_latest_step_is_told_by_the_next_trainer_state(tmp_path, trl_output, caplog, case):
    """The job logged steps 1-3 (checkpoint-2 on disk) when completions_00003.parquet is written again: at the latest
    step, so an evaluation's rows or a relaunch's (resumed from checkpoint-2). The next trainer state tells: each
    `log` writes the step's file once and one history entry, so an evaluation there left an `eval_` entry beside
    the training one, while a relaunch's state holds its own entry only. A relaunch's steps 3-4 then go out again
    as its attempt, samples and scalars; also when the follower was stopped across it; an evaluation stays the
    first attempt's."""
    out = tmp_path / "grpo-run"
    shutil.copytree(trl_output, out)
    history = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    shutil.rmtree(out / "checkpoint-4")
    fourth = out / "completions" / "completions_00004.parquet"
    shutil.move(fourth, tmp_path / fourth.name)  # the job died during step 4
    _save(out, 2, [e for e in history if e["step"] <= 2])
    run = Run(tmp_path, [TrlOutput(out)])
    run.once()
    first = run.tel.attempt
    assert _samples_attempts(run) == {1: {first}, 3: {first}}
    relaunch = case.startswith("relaunch")
    if case == "relaunch-follower-restarted":
        run.tel.shutdown()
    note = "relaunch" if relaunch else "eval"
    _rewrite(out / "completions" / "completions_00003.parquet", note)
    shutil.move(tmp_path / fourth.name, fourth)
    _rewrite(fourth, note)
    if case == "relaunch":
        run.once()  # taken for the same attempt's until a trainer state tells
    if relaunch:  # its own numbers from step 3 on; steps 1-2 from checkpoint-2
        entries = [e if e["step"] <= 2 else {**e, "loss": e["loss"] + 10.0} for e in history]
    else:  # the same attempt's, with its evaluation at step 3
        entries = [*history[:3], {"eval_loss": 0.5, "eval_reward": 1.0, "step": 3}, *history[3:]]
    _save(out, 4, entries)
    with caplog.at_level("WARNING", logger="otel_grpo.follow"):
        if case == "relaunch-follower-restarted":
            run = Run(tmp_path, [TrlOutput(out)], from_start=False)
        run.once()
    losses = {e["step"]: e["loss"] for e in history if "loss" in e}
    if not relaunch:
        assert "relaunched" not in caplog.text
        assert _samples_attempts(run) == {1: {first}, 3: {first}}
        assert _scalars_sent(run)[2:] == [(3, first, losses[3]), (4, first, losses[4])]
        return
    assert "completions of step 3 written 2 times, checkpoint-4/trainer_state.json logs 1 entry there: the job " \
           "was relaunched; its steps from 3" in caplog.text
    (attempt,) = _samples_attempts(run)[3] - {first}
    assert attempt > first
    last = [s for s in run.spans.get_finished_spans() if s.name == "grpo.samples" and s.attributes["grpo.step"] == 3]
    assert last[-1].attributes["grpo.attempt"] == attempt
    assert _scalars_sent(run)[-2:] == [(3, attempt, losses[3] + 10.0), (4, attempt, losses[4] + 10.0)]
    assert {a for s, a, _ in _scalars_sent(run) if s >= 3} == {attempt}


def test_a_completions_file_written_while_read_counts_as_one_write(tmp_path, trl_output, monkeypatch, caplog):
    """The follower looks at completions_00004.parquet while pandas still writes it, and the write ends while pyarrow
    reads it: the file is read again once its size and time stay put, so the write counts once, and the trainer state
    written next, with its one entry at step 4, is no relaunch."""
    import pyarrow.parquet as pq

    out = tmp_path / "grpo-run"
    shutil.copytree(trl_output / "completions", out / "completions")
    history = json.loads((trl_output / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    last = out / "completions" / "completions_00004.parquet"
    whole = last.read_bytes()
    last.write_bytes(whole[:len(whole) // 2])  # still being written
    read_table = pq.read_table

    def write_ends_while_read(source, *args, **kwargs):
        if os.fstat(source.fileno()).st_ino == last.stat().st_ino and last.stat().st_size < len(whole):
            last.write_bytes(whole)
        return read_table(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", write_ends_while_read)
    source = TrlOutput(out)
    source.restore(None, True)

    def once() -> list:
        records = source.poll(100)
        for record in records:
            source.mark_done(record)
        return records

    assert [r.step for r in once()] == [1, 2, 3]  # step 4's file waits for its write to end
    assert [r.step for r in once()] == [4]
    _save(out, 4, history)
    with caplog.at_level("WARNING", logger="otel_grpo.follow"):
        scalars = once()
    assert [(r.step, r.attempt) for r in scalars] == [(1, None), (2, None), (3, None), (4, None)]
    assert "relaunched" not in caplog.text


def test_a_fresh_relaunch_sends_its_own_scalars_not_the_crashed_attempts(tmp_path, trl_output):
    """Relaunched afresh (from step 1), the job's steps 1-2 go out as its attempt with its own logged values, from its
    trainer state, never the crashed attempt's checkpoint values under the relaunch's attempt."""
    out = tmp_path / "grpo-run"
    shutil.copytree(trl_output, out)
    history = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    shutil.rmtree(out / "checkpoint-4")
    (out / "checkpoint-2").mkdir()

    def checkpoint(shift: float) -> None:
        entries = [{**e, "loss": e["loss"] + shift} for e in history if e["step"] <= 2]
        (out / "checkpoint-2" / "trainer_state.json").write_text(
            json.dumps({"global_step": 2, "max_steps": 6, "log_history": entries}))

    checkpoint(0.0)  # the first attempt's
    run = Run(tmp_path, [TrlOutput(out)])
    run.once()
    first = run.tel.attempt
    _rewrite(out / "completions" / "completions_00001.parquet", "relaunch")
    run.once()
    (relaunch,) = _samples_attempts(run)[1] - {first}
    checkpoint(10.0)  # the relaunch's own checkpoint-2, its own numbers
    run.once()
    sent = [(s.attributes["grpo.step"], s.attributes["grpo.attempt"], s.attributes["grpo.metric.loss"])
            for s in run.spans.get_finished_spans() if s.name == "grpo.step" and "grpo.metric.trl_kl" in s.attributes]
    losses = {e["step"]: e["loss"] for e in history if "loss" in e}
    assert sent == [(1, first, losses[1]), (2, first, losses[2]),
                    (1, relaunch, losses[1] + 10.0), (2, relaunch, losses[2] + 10.0)]


def _entry(step: int, loss: float) -> dict:
    """One training step's `log_history` entry, as TRL's GRPOTrainer logs it (a few of its keys)."""
    return {"loss": loss, "grad_norm": 0.5, "learning_rate": 1e-6, "kl": 0.01 * step, "reward": 0.5,
            "epoch": 0.25 * step, "step": step}


def _save(out: Path, step: int, history: list[dict], *, folder: str | None = None, max_steps: int = 6) -> None:
    """A trainer state as transformers' `TrainerState.save_to_json` writes it at a checkpoint (or `save_state`)."""
    path = out / (folder or f"checkpoint-{step}") / "trainer_state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    time.sleep(0.05)  # written after the previous one, as a job's saves are: a later modification time
    path.write_text(json.dumps({"global_step": step, "max_steps": max_steps, "log_history": history}, indent=2))


def _scalars_sent(run) -> list[tuple[int, int, float]]:
    """(step, attempt, loss) of each training step sent with TRL's logged scalars, in order."""
    return [(s.attributes["grpo.step"], s.attributes["grpo.attempt"], s.attributes["grpo.metric.loss"])
            for s in run.spans.get_finished_spans()
            if s.name == "grpo.step" and "grpo.metric.loss" in s.attributes and not s.attributes.get("grpo.evaluation")]


def test_without_completions_a_state_that_logs_a_step_again_is_a_relaunch(tmp_path, caplog):
    """No `log_completions`: only the trainer states show a relaunch. The job saved checkpoints 2 and 4 and died;
    relaunched from checkpoint-2 (resume_from_checkpoint="checkpoint-2"), it writes checkpoint-4 again with the
    first attempt's steps 1-2 and its own 3-4. Steps 3-4 go out again as a newer attempt with its values (the
    sidecar replaces the crashed attempt's); steps 1-2 are not sent again."""
    out = tmp_path / "grpo-run"
    first_try = [_entry(s, 1.0 + s) for s in range(1, 5)]
    _save(out, 2, first_try[:2])
    _save(out, 4, first_try)
    run = Run(tmp_path, [TrlOutput(out)])
    run.once()
    first = run.tel.attempt
    assert _scalars_sent(run) == [(s, first, 1.0 + s) for s in range(1, 5)]
    with caplog.at_level("WARNING", logger="otel_grpo.follow"):
        _save(out, 4, first_try[:2] + [_entry(s, 9.0 + s) for s in (3, 4)])
        run.once()
    sent = _scalars_sent(run)[4:]
    relaunch = sent[0][1]
    assert relaunch > first and sent == [(3, relaunch, 12.0), (4, relaunch, 13.0)]
    assert "checkpoint-4/trainer_state.json logs step 3 again" in caplog.text
    _save(out, 6, first_try[:2] + [_entry(s, 9.0 + s) for s in range(3, 7)])  # its next checkpoint: its attempt
    run.once()
    assert _scalars_sent(run)[6:] == [(5, relaunch, 14.0), (6, relaunch, 15.0)]
    state = json.loads((tmp_path / "state.json").read_text())["sources"]["trl-output"]
    assert state["attempt"] == relaunch and state["scalar_step"] == 6  # a restarted follower goes on with it


@pytest.mark.parametrize("resumed_from", [2, 4, 0])
def test_a_follower_restarted_after_a_relaunch_tells_where_it_began(tmp_path, caplog, resumed_from):
    """The follower read checkpoints 2, 4 and 6 and stopped (a rescheduled pod). Meanwhile the job died and was
    relaunched from checkpoint-2, from checkpoint-4, or afresh (0), and wrote checkpoint-6 again with its own
    numbers from there. The restarted follower no longer holds the history it read (a restart used to compare the
    relaunch's state with nothing and send nothing); from the digests it saved at each checkpoint's step it tells
    the relaunch's first step exactly, and sends that step on under a newer attempt."""
    out = tmp_path / "grpo-run"
    first_try = [_entry(s, 1.0 + s) for s in range(1, 7)]
    for step in (2, 4, 6):
        _save(out, step, first_try[:step])
    run = Run(tmp_path, [TrlOutput(out)])
    run.once()
    first = run.tel.attempt
    assert _scalars_sent(run) == [(s, first, 1.0 + s) for s in range(1, 7)]
    saved = json.loads((tmp_path / "state.json").read_text())["sources"]["trl-output"]
    assert sorted(map(int, saved["logged"])) == [2, 4, 6]  # a digest per checkpoint, not the whole history
    run.follower.state.unlock()

    relaunch = first_try[:resumed_from] + [_entry(s, 20.0 + s) for s in range(resumed_from + 1, 7)]
    _save(out, 6, relaunch)
    again = Run(tmp_path, [TrlOutput(out)])
    with caplog.at_level("WARNING", logger="otel_grpo.follow"):
        again.once()
    sent = _scalars_sent(again)
    assert [(s, loss) for s, _, loss in sent] == [(s, 20.0 + s) for s in range(resumed_from + 1, 7)]
    assert len({a for _, a, _ in sent}) == 1 and sent[0][1] > first
    assert f"logs step {resumed_from + 1} again: the job was relaunched" in caplog.text


def test_without_completions_a_fresh_relaunch_sends_its_steps_again(tmp_path):
    """Relaunched afresh into the same output dir: its checkpoint-2 ends below the step read (4). From step 1 (its
    numbers differ) the steps go out as its attempt; the crashed attempt's checkpoint-4 no longer counts."""
    out = tmp_path / "grpo-run"
    _save(out, 2, [_entry(s, 1.0 + s) for s in (1, 2)])
    _save(out, 4, [_entry(s, 1.0 + s) for s in range(1, 5)])
    run = Run(tmp_path, [TrlOutput(out)])
    run.once()
    first = run.tel.attempt
    _save(out, 2, [_entry(s, 5.0 + s) for s in (1, 2)])
    run.once()
    sent = _scalars_sent(run)[4:]
    relaunch = sent[0][1]
    assert relaunch > first and sent == [(1, relaunch, 6.0), (2, relaunch, 7.0)]
    _save(out, 4, [_entry(s, 5.0 + s) for s in range(1, 5)])
    run.once()
    assert _scalars_sent(run)[6:] == [(3, relaunch, 8.0), (4, relaunch, 9.0)]


def test_a_fresh_relaunch_that_logs_the_same_numbers_is_one_from_the_step_after_its_state(tmp_path):
    """A deterministic job relaunched afresh logs the same numbers: its checkpoint-2 agrees with what was read but
    ends below step 4. Steps 1-2 are the same either way; from step 3 its steps go out as its attempt."""
    out = tmp_path / "grpo-run"
    history = [_entry(s, 1.0 + s) for s in range(1, 5)]
    _save(out, 2, history[:2])
    _save(out, 4, history)
    run = Run(tmp_path, [TrlOutput(out)])
    run.once()
    first = run.tel.attempt
    _save(out, 2, history[:2])
    run.once()
    assert len(_scalars_sent(run)) == 4  # nothing new yet
    _save(out, 4, history)
    run.once()
    sent = _scalars_sent(run)[4:]
    assert [s for s, _, _ in sent] == [3, 4] and {a for _, a, _ in sent} != {first}


def test_the_same_attempts_saves_evaluations_and_summary_are_no_relaunch(tmp_path):
    """What one attempt writes after a state: the next checkpoint (further on), an evaluation logged at the latest
    step, and `save_state()`'s end-of-training summary at that step (the same entries and more): no relaunch, a
    NaN among the entries included."""
    out = tmp_path / "grpo-run"
    history = [_entry(s, 1.0 + s) for s in range(1, 3)]
    history[1]["grad_norm"] = float("nan")  # written as NaN: equal when read again (json reads one NaN object)
    _save(out, 2, history)
    run = Run(tmp_path, [TrlOutput(out)])
    run.once()
    history += [_entry(s, 1.0 + s) for s in (3, 4)] + [{"eval_loss": 0.3, "eval_reward": 0.1, "epoch": 1.0, "step": 4}]
    _save(out, 4, history)
    run.once()
    history.append({"train_runtime": 12.5, "train_loss": 3.0, "epoch": 1.0, "step": 4})
    _save(out, 4, history, folder=".")
    assert run.follower.run(StopRequest()) is True  # the summary: the end
    assert {a for _, a, _ in _scalars_sent(run)} == {run.tel.attempt}
    assert [s for s, _, _ in _scalars_sent(run)] == [1, 2, 3, 4]


@pytest.mark.integration
@pytest.mark.parametrize("follower_stopped", [False, True], ids=["one-follower", "follower-restarted"])
def test_a_relaunched_trl_job_without_completions_replaces_the_crashed_attempts_steps(tmp_path, sidecar,
                                                                                    follower_stopped):
    """Without `log_completions` the trainer states are all there is. A real TRL job saves checkpoints 2 and 4 and
    dies during step 6; it is relaunched afresh (another seed) into the same output dir, while one follower keeps
    running, or while the follower is stopped (then started again on its state once the relaunch has rewritten
    every checkpoint). Its checkpoint-2 logs steps 1-2 again: from there its steps are a newer attempt, so the
    sidecar holds every step with the relaunch's logged values, none with the crashed attempt's."""
    pytest.importorskip("trl")
    out, state, log, run = tmp_path / "grpo-run", tmp_path / "state.json", tmp_path / "follow.log", "trl-fresh"
    _write(out, 6, "checkpoint", "save_steps=2", "crash_after=5", "completions=0", code=17)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert not (out / "completions").exists()
    crashed = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    args = ["--trl-output", str(out), "--run-id", run, "--state", str(state), "--from-start", "--poll", "0.1"]
    follower = FollowProcess(args, sidecar.url, free_port(), log)

    def stored() -> dict[int, float]:
        rows = httpx.get(f"{sidecar.url}/api/runs/{run}/steps", timeout=10)
        return {row["step"]: row["grpo.loss"] for row in rows.json()} if rows.status_code == 200 else {}

    try:
        first = {e["step"]: e["loss"] for e in crashed if "loss" in e}
        wait_for(lambda: stored() == pytest.approx(first), "the first attempt's steps 1-4")
        if follower_stopped:
            assert follower.terminate() == 0, log.read_text()[-3000:]  # saves its state, then exits
        _write(out, 6, "checkpoint", "save_steps=2", "seed=1", "completions=0")
        if follower_stopped:
            follower = FollowProcess(args, sidecar.url, free_port(), log)
        assert follower.wait() == 0, log.read_text()[-3000:]  # checkpoint-6: global_step == max_steps, the end
    finally:
        follower.stop_if_running()
    history = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    logged = {e["step"]: e["loss"] for e in history if "loss" in e}
    assert sorted(logged) == list(range(1, 7)) and {s: logged[s] for s in first} != pytest.approx(first)
    wait_for(lambda: sorted(stored()) == list(range(1, 7)), "the relaunch's steps")
    assert stored() == pytest.approx(logged)
    assert "logs step 1 again: the job was relaunched" in log.read_text()


def test_a_relaunch_seen_in_a_batch_whose_export_failed_is_seen_again(tmp_path):
    """A failed flush sends the source back to its saved point (the earlier attempt): reading again, the trainer
    state that showed the relaunch shows it again, and its steps go out as a newer attempt, not the saved one's."""
    out = tmp_path / "grpo-run"
    first_try = [_entry(s, 1.0 + s) for s in range(1, 5)]
    _save(out, 4, first_try)
    source = TrlOutput(out)
    source.restore(None, True)
    for record in source.poll(100):
        source.mark_done(record)
    saved = source.cursor()
    _save(out, 4, first_try[:2] + [_entry(s, 9.0 + s) for s in (3, 4)])
    seen = source.poll(100)
    assert [(r.step, r.scalars["loss"]) for r in seen] == [(3, 12.0), (4, 13.0)] and seen[0].attempt is not None
    source.restore(saved, False)  # the flush failed: nothing of it was saved
    again = source.poll(100)
    assert [(r.step, r.scalars["loss"]) for r in again] == [(3, 12.0), (4, 13.0)]
    assert again[0].attempt is not None and again[0].attempt >= seen[0].attempt


def test_steps_never_read_from_the_resumed_checkpoint_go_out_under_the_relaunch(tmp_path, trl_output):
    """docs/follow.md: the follower read checkpoint-2 only; the job also saved checkpoint-4, logged steps 5-6, died,
    and resumed from checkpoint-4 (its completions of step 5 again show the relaunch). Steps 3-4, never sent, go
    out from the relaunch's trainer state under its attempt, with the values the crashed attempt logged."""
    out = tmp_path / "grpo-run"
    shutil.copytree(trl_output / "completions", out / "completions")
    history = [_entry(s, 1.0 + s) for s in range(1, 6)]
    _save(out, 2, history[:2])
    run = Run(tmp_path, [TrlOutput(out)])
    run.once()
    first = run.tel.attempt
    completions = out / "completions"  # TRL's of steps 1-4; the crashed attempt's steps 5-6, read before it died
    for step in (5, 6):
        shutil.copy(completions / "completions_00004.parquet", completions / f"completions_{step:05d}.parquet")
    run.once()
    _save(out, 4, history[:4])  # its checkpoint-4, written as it died: the follower does not read it
    time.sleep(0.05)
    _rewrite(out / "completions" / "completions_00005.parquet", "relaunch")  # resumed from checkpoint-4
    run.once()
    (relaunch,) = _samples_attempts(run)[5] - {first}
    _save(out, 6, history[:4] + [_entry(s, 9.0 + s) for s in (5, 6)])
    run.once()
    assert _scalars_sent(run) == [(1, first, 2.0), (2, first, 3.0), (3, relaunch, 4.0), (4, relaunch, 5.0),
                                  (5, relaunch, 14.0), (6, relaunch, 15.0)]
