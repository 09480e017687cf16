"""Nothing lost end to end: whatever happens to the sidecar, the telemetry process or the trainer,
`otel-grpo replay OUTPUT_DIR` afterwards leaves every spilled step and sample in the store exactly once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings, _attempt, _telemetry
from otel_grpo.telemetry._backend import Backend
from otel_grpo.telemetry._record import StepRecord
from otel_grpo.telemetry._spill import SampleSpill, SpillReader

from tests._support.replay import replay_spill
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _settings(url: str, out: Path, run_id: str, **extra) -> TelemetrySettings:
    return TelemetrySettings(run_id=run_id, output_dir=out, otlp_protocol="http/protobuf",
                             otlp_traces_endpoint=f"{url}/v1/traces", metrics_exporters=["none"],
                             traces_exporters=["otlp"], top_k=2, bottom_k=2, random_k=1, shutdown_timeout_s=5, **extra)


def _step(tel: Telemetry, step: int) -> None:
    with tel.step(step) as s:
        with s.phase("rollout"):
            pass
        s.record({"kl": 0.01 * step, "reward": 0.5 + step})
        s.samples([{"prompt": f"{step}-{i}", "completion": "x" * i, "reward": (i * 7 % 16) / 16} for i in range(8)])


def _replay(url: str, out: Path) -> str:
    return replay_spill(url, out).stdout


def _spill_only(url: str, out: Path, run_id: str, steps: int = 3) -> None:
    """A run whose exports never left: its steps are in the spill under `out` only."""
    tel = Telemetry(_settings(url, out, run_id).model_copy(update={"traces_exporters": ["none"]}))
    for step in range(steps):
        _step(tel, step)
    tel.shutdown()


def _stored(url: str, run_id: str) -> tuple[list[int], list[tuple[int, int]], int]:
    steps = [r["step"] for r in httpx.get(f"{url}/api/runs/{run_id}/steps", params={"limit": 10000}).json()]
    rows = httpx.get(f"{url}/api/runs/{run_id}/samples", params={"step_min": 0, "limit": 10000}).json()
    count = httpx.get(f"{url}/api/runs/{run_id}").json()["sample_count"]
    return steps, [(r["step"], r["sample_index"]) for r in rows], count


def _spilled(out: Path) -> tuple[list[dict], list[dict]]:
    """Every step line and every sample row of the spill under `out`."""
    spill = SpillReader(out)
    lines = [line for step in spill.steps for found in spill.step_lines(step).values() for line in found]
    return lines, [row for step in spill.steps for row in spill.samples(step)]


def _assert_exactly_the_spill(url: str, out: Path, run_id: str) -> None:
    lines, rows = _spilled(out)
    spilled_steps = {line["step"] for line in lines}
    spilled_samples = {(r["step"], r["sample_index"]) for r in rows}
    assert spilled_steps and len(spilled_samples) == len(rows)
    steps, samples, count = _stored(url, run_id)
    assert sorted(steps) == sorted(spilled_steps)  # each step once, none missing
    assert sorted(samples) == sorted(spilled_samples) and count == len(spilled_samples)
    kl = {r["step"]: r["grpo.kl"] for r in httpx.get(f"{url}/api/runs/{run_id}/steps", params={"metrics": "grpo.kl"}).json()}
    assert all(kl[s] == pytest.approx(0.01 * s) for s in spilled_steps)


def test_replay_after_the_sidecar_was_down_mid_run(sidecar_factory, db, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    sidecar = sidecar_factory(db=db)
    out = tmp_path / "run"
    tel = Telemetry(_settings(sidecar.url, out, "outage"))
    for step in range(10):
        _step(tel, step)
    assert tel.flush(30)
    sidecar.kill()  # down: the exporter's requests fail from here on
    for step in range(10, 30):
        _step(tel, step)
    tel.flush(3)
    sidecar.proc = None
    sidecar.start()  # back, on the same port and database
    for step in range(30, 40):
        _step(tel, step)
    tel.shutdown()
    steps, _, _ = _stored(sidecar.url, "outage")
    assert len(steps) < 40  # the outage lost steps: the replay has work to do
    assert "replayed 40 step(s) and 200 sample(s)" in _replay(sidecar.url, out)
    _assert_exactly_the_spill(sidecar.url, out, "outage")
    _replay(sidecar.url, out)  # a second replay changes nothing
    _assert_exactly_the_spill(sidecar.url, out, "outage")


def test_replay_after_the_telemetry_process_was_killed(sidecar_factory, tmp_path):
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    tel = Telemetry(_settings(sidecar.url, out, "child", emit_in="process"))
    for step in range(10):
        _step(tel, step)
    os.kill(tel._sink.pid, signal.SIGKILL)  # spans it had not exported yet are gone with it
    wait_for(lambda: tel._sink.pid is None, "this process to take over", timeout=30)
    for step in range(10, 20):
        _step(tel, step)
    tel.shutdown()
    _replay(sidecar.url, out)
    _assert_exactly_the_spill(sidecar.url, out, "child")


def test_a_step_emitted_again_by_the_trainer_that_took_over_is_stored_once(sidecar_factory, tmp_path):
    """The telemetry process exported a step and died before it acknowledged it: the trainer emits the
    same record again. Its spans carry the same ids, so the store keeps one copy: phase durations are
    not added up twice, and replaying the spill (written by both) changes nothing."""
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    settings = _settings(sidecar.url, out, "again")
    rec = StepRecord(step=3, steps_done=1, start_ns=time.time_ns() - 2_000_000_000, end_ns=time.time_ns(),
                     scalars=[{"kl": 0.03}], phases=[("rollout", time.time_ns() - 1_500_000_000, time.time_ns(), None)],
                     rows=[(time.time_ns(), [{"prompt": f"p{i}", "completion": "c", "reward": i / 8}
                                             for i in range(8)], None)])
    for _ in ("child", "trainer"):
        backend = Backend.build(settings, rank=0, world_size=1, local_rank=0)
        backend.emit(rec)
        backend.close(10, finished=False, preempted=False)

    def stored() -> tuple[float, int]:
        (row,) = httpx.get(f"{sidecar.url}/api/runs/again/steps", params={"limit": 10}).json()
        return row["grpo.phase.duration/rollout"], httpx.get(f"{sidecar.url}/api/runs/again").json()["sample_count"]

    rollout_s = (rec.phases[0][2] - rec.phases[0][1]) / 1e9
    assert stored() == (pytest.approx(rollout_s), 5)
    _replay(sidecar.url, out)
    _assert_exactly_the_spill(sidecar.url, out, "again")
    assert stored() == (pytest.approx(rollout_s), 5)


TRAINER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from otel_grpo.telemetry import Telemetry, TelemetrySettings
    url, out = sys.argv[1], Path(sys.argv[2])
    tel = Telemetry(TelemetrySettings(run_id="killed", output_dir=out, otlp_protocol="http/protobuf",
                                      otlp_traces_endpoint=url + "/v1/traces", metrics_exporters=["none"],
                                      traces_exporters=["otlp"], top_k=2, bottom_k=2, random_k=1))
    for step in range(100000):
        with tel.step(step) as s:
            s.record({"kl": 0.01 * step})
            s.samples([{"prompt": f"{step}-{i}", "completion": "c", "reward": i / 8} for i in range(8)])
        time.sleep(0.01)
""")


