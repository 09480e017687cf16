"""Following a verl job while it writes, across a killed and restarted follower, into a real sidecar and Prometheus.

The job is verl_writer.py: verl 0.9.1's own `FileLogger` (from the wheel) and the generation
dump format of `RayPPOTrainer._write_generations`, in another process.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests._support.waiting import wait_for

from tests.sidecar.conftest import free_port

from .conftest import FollowProcess, Writer, prom_query

pytestmark = pytest.mark.integration

SAMPLES = 8  # rows per step in verl_writer.py; 12 kept per step by default, so all of them
SPANS_PER_STEP = 1 + 5 + 1  # grpo.step, five timing_s phases, one grpo.samples span


def _committed(state, metrics) -> bool:
    try:
        saved = json.loads(state.read_text())["sources"]["verl-metrics"]
    except (OSError, ValueError, KeyError):
        return False
    return metrics.exists() and saved["offset"] == metrics.stat().st_size


def _steps(sidecar, run) -> list[int]:
    r = httpx.get(f"{sidecar.url}/api/runs/{run}/steps", timeout=10)
    return [row["step"] for row in r.json()] if r.status_code == 200 else []


def _samples_per_step(sidecar, run) -> dict[int, list[int]]:
    rows = httpx.get(f"{sidecar.url}/api/runs/{run}/samples", params={"step_min": 0, "limit": 10000}, timeout=10).json()
    out: dict[int, list[int]] = {}
    for row in rows:
        out.setdefault(row["step"], []).append(row["sample_index"])
    return {k: sorted(v) for k, v in out.items()}


def _spans_ingested(sidecar) -> float:
    text = httpx.get(f"{sidecar.url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("otel_grpo_sidecar_spans_ingested_total"))


def _segments(url: str, query: str) -> list[float]:
    """The raw samples of a counter series split at resets (one segment per follower process): each maximum."""
    result = prom_query(url, query)
    assert len(result) == 1, result
    values = [float(v) for _, v in result[0]["values"]]
    maxima, last = [], None
    for v in values:
        if last is None or v < last:
            maxima.append(v)
        maxima[-1] = max(maxima[-1], v)
        last = v
    return maxima


def test_killed_follower_resumes_every_line_exactly_once(tmp_path, verl, sidecar, prometheus):
    prom_url, port = prometheus
    metrics, rollouts, state, log = tmp_path / "exp.jsonl", tmp_path / "rollouts", tmp_path / "state.json", tmp_path / "follow.log"
    run = "verl-restart"
    args = ["--verl-metrics", str(metrics), "--verl-rollouts", str(rollouts), "--run-id", run, "--state", str(state),
            "--from-start", "--poll", "0.1", "--pair-wait", "5"]
    writer = Writer(verl, metrics, rollouts, last=20, pause_after=10)
    first = FollowProcess(args, sidecar.url, port, log)
    try:
        # Mid-file: the job has written 10 of its 20 steps and keeps its file open.
        wait_for(lambda: sorted(_steps(sidecar, run)) == list(range(1, 11)), "steps 1-10 in the sidecar")
        wait_for(lambda: _committed(state, metrics), "the offset of step 10 saved")
        wait_for(lambda: prom_query(prom_url, f'grpo_steps_total{{run_id="{run}"}} == 10'), "a scrape of 10 steps")
        first.kill()
        second = FollowProcess(args, sidecar.url, port, log)
        writer.resume()
        writer.wait()
        wait_for(lambda: sorted(_steps(sidecar, run)) == list(range(1, 21)), "steps 1-20 in the sidecar")
        wait_for(lambda: _committed(state, metrics), "the offset of step 20 saved")
        wait_for(lambda: prom_query(prom_url, f'grpo_steps_total{{run_id="{run}"}} == 10'), "the second process's 10 steps scraped")
        assert second.terminate() == 0  # SIGTERM: flush, save, exit cleanly
    finally:
        first.stop_if_running()
    assert "stopped; the run stays live" in log.read_text()
    samples = _samples_per_step(sidecar, run)
    assert samples == {step: list(range(SAMPLES)) for step in range(1, 21)}
    # Exactly once: the sidecar received each step's spans one time (a re-sent line would add 7)...
    wait_for(lambda: _spans_ingested(sidecar) >= 20 * SPANS_PER_STEP, "all spans ingested")
    assert _spans_ingested(sidecar) == 20 * SPANS_PER_STEP
    # ...and Prometheus saw 10 steps counted by each process: 20, not 10 + 20 re-read from the start.
    assert _segments(prom_url, f'grpo_steps_total{{run_id="{run}"}}[10m]') == [10.0, 10.0]
    # The files stopped growing without an end: the run is not marked finished.
    finished = prom_query(prom_url, f'max(max_over_time(grpo_run_finished{{run_id="{run}"}}[10m]))')
    assert [float(r["value"][1]) for r in finished] == [0.0]
    # verl's names arrived under the catalog's: critic/score/mean is grpo.reward.mean.
    last = prom_query(prom_url, f'last_over_time(grpo_reward_mean{{run_id="{run}"}}[10m])')
    assert last and abs(float(last[0]["value"][1]) - (0.5 + 20 / 1000)) < 1e-9


def test_follows_an_appending_job_through_a_kill_at_any_moment_and_finishes(tmp_path, verl, sidecar, prometheus):
    """Killed at an arbitrary moment: nothing is skipped; the run ends when verl's last step reaches its total."""
    prom_url, port = prometheus
    metrics, rollouts, state, log = tmp_path / "exp.jsonl", tmp_path / "rollouts", tmp_path / "state.json", tmp_path / "follow.log"
    run = "verl-append"
    args = ["--verl-metrics", str(metrics), "--verl-rollouts", str(rollouts), "--run-id", run, "--state", str(state),
            "--from-start", "--poll", "0.1", "--pair-wait", "5", "--verl-total-steps", "30"]
    writer = Writer(verl, metrics, rollouts, last=30, delay=0.1)
    first = FollowProcess(args, sidecar.url, port, log)
    try:
        wait_for(lambda: len(_steps(sidecar, run)) >= 5, "the first steps")
        first.kill()  # while the job is still appending
        assert writer.proc.poll() is None, "the job finished before the kill: nothing was tested mid-file"
        second = FollowProcess(args, sidecar.url, port, log)
        writer.wait()
        assert second.wait() == 0  # the run ended: finish and exit
    finally:
        first.stop_if_running()
    assert "run finished" in log.read_text()
    assert sorted(set(_steps(sidecar, run))) == list(range(1, 31))
    assert _samples_per_step(sidecar, run) == {step: list(range(SAMPLES)) for step in range(1, 31)}


