"""`otel-grpo follow` as a user meets it: bad input ends in one readable line; --finished imports a finished run."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

ENV = {"OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "none"}


def follow(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_grpo.cli", "follow", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, **ENV, "PYTHONPATH": os.getcwd(), **(env or {})})


@pytest.mark.parametrize("args, says", [
    ((), "nothing to follow"),
    (("--verl-rollouts", "x"), "--verl-rollouts alone needs --run-id"),
    (("--jsonl", "x.jsonl", "--trl-output", "d", "--trl-reward-weights", "1,a"), "--trl-reward-weights"),
    (("--trl-output", "/etc/passwd"), "--trl-output /etc/passwd: is a file, not a directory"),
    (("--jsonl", "/tmp"), "--jsonl /tmp: is a directory, not a file"),
    (("--jsonl", "x.jsonl", "--checkpoints", "/etc/passwd"), "--checkpoints /etc/passwd: is a file, not a directory"),
    (("--jsonl", "x.jsonl", "--state", "/proc/no/s.json"), "state file /proc/no/s.json: cannot be written there"),
    (("--jsonl", "x.jsonl", "--run-id", "exp/steps"), "ends in '/steps'"),
    (("--jsonl", "x.jsonl", "--source", "wandb"), "Invalid value for '--source'"),
    (("--trl-output", "d", "--source", "trl"), "--source trl: says whose names --jsonl's lines use; give --jsonl"),
    (("--trl-output", "d", "--trl-reward-weights", "1,nan"), "'1,nan' is not a comma-separated list of finite numbers"),
    (("--trl-output", "d", "--trl-reward-weights", "inf"), "'inf' is not a comma-separated list of finite numbers"),
    (("--jsonl", "x.jsonl", "--trl-reward-weights", "1,2"), "--trl-reward-weights: weighs the reward functions of"),
    (("--jsonl", "x.jsonl", "--trl-reward-weights", "1,x"), "'1,x' is not a comma-separated list of finite numbers"),
    (("--jsonl", "x.jsonl", "--poll", "inf"), "Invalid value for '--poll'"),
    (("--jsonl", "x.jsonl", "--poll", "1e300"), "Invalid value for '--poll'"),
    (("--jsonl", "x.jsonl", "--pair-wait", "inf"), "Invalid value for '--pair-wait'"),
    (("--verl-metrics", "/dev/null", "--finished"), "--finished: /dev/null is not a regular file"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    out = follow(*args, *(() if "--state" in args else ("--state", str(tmp_path / "s.json"))))
    assert out.returncode == 2
    assert says in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_bad_source_from_the_environment_is_one_line_and_exit_2(tmp_path):
    out = follow("--jsonl", "x.jsonl", "--state", str(tmp_path / "s.json"), env={"OTEL_GRPO_FOLLOW_SOURCE": "TRL"})
    assert out.returncode == 2 and "OTEL_GRPO_FOLLOW_SOURCE" in out.stderr and "'TRL' is not one of" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_sources_are_none_or_the_catalogs_peers():
    """--source takes what `JsonlStream(source=)` takes (spelled out there so the CLI starts without the catalog)."""
    from typing import get_args

    from otel_grpo.catalog import PEERS
    from otel_grpo.cli.follow import JsonlNames

    assert get_args(JsonlNames) == ("none", *PEERS)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_source_trl_reads_trls_names_and_its_kl_is_judged_as_kl(tmp_path, how):
    """`--jsonl FILE --source trl` reads lines of TRL's logged dicts as `JsonlStream(source="trl")` does: TRL's
    `kl` is exported as grpo.trl.kl, each number also as logged (grpo.trl.logged), and the `kl` step check
    judges it (grpo.step.beyond{signal="kl"}, GRPOKLHigh's evidence); an `eval_` line is no step."""
    from tests.telemetry._receiver import OTLPReceiver, attrs

    path = tmp_path / "trl-logs.jsonl"
    kls = [0.05, 5.5, 5.5, 5.5]
    lines = [{"step": s, "kl": kl, "loss": 0.1, "reward": 1.0, "clip_ratio/region_mean": 0.0}
             for s, kl in enumerate(kls, 1)]
    lines.insert(2, {"step": 2, "eval_loss": 0.3, "eval_reward": 0.5})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    given = ("--source", "trl") if how == "flag" else ()
    with OTLPReceiver() as rx:
        env = {"OTEL_GRPO_METRICS_EXPORTERS": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{rx.port}",
               **({"OTEL_GRPO_FOLLOW_SOURCE": "trl"} if how == "env" else {})}
        out = follow("--jsonl", str(path), *given, "--finished", "--poll", "0.05",
                     "--state", str(tmp_path / "s.json"), env=env)
        assert out.returncode == 0 and "4 steps emitted, 0 bad lines" in out.stderr, out.stderr  # not the eval
        beyond = {}
        for _, p in rx.metric_points("grpo.step.beyond"):  # cumulative: the last export holds the totals
            a = attrs(p.attributes)
            beyond[(a["signal"], a["bound"], a["streak"])] = p.as_int or p.as_double
        kl_gauges = {m.name for name in ("grpo.kl", "grpo.trl.kl") for m, _ in rx.metric_points(name)}
        logged = {attrs(p.attributes)["metric"] for _, p in rx.metric_points("grpo.trl.logged")}
        steps = [p.as_int or p.as_double for _, p in rx.metric_points("grpo.steps")]
    assert kl_gauges == {"grpo.trl.kl"}  # TRL's estimate under its own name, judged as KL
    assert beyond[("kl", "5.0", "1")] == 3 and beyond[("kl", "5.0", "3")] == 1 and beyond[("kl", "0.1", "1")] == 3
    assert {"kl", "loss", "reward"} <= logged and not {k for k in logged if k.startswith("eval_")}
    assert steps and steps[-1] == 4  # the evaluation line counts no step


def test_a_run_id_naming_a_path_outside_the_state_directory_touches_nothing(tmp_path):
    """The run id names the default state file and run directory: `../x` would put them beside it."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "x.jsonl").write_text(json.dumps({"step": 1, "kl": 0.1}) + "\n")
    out = follow("--jsonl", "x.jsonl", "--run-id", "../../x", "--finished", cwd=work,
                 env={"PYTHONPATH": os.getcwd()})
    assert out.returncode == 2 and "run_id '../../x' has an empty, '.' or '..' part" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["work", "work/x.jsonl"]


def test_a_state_file_of_another_run_is_refused(tmp_path):
    state = tmp_path / "s.json"
    state.write_text(json.dumps({"version": 1, "run_id": "other", "sources": {}}))
    out = follow("--jsonl", str(tmp_path / "m.jsonl"), "--run-id", "mine", "--state", str(state))
    assert out.returncode == 2 and "belongs to run 'other'" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_finished_reads_a_step_jsonl_to_its_end_and_marks_the_run_finished(tmp_path):
    path = tmp_path / "my-run.jsonl"
    path.write_text("".join(json.dumps({"step": s, "kl": 0.1 * s, "my/custom": s}) + "\n" for s in range(5)))
    out = follow("--jsonl", str(path), "--finished", "--state", str(tmp_path / "s.json"))
    assert out.returncode == 0, out.stderr
    assert "run my-run: 5 steps emitted, 0 bad lines or files skipped; run finished" in out.stderr
    again = follow("--jsonl", str(path), "--finished", "--state", str(tmp_path / "s.json"))
    assert "0 steps emitted" in again.stderr  # resumed at the end: nothing twice


def test_otel_grpo_run_id_names_the_run_unless_run_id_does(tmp_path):
    """The variable a job spec sets for every otel-grpo process names the run, as for a trainer."""
    path = tmp_path / "file-name.jsonl"
    path.write_text(json.dumps({"step": 0, "kl": 0.1}) + "\n")
    out = follow("--jsonl", str(path), "--finished", "--state", str(tmp_path / "a.json"),
                 env={"OTEL_GRPO_RUN_ID": "from-env"})
    assert "run from-env: 1 steps emitted" in out.stderr, out.stderr
    out = follow("--jsonl", str(path), "--finished", "--state", str(tmp_path / "b.json"), "--run-id", "flag",
                 env={"OTEL_GRPO_RUN_ID": "from-env"})
    assert "run flag: 1 steps emitted" in out.stderr, out.stderr


def test_the_follower_does_not_import_torch():
    code = "import sys, otel_grpo.integrations.follow, otel_grpo.cli.follow; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.stdout.strip() == "False"


def test_a_path_that_does_not_exist_yet_is_named_then_followed_once_it_appears(tmp_path):
    path = tmp_path / "later.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "otel_grpo.cli", "follow", "--jsonl", str(path), "--poll", "0.05",
                             "--state", str(tmp_path / "s.json")], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **ENV, "PYTHONPATH": os.getcwd()})
    try:
        # a typo in the path would otherwise wait forever without a word
        assert _first_line(proc.stderr, seconds=60) == f"otel-grpo follow: {path} does not exist yet; waiting for it (read from its start)"
        path.write_text("".join(json.dumps({"step": s, "kl": 0.1}) + "\n" for s in range(3)))
        deadline, state = time.monotonic() + 60, tmp_path / "s.json"
        while time.monotonic() < deadline and _offset(state) < path.stat().st_size:  # read to its end
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert "3 steps emitted" in rest


def _offset(state) -> int:
    """How far the follower's saved state says it has read the followed file (0 before its first save)."""
    try:
        return json.loads(state.read_text())["sources"]["jsonl"]["offset"]
    except (OSError, ValueError, KeyError):
        return 0


def _first_line(stream, seconds: float) -> str:
    """The stream's first line, or "" if none comes within `seconds` (the test fails instead of hanging)."""
    ready, _, _ = select.select([stream], [], [], seconds)
    return stream.readline().strip() if ready else ""


def test_a_save_into_the_trl_output_dir_reaches_the_exporter_as_a_heartbeat(tmp_path):
    """`--trl-output`'s folder is where TRL saves its checkpoints: a change there is work (a long save between
    logged steps is no stall), sent as `grpo.process.activity_time` by the follower's own exporter."""
    from tests.telemetry._receiver import OTLPReceiver

    out = tmp_path / "trl-out"
    out.mkdir()
    with OTLPReceiver() as rx:
        env = {**os.environ, "PYTHONPATH": os.getcwd(), "OTEL_GRPO_METRICS_EXPORTERS": "otlp",
               "OTEL_GRPO_TRACES_EXPORTERS": "none", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{rx.port}"}
        proc = subprocess.Popen([sys.executable, "-m", "otel_grpo.cli", "follow", "--trl-output", str(out),
                                 "--poll", "0.05", "--state", str(tmp_path / "s.json")],
                                stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while not (tmp_path / "s.json").exists() and time.monotonic() < deadline:  # its start is saved
                time.sleep(0.05)
            began = time.time()
            # A save a second for 12 s: whenever its watch took the folder as it was (later on a loaded
            # machine), saves follow it, and it looks (every 5 s) at least once after one of them.
            for step in range(10, 130, 10):
                (out / f"checkpoint-{step}").mkdir()
                (out / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"x" * 1024)
                time.sleep(1.0)
            time.sleep(5.5)
            proc.send_signal(signal.SIGTERM)  # its exporters flush on the way out
            rest = proc.communicate(timeout=60)[1]
        finally:
            proc.kill()
        assert proc.returncode == 0, rest
        (_, beat), *_ = rx.metric_points("grpo.process.activity_time")
        assert began <= beat.as_double <= time.time()


def test_a_checkpoint_folder_that_does_not_exist_yet_is_named(tmp_path):
    """verl makes it at its first save, so it is awaited; the line shows a typo, which would never beat."""
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"step": 1, "kl": 0.1}) + "\n")
    out = follow("--jsonl", str(path), "--checkpoints", str(tmp_path / "ckpts"), "--finished",
                 "--state", str(tmp_path / "s.json"))
    assert out.returncode == 0, out.stderr
    assert f"{tmp_path / 'ckpts'} does not exist yet; saves into it will be heartbeats once it does" in out.stderr