def test_replay_after_the_trainer_was_killed(sidecar_factory, tmp_path):
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, sidecar.url, str(out)], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: len(_spilled(out)[0]) >= 30, "the trainer to spill 30 steps", timeout=120)
    finally:
        trainer.send_signal(signal.SIGKILL)  # no shutdown: the spans in its export queue are lost
        trainer.wait()
    _replay(sidecar.url, out)
    _assert_exactly_the_spill(sidecar.url, out, "killed")
    lines = (out / "steps.jsonl").read_text().splitlines()
    assert all(json.loads(line)["run_id"] == "killed" for line in lines)  # whole lines only


def test_replay_takes_the_traces_url_itself_as_its_endpoint(sidecar_factory, tmp_path):
    """`up` prints a trainer's traces endpoint, <sidecar>/v1/traces: given to replay it became
    /v1/traces/v1/traces, a 404 and no hint."""
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    _spill_only(sidecar.url, out, "by-traces-url")
    assert "replayed 3 step(s)" in _replay(sidecar.url + "/v1/traces/", out)
    _assert_exactly_the_spill(sidecar.url, out, "by-traces-url")


def test_replay_names_the_lines_it_cannot_read_and_sends_the_rest(sidecar_factory, tmp_path):
    """A spill edited by hand, or cut short by a crash of an older version: each unreadable line is a sample
    or step the store will not get, so the user is told which files hold how many; the rest goes."""
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    _spill_only(sidecar.url, out, "edited")
    with (out / "samples" / "step_1.jsonl").open("a") as fh:
        fh.write("[1, 2]\n\n")  # valid JSON but no row; a blank line is nothing
    with (out / "steps.jsonl").open("a") as fh:
        fh.write('{"run_id": "edited", "step": 3, "met')  # cut short
    result = replay_spill(sidecar.url, out)
    assert result.stderr.strip() == ("otel-grpo replay: warning: skipped 2 line(s) that are no step or sample of a run (no JSON "
                                     "object with run_id and step): steps.jsonl (1), samples/step_1.jsonl (1)")
    assert "replayed 3 step(s) and 15 sample(s)" in result.stdout
    _assert_exactly_the_spill(sidecar.url, out, "edited")