def _step_rows(sidecar, run) -> dict[int, dict]:
    return {row["step"]: row for row in httpx.get(f"{sidecar.url}/api/runs/{run}/steps", timeout=10).json()}


def _completions(sidecar, run) -> dict[int, list[str]]:
    r = httpx.get(f"{sidecar.url}/api/runs/{run}/samples", params={"step_min": 0, "limit": 10000}, timeout=10)
    out: dict[int, list[str]] = {}
    for row in r.json() if r.status_code == 200 else ():
        out.setdefault(row["step"], []).append(row["completion"])
    return {k: sorted(v) for k, v in out.items()}


def test_a_relaunched_job_replaces_the_crashed_attempts_samples_and_scalars(tmp_path, verl, sidecar):
    """verl's job crashes after step 4 and is relaunched from step 2's checkpoint: its FileLogger truncates the
    metrics file and `_write_generations` rewrites 3.jsonl and 4.jsonl with other completions. The sidecar
    shows steps 3-4 with the relaunch's completions only, beside the relaunch's scalars."""
    metrics, rollouts, state, log = tmp_path / "exp.jsonl", tmp_path / "rollouts", tmp_path / "state.json", tmp_path / "follow.log"
    run = "verl-relaunch"
    Writer(verl, metrics, rollouts, last=4).wait()
    follower = FollowProcess(["--verl-metrics", str(metrics), "--verl-rollouts", str(rollouts), "--run-id", run,
                              "--state", str(state), "--from-start", "--poll", "0.1", "--pair-wait", "5"],
                             sidecar.url, free_port(), log)
    try:
        wait_for(lambda: len(_completions(sidecar, run).get(4, [])) == SAMPLES and _committed(state, metrics),
                 "the first attempt's steps 1-4")
        Writer(verl, metrics, rollouts, first=3, last=5, tag="second").wait()
        wait_for(lambda: len(_completions(sidecar, run).get(5, [])) == SAMPLES and _committed(state, metrics),
                 "the relaunch's steps 3-5")
        wait_for(lambda: all(c.startswith("second") for c in _completions(sidecar, run)[4]), "step 4 replaced")
        assert follower.terminate() == 0
    finally:
        follower.stop_if_running()
    completions, steps = _completions(sidecar, run), _step_rows(sidecar, run)
    for step in (1, 2):  # before the checkpoint: the first attempt's, untouched
        assert completions[step] == sorted(f"answer {step}.{i}" for i in range(SAMPLES))
        assert steps[step]["grpo.reward.mean"] == pytest.approx(0.5 + step / 1000)
    for step in (3, 4, 5):  # the relaunch's only: none of the crashed attempt's completions beside its scalars
        assert completions[step] == sorted(f"second answer {step}.{i}" for i in range(SAMPLES))
        assert steps[step]["grpo.reward.mean"] == pytest.approx(0.6 + step / 1000)
    [info] = [r for r in httpx.get(f"{sidecar.url}/api/runs", timeout=10).json() if r["run_id"] == run]
    assert info["sample_count"] == 5 * SAMPLES