# `otel-grpo follow` with its exporters' set-up held at a gate: the test writes while the follower is between
# its launch and its exporters (the window a launch takes: modules, exporters, a Prometheus port).
_GATED = """
import os, sys, time
from otel_grpo.telemetry import Telemetry
real = Telemetry.from_env.__func__
def held(cls, *args, **kwargs):
    open(os.environ["GATE_REACHED"], "w").close()
    while not os.path.exists(os.environ["GATE_GO"]):
        time.sleep(0.02)
    return real(cls, *args, **kwargs)
Telemetry.from_env = classmethod(held)
from otel_grpo.cli import main
sys.argv = ["otel-grpo", "follow", *sys.argv[1:]]
main()
"""


def test_without_from_start_lines_written_after_launch_are_read_and_the_start_is_saved_at_once(tmp_path, verl):
    """The start offset is the files' end at launch, saved at once: a line the job writes while the follower
    sets up its exporters is read, and a follower killed there resumes at its launch point."""
    from otel_grpo.integrations.follow import State
    from tests._support.waiting import wait_for

    from .test_files import write_verl

    path, state, reached, go = tmp_path / "exp.jsonl", tmp_path / "s.json", tmp_path / "reached", tmp_path / "go"
    write_verl(verl, path, 1, 2)
    launch_size = path.stat().st_size

    def append(step: int) -> None:
        write_verl(verl, tmp_path / "more.jsonl", step, step)
        with open(path, "ab") as fp:
            fp.write((tmp_path / "more.jsonl").read_bytes())

    def gated() -> subprocess.Popen:
        env = {**os.environ, **ENV, "PYTHONPATH": os.getcwd(), "GATE_REACHED": str(reached), "GATE_GO": str(go)}
        return subprocess.Popen([sys.executable, "-c", _GATED, "--verl-metrics", str(path), "--state", str(state),
                                 "--poll", "0.05"], env=env, stderr=subprocess.PIPE, text=True)

    first = gated()
    wait_for(reached.exists, "the follower between its launch and its exporters")
    assert State.load(state).sources["verl-metrics"]["offset"] == launch_size  # saved before the exporters
    append(3)
    first.kill()  # killed before its first batch: the restart resumes at the launch point, not the new end
    first.wait()
    reached.unlink()
    second = gated()
    wait_for(reached.exists, "the restarted follower at the gate")
    append(4)
    go.touch()
    wait_for(lambda: State.load(state).sources["verl-metrics"]["offset"] == path.stat().st_size, "steps 3-4 read")
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0
    assert "2 steps emitted, 0 bad lines" in second.stderr.read()