def test_spans_the_sidecar_rejects_fail_the_replay_with_its_reason(sidecar_factory, tmp_path):
    """The sidecar answers 200 with a partial success for spans it cannot store (here an older version's
    spill under a run id it cannot address): "replayed" would claim steps the store never got."""
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    _spill_only(sidecar.url, out, "legacy")
    for path in [out / "steps.jsonl", *(out / "samples").glob("*.jsonl")]:
        path.write_text(path.read_text().replace('"run_id": "legacy"', '"run_id": "legacy/steps"'))
    result = replay_spill(sidecar.url, out, exit_code=1)
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert re.fullmatch(r"otel-grpo replay: .*/v1/traces took the replay of .* but rejected 6 span\(s\) \(span "
                        r"'grpo\.(step|samples)' \w+: run_id 'legacy/steps' ends in '/steps'.*\)", line), line
    assert httpx.get(f"{sidecar.url}/api/runs").json() == []


def test_a_step_larger_than_a_request_goes_in_parts(sidecar_factory, tmp_path):
    """Every row of an anomalous step is kept: one step's spill can outgrow a request (and the sidecar's body
    limit). Its rows go 64 to a span, and a request is sent whenever one is full, mid-step too."""
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    spill = SampleSpill(out)
    spill.write_step("huge", 7, 1, 2, {"kl": 0.5}, {})
    rows = [{"run_id": "huge", "step": 7, "sample_index": i, "prompt": os.urandom(1000).hex(),  # gzip cannot shrink
             "completion": os.urandom(1000).hex(), "reward": 0.5} for i in range(1500)]  # ~6 MB: two requests
    spill.write(7, rows)
    assert "replayed 1 step(s) and 1500 sample(s)" in _replay(sidecar.url, out)
    assert httpx.get(f"{sidecar.url}/api/runs/huge").json()["sample_count"] == 1500
    metrics = httpx.get(f"{sidecar.url}/metrics").text
    spans = re.search(r"^otel_grpo_sidecar_spans_ingested_total (\S+)$", metrics, re.M)
    requests = re.search(r'^otel_grpo_sidecar_request_duration_seconds_count\{[^}]*/v1/traces[^}]*\} (\S+)$',
                         metrics, re.M)
    assert spans and float(spans.group(1)) == 1 + 24  # the step span, and 1500 rows in spans of 64
    assert requests and float(requests.group(1)) >= 2, metrics


def test_rows_without_a_sample_index_are_stored_once_however_oftenreplay_spill(sidecar_factory, tmp_path):
    """Such a row's id in the store comes from its span's id and its place in the span (the telemetry layer
    numbers its rows; a hand-written or older spill may not): a replay must build the same spans each time."""
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    spill = SampleSpill(out)
    for step in range(2):
        spill.write_step("unnumbered", step, 1, 2, {"kl": 0.5}, {})
        spill.write(step, [{"run_id": "unnumbered", "step": step, "prompt": f"p{i}", "reward": 0.1 * i}
                           for i in range(100)])  # two spans a step (64 rows a span)
    for _ in range(2):
        assert "replayed 2 step(s) and 200 sample(s)" in _replay(sidecar.url, out)
    assert httpx.get(f"{sidecar.url}/api/runs/unnumbered").json()["sample_count"] == 200
    rows = httpx.get(f"{sidecar.url}/api/runs/unnumbered/samples", params={"step_min": 0, "limit": 1000}).json()
    assert sorted((r["step"], r["prompt"]) for r in rows) == sorted((s, f"p{i}") for s in range(2) for i in range(100))


def test_a_resumed_runs_spill_replays_its_newest_attempt_of_each_step_only(sidecar_factory, tmp_path):
    """The run crashed after step 4 and resumed from step 2 into the same output dir: the spill holds steps 3-4
    twice. A replay (into an empty store, and again) sends each step's newest attempt only, with its attempt,
    so the store shows the resumed completions beside the resumed scalars, whatever arrived first. The resumed
    attempt's evaluation at its checkpoint's step (before it trains on) goes too, beside that step's training."""
    sidecar = sidecar_factory()
    out = tmp_path / "run"

    def attempt(steps, tag: str, kl: float, evaluate_at: int | None = None) -> None:
        tel = Telemetry(_settings(sidecar.url, out, "resumed").model_copy(update={"traces_exporters": ["none"]}))
        if evaluate_at is not None:
            tel.log_metrics(evaluate_at, {"eval_accuracy": 0.5}, evaluation=True)
        for step in steps:
            with tel.step(step) as s:
                s.record({"kl": kl + step})
                s.samples([{"prompt": f"{step}-{i}", "completion": f"{tag} {step}/{i}", "reward": i / 8}
                           for i in range(8)])
        tel.shutdown()

    attempt(range(5), "first", 10.0)
    attempt(range(3, 6), "second", 20.0, evaluate_at=2)
    for _ in range(2):
        _replay(sidecar.url, out)
        rows = httpx.get(f"{sidecar.url}/api/runs/resumed/samples", params={"step_min": 0, "limit": 1000}).json()
        by_step: dict[int, set[str]] = {}
        for row in rows:
            by_step.setdefault(row["step"], set()).add(row["completion"].split()[0])
        assert by_step == {0: {"first"}, 1: {"first"}, 2: {"first"}, 3: {"second"}, 4: {"second"}, 5: {"second"}}
        kl = {r["step"]: r["grpo.kl"] for r in httpx.get(f"{sidecar.url}/api/runs/resumed/steps").json()}
        assert kl == {0: 10.0, 1: 11.0, 2: 12.0, 3: 23.0, 4: 24.0, 5: 25.0}
        evaluated = {r["step"]: r["grpo.eval/accuracy"] for r in httpx.get(f"{sidecar.url}/api/runs/resumed/steps").json()
                     if "grpo.eval/accuracy" in r}
        assert evaluated == {2: 0.5}
        assert httpx.get(f"{sidecar.url}/api/runs/resumed").json()["sample_count"] == len(rows)


def test_a_replay_leaves_out_the_steps_a_relaunch_superseded(sidecar_factory, tmp_path):
    """The run reached step 5 (an evaluation at 4), crashed, and its relaunch evaluated at its checkpoint (step 2),
    ran step 3 and crashed too. Replayed into an empty store, the run reads as the live sidecar held it: steps
    0-2 the first's, 3 the relaunch's, the evaluation at 2 beside the first's training; steps 4 and 5, and the
    first's evaluation at 4, of a run that no longer is, stay out."""
    sidecar = sidecar_factory()
    out = tmp_path / "run"

    def attempt(steps, tag: str, kl: float, evaluate: dict[int, float]) -> None:
        tel = Telemetry(_settings(sidecar.url, out, "superseded").model_copy(update={"traces_exporters": ["none"]}))
        for step in steps:
            with tel.step(step) as s:
                s.record({"kl": kl + step})
                s.samples([{"prompt": f"{step}-{i}", "completion": f"{tag} {step}/{i}", "reward": i / 8}
                           for i in range(4)])
            if step in evaluate:
                tel.log_metrics(step, {"eval_accuracy": evaluate[step]}, evaluation=True)
        if 0 not in steps:  # the relaunch's evaluation at its checkpoint, before it trains on
            tel.log_metrics(min(steps) - 1, {"eval_accuracy": 0.5}, evaluation=True)
        tel.shutdown()

    attempt(range(6), "first", 10.0, {4: 0.9})
    attempt(range(3, 4), "second", 20.0, {})
    _replay(sidecar.url, out)
    steps = {r["step"]: r for r in httpx.get(f"{sidecar.url}/api/runs/superseded/steps").json()}
    assert {n: r["grpo.kl"] for n, r in steps.items()} == {0: 10.0, 1: 11.0, 2: 12.0, 3: 23.0}
    assert {n: r["grpo.eval/accuracy"] for n, r in steps.items() if "grpo.eval/accuracy" in r} == {2: 0.5}
    rows = httpx.get(f"{sidecar.url}/api/runs/superseded/samples", params={"step_min": 0, "limit": 1000}).json()
    assert {(r["step"], r["completion"].split()[0]) for r in rows} == {
        (0, "first"), (1, "first"), (2, "first"), (3, "second")}
    assert httpx.get(f"{sidecar.url}/api/runs/superseded").json()["last_step"] == 3


def test_a_replay_keeps_each_jobs_other_ranks_beside_its_rank_zero(sidecar_factory, tmp_path, monkeypatch):
    """`export_all_ranks` into one output dir, rank 1's Telemetry made before rank 0's (its attempt the smaller,
    though it is the same job's): the crashed job ran steps 0-3, its relaunch resumed at step 2. Replayed into an
    empty store, each step has its own job's rank 1 beside its rank 0: none was taken for an older attempt's, and
    the crashed job's rank 1 stays out of the steps the relaunch ran again."""
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    monkeypatch.setenv("WORLD_SIZE", "2")

    def job(steps, tag: float) -> None:
        ranks = {}
        for rank in (1, 0):
            monkeypatch.setenv("RANK", str(rank))
            settings = _settings(sidecar.url, out, "ranks", export_all_ranks=True, sample_reduce="per_rank")
            ranks[rank] = Telemetry(settings.model_copy(update={"traces_exporters": ["none"]}))
        assert ranks[1].attempt < ranks[0].attempt
        for step in steps:
            for rank, tel in ranks.items():
                with tel.step(step) as s:
                    s.record({"kl": tag + step, f"rank{rank}_of_{tag:.0f}": 1.0})
        for tel in ranks.values():
            tel.shutdown()

    job(range(4), 10.0)
    time.sleep(1.0)  # a relaunch starts after the crash, much longer after the crashed job than its ranks apart
    job(range(2, 4), 20.0)
    _replay(sidecar.url, out)
    steps = {r["step"]: r for r in httpx.get(f"{sidecar.url}/api/runs/ranks/steps").json()}
    crashed, relaunch = {"rank0_of_10", "rank1_of_10"}, {"rank0_of_20", "rank1_of_20"}
    assert {n: {k for k in r if "_of_" in k} for n, r in steps.items()} == {
        0: crashed, 1: crashed, 2: relaunch, 3: relaunch}


def test_a_middle_jobs_late_exports_read_the_same_live_andreplay_spill(sidecar_factory, tmp_path, monkeypatch, otlp):
    """Three launches of one run, `export_all_ranks`: A ran steps 0-7, B resumed at 3 and ran 3-6, C resumed at 5.
    A and C export live; B's exports (its rank 1's first) reach the live sidecar only after C's claims. The whole
    run's spill replayed into an empty sidecar reads the same as the live one: A's steps below B's resume step,
    B's below C's, C's from there on, each with its own job's rank 1 alone. Live, B's rank 1 counted as C's
    writers (halfway between A's claim and C's, B not known yet) and stayed in C's steps."""
    live, replayed = sidecar_factory(), sidecar_factory()
    monkeypatch.setenv("WORLD_SIZE", "2")

    def job(tag: str, steps, exporter: str) -> tuple[Path, dict[int, int]]:
        out = tmp_path / tag
        ranks = {}
        # A launcher starts a job's ranks together: each rank's attempt is its process's start, a millisecond
        # apart here. In this one process a `Telemetry` would take "now" at its construction, which under load
        # put C's rank 1 nearer to B's claim than to C's own.
        launch = _attempt.next_attempt()
        for rank in (1, 0):
            monkeypatch.setattr(_telemetry, "next_attempt", lambda ranks=1, rank=rank: launch + rank * 1_000_000)
            monkeypatch.setenv("RANK", str(rank))
            settings = _settings(live.url, out, "late", export_all_ranks=True, sample_reduce="per_rank")
            ranks[rank] = Telemetry(settings.model_copy(update={"traces_exporters": [exporter]}))
        for step in steps:
            for rank, tel in ranks.items():
                with tel.step(step) as s:
                    s.record({"kl": 0.1 * step, f"rank{rank}_of_{tag}": 1.0})
        for tel in ranks.values():
            assert exporter == "none" or tel.flush(10)
            tel.shutdown()
        return out, {rank: tel.attempt for rank, tel in ranks.items()}

    def jobs(url: str) -> dict[int, set[str]]:
        rows = httpx.get(f"{url}/api/runs/late/steps").json()
        return {r["step"]: {k.split(".")[-1] for k in r if "_of_" in k} for r in rows}

    a, _ = job("a", range(8), "otlp")
    wait_for(lambda: len(jobs(live.url)) == 8 and jobs(live.url)[7] == {"rank0_of_a", "rank1_of_a"}, "A's steps",
             timeout=30)
    time.sleep(1.0)  # B is relaunched a while after A; C right after B crashed
    b, attempts = job("b", range(3, 7), "none")
    c, _ = job("c", range(5, 9), "otlp")
    wait_for(lambda: jobs(live.url).get(8) == {"rank0_of_c", "rank1_of_c"}, "C's steps", timeout=30)
    for rank in (1, 0):  # B's exports, late: the spans its ranks sent
        said = {"attempt" if rank == 0 else "writer_attempt": attempts[rank]}
        spans = otlp.spans("late", range(3, 7), samples=0, **said,
                           metrics=lambda step, rank=rank: {"kl": 0.1 * step, f"rank{rank}_of_b": 1.0})
        assert httpx.post(f"{live.url}/v1/traces", content=otlp.request(spans).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    whole = tmp_path / "whole"  # one output dir of the three launches, as they append to it
    for spill in (a, b, c):
        for path in spill.rglob("*.jsonl"):
            target = whole / path.relative_to(spill)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("ab") as fh:
                fh.write(path.read_bytes())
    _replay(replayed.url, whole)
    expected = {step: {f"rank0_of_{tag}", f"rank1_of_{tag}"} for step, tag in enumerate("aaabbcccc")}
    assert jobs(replayed.url) == expected
    assert jobs(live.url) == expected


def test_a_refused_replay_says_the_receivers_reason(sidecar_factory, tmp_path):
    """The sidecar answers an error with a google.rpc.Status in the request's encoding, protobuf: printed as
    text, the reason read "HTTP 413: Drequest body exceeds ...", the message's framing bytes in it."""
    sidecar = sidecar_factory(env={"OTEL_GRPO_SIDECAR_MAX_BODY_BYTES": str(1024 * 1024)})
    out = tmp_path / "run"
    spill = SampleSpill(out)
    spill.write_step("long", 0, 1, 2, {"kl": 0.5}, {})
    spill.write(0, [{"run_id": "long", "step": 0, "sample_index": 0, "completion": "c" * 2_000_000}])
    result = replay_spill(sidecar.url, out, 1, "--max-text-chars", "2000000")  # one row past the body limit
    assert result.stderr.strip() == (f"otel-grpo replay: {sidecar.url}/v1/traces refused the replay (HTTP 413: "
                                     "request body exceeds the limit of 1048576 bytes after decompression)")
