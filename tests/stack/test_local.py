"""`otel-grpo up`: the real sidecar, Prometheus and Alertmanager on free local ports."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from otel_grpo.generate._run_end import FIRST_STEP_LIMIT, STALL_LIMIT
from otel_grpo.stack import Backend, LocalStack, RuleSettings, StackSettings, alerts
from otel_grpo.stack._process import binary_version
from otel_grpo.stack._demo import DemoSettings, run_demo
from tests.stack.conftest import scraped_process

pytestmark = pytest.mark.integration


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_grpo.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_missing_binary_is_one_line_saying_how_to_install(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    out = _cli("up", "--dir", str(tmp_path / "stack"),
               env={**os.environ, "PATH": str(empty), "OTEL_GRPO_BIN_CACHE": str(empty)})
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "scripts/build-backends.sh" in lines[0], out.stderr
    assert not (tmp_path / "stack" / "logs").exists()  # nothing was started


def test_demo_rejects_a_bad_fault_before_starting(tmp_path):
    out = _cli("demo", "--dir", str(tmp_path), "--fault", "meltdown@3")
    assert out.returncode == 2 and "meltdown@3" in out.stderr


def test_demo_takes_every_fault_the_trainer_has():
    from otel_grpo.stack import DemoSettings
    from otel_grpo.trainer import FAULT_KINDS

    assert DemoSettings(faults=tuple(f"{kind}@15" for kind in FAULT_KINDS)).faults  # bad-batch@15 was rejected


def _wait_for(fetch, deadline_s: float = 60.0):
    """Poll until fetch() returns something truthy; the last value either way (no timing asserted)."""
    end = time.monotonic() + deadline_s
    while True:
        value = fetch()
        if value or time.monotonic() > end:
            return value
        time.sleep(0.5)


def test_up_loads_every_rule_and_scrapes_the_sidecar(stack):
    s = stack.settings
    with httpx.Client(timeout=10) as http:
        groups = http.get(f"{s.prometheus_url}/api/v1/rules").json()["data"]["groups"]
        loaded = {r["name"] for g in groups for r in g["rules"] if r["type"] == "alerting"}
        assert loaded == {r["alert"] for r in alerts(RuleSettings())}

        def sidecar_up():
            targets = http.get(f"{s.prometheus_url}/api/v1/targets").json()["data"]["activeTargets"]
            return [t for t in targets if t["labels"]["job"] == "sidecar" and t["health"] == "up"]

        assert _wait_for(sidecar_up)
        assert http.get(f"{s.alertmanager_url}/api/v2/status").json()["cluster"]["status"] == "disabled"
        # every link `up` prints opens something: no 404 / 500 from a web UI these builds lack
        for name, url in stack.urls.items():
            if name != "trainer metrics":  # no trainer runs here
                assert http.get(url).status_code == 200, (name, url)


def test_the_sidecar_logs_to_a_rotated_file(stack):
    """`up` runs the sidecar with --log-file: its log rotates instead of growing next to the database."""
    log = stack.settings.dir / "logs" / "sidecar.log"
    assert _wait_for(lambda: log.exists() and "Uvicorn running" in log.read_text(errors="replace"))


def test_alertmanager_delivers_to_the_sidecar(stack):
    s = stack.settings
    now = datetime.now(timezone.utc)
    alert = {
        "labels": {"alertname": "GRPOKLHigh", "severity": "critical", "run_id": "local-up-test"},
        "annotations": {"summary": "KL to the reference is 0.5 in run local-up-test (threshold 0.1)"},
        "startsAt": now.isoformat(), "endsAt": (now + timedelta(minutes=5)).isoformat(),
    }
    with httpx.Client(timeout=10) as http:
        assert http.post(f"{s.alertmanager_url}/api/v2/alerts", json=[alert]).status_code == 200
        got = _wait_for(lambda: http.get(f"{s.sidecar_url}/api/alerts", params={"run_id": "local-up-test"}).json())
    assert [a["alertname"] for a in got] == ["GRPOKLHigh"]
    assert got[0]["labels"]["severity"] == "critical" and got[0]["status"] == "firing"


def test_a_port_in_use_is_one_line_before_anything_starts(stack, tmp_path, free_port_factory):
    taken = stack.settings.prometheus_port  # held by the running stack
    out = _cli("up", "--dir", str(tmp_path), "--prometheus-port", str(taken),
               "--sidecar-port", str(free_port_factory()), "--alertmanager-port", str(free_port_factory()),
               "--trainer-metrics-port", str(free_port_factory()))
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"otel-grpo up: prometheus: port 127.0.0.1:{taken} is in use (another `otel-grpo up`?); pick another with --prometheus-port"]
    assert not (tmp_path / "logs").exists()


def test_components_bind_to_localhost_only(stack):
    for c in stack.components:
        assert any("127.0.0.1" in a for a in c.argv), c.name


TRAINER = """
from otel_grpo.telemetry import Telemetry
tel = Telemetry.from_env(run_id="from-up-block")
for step in range(3):
    with tel.step(step) as s:
        s.record({"kl": 0.01 * step, "reward": 0.5})
        s.samples([{"prompt": f"p{step}-{i}", "completion": "c", "reward": i / 4} for i in range(4)])
tel.finish()
"""


def _start_up(directory: Path, ports: list[int]) -> subprocess.Popen:
    """`otel-grpo up` on the given sidecar, Prometheus, Alertmanager and trainer-metrics ports."""
    return subprocess.Popen([sys.executable, "-m", "otel_grpo.cli", "up", "--dir", str(directory),
                             "--sidecar-port", str(ports[0]), "--prometheus-port", str(ports[1]),
                             "--alertmanager-port", str(ports[2]), "--trainer-metrics-port", str(ports[3])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_up_prints_an_environment_block_that_works(tmp_path, free_port_factory):
    """A trainer given only the block `up` prints lands its steps and samples in the sidecar; the
    printed alerts link opens on the Prometheus that is installed."""
    ports = [free_port_factory() for _ in range(4)]
    up = _start_up(tmp_path / "stack", ports)
    try:
        lines = []
        while not lines or "Ctrl-C" not in lines[-1]:
            line = up.stdout.readline()
            assert line, f"up exited: {up.stderr.read()}"
            lines.append(line.rstrip())
        env = dict(line.strip()[len("export "):].split("=", 1) for line in lines if line.strip().startswith("export "))
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OTEL_GRPO_"))}
        trainer = subprocess.run([sys.executable, "-c", TRAINER], env={**clean, **env, "OTEL_GRPO_OUTPUT_DIR":
                                 str(tmp_path / "run")}, capture_output=True, text=True, timeout=120)
        assert trainer.returncode == 0 and "failed" not in trainer.stderr, trainer.stderr
        urls = dict(line.split(None, 1) for line in lines if line.startswith("  ") and "http" in line
                    and not line.strip().startswith("export"))
        with httpx.Client(timeout=10) as http:
            rows = http.get(f"{urls['sidecar']}api/runs/from-up-block/samples", params={"step_min": 0}).json()
            assert len(rows) == 12
            alerts = http.get(urls["alerts"])
            assert alerts.status_code == 200 and "alert" in alerts.text.lower()
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)


def test_up_names_the_prometheus_and_alertmanager_it_runs_with_their_versions(stack):
    line = stack.backends_line()
    assert set(stack.backends) == {"prometheus", "alertmanager"}
    for name, backend in stack.backends.items():
        assert f"{name} {binary_version(backend.path)} (" in line  # the version the binary itself reports
    assert line.count("(pinned build, ") == sum(b.pinned for b in stack.backends.values())


@pytest.mark.parametrize("component, debian", [("prometheus", "prometheus"), ("alertmanager", "prometheus-alertmanager")])
def test_a_backend_found_on_path_is_named_as_not_the_pinned_build(monkeypatch, tmp_path, component, debian):
    """Debian's Prometheus 2.42 and Alertmanager 0.25, which `up` runs where nothing was built, say so."""
    if shutil.which(debian) is None:
        pytest.skip(f"no {debian} on PATH")
    monkeypatch.setenv("OTEL_GRPO_BIN_CACHE", str(tmp_path))  # nothing built here
    backend = Backend.find(component)
    path = shutil.which(debian)
    assert not backend.pinned and str(backend).startswith(
        f"{component} {binary_version(path)} ({path} from PATH, not the pinned {backend.pinned_version} ")
    assert f"`scripts/build-backends.sh {component}` builds it" in str(backend)


def _start_demo(tmp_path: Path, ports: list[int], run_id: str, steps: int) -> subprocess.Popen:
    """`otel-grpo demo` of the tiny preset in `tmp_path`, serving until Ctrl-C, on the given four ports."""
    return subprocess.Popen(
        [sys.executable, "-m", "otel_grpo.cli", "demo", "--dir", str(tmp_path / "stack"), "--run-id", run_id,
         "--steps", str(steps), "--trainer-arg=--preset", "--trainer-arg=tiny", "--trainer-log",
         str(tmp_path / "trainer.log"), "--sidecar-port", str(ports[0]), "--prometheus-port", str(ports[1]),
         "--alertmanager-port", str(ports[2]), "--trainer-metrics-port", str(ports[3])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_demo_serves_the_pages_it_prints_until_ctrl_c(tmp_path, free_port_factory):
    """Without --exit the demo prints, after its summary, the pages that show the run, its alerts and their
    history, and serves them until Ctrl-C: each answers (none is a web UI these builds lack, nor a list of
    alerts Alertmanager has forgotten), and Ctrl-C then stops every component."""
    ports = [free_port_factory() for _ in range(4)]
    demo = _start_demo(tmp_path, ports, "served", steps=3)
    try:
        lines: list[str] = []
        while not lines or "until Ctrl-C" not in lines[-1]:
            line = demo.stdout.readline()
            assert line, f"demo exited: {lines} {demo.stderr.read()}"
            lines.append(line.rstrip())
        after = lines[next(i for i, line in enumerate(lines) if line.startswith("The run, its alerts")) + 1:-1]
        pages = dict(re.fullmatch(r"  (\S.*?)\s{2,}(\S+)", line).groups() for line in after)
        assert set(pages) == {"run explorer", "alerts received", "alert history", "samples", "samples spilled"}
        with httpx.Client(timeout=10) as http:
            assert "run explorer" in http.get(pages["run explorer"]).text  # the page; the run is its #fragment
            assert pages["run explorer"].endswith("/#/run/served")
            # the run's alerts only (the small model may clip its first completions: GRPOCompletionsClipped)
            received = http.get(pages["alerts received"]).json()
            assert isinstance(received, list) and all(a["run_id"] == "served" for a in received)
            assert http.get(pages["alert history"]).json()["status"] == "success"
            assert _wait_for(lambda: http.get(pages["samples"]).json())
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=60)
    assert demo.returncode == 0, demo.stderr.read()
    assert not [p for p in ports[:3] if _listening(p)]


def _alive_under(directory: Path) -> list[str]:
    """Command lines of the processes still running with `directory` in them."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(directory).encode() in arg for arg in argv):
            found.append(" ".join(a.decode(errors="replace") for a in argv))
    return found


def test_a_sigterm_while_the_demo_trains_stops_the_trainer_and_every_component(tmp_path, free_port_factory):
    """A supervisor's SIGTERM in the middle of the demo's training: the trainer gets Ctrl-C and ends, then the
    stack stops; nothing the demo started is left running."""
    ports = [free_port_factory() for _ in range(4)]
    demo = _start_demo(tmp_path, ports, "sigterm'd", steps=100_000)
    try:
        steps = _wait_for(lambda: [p for p in (tmp_path / "stack").rglob("metrics.jsonl") if p.stat().st_size]
                          or demo.poll() is not None, 180)
        assert steps and demo.poll() is None, demo.stderr.read() if demo.poll() is not None else "no step"
        demo.send_signal(signal.SIGTERM)
        out, err = demo.communicate(timeout=90)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0 and "interrupted." in out and "Traceback" not in err, (out, err)
    assert not _alive_under(tmp_path), _alive_under(tmp_path)
    assert not [p for p in ports[:3] if _listening(p)]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.mark.parametrize("when", ["as soon as it says it is up", "while it starts"])
def test_sigterm_stops_every_component(tmp_path, free_port_factory, when):
    """A supervisor's SIGTERM stops the sidecar, Prometheus and Alertmanager with `up`, whenever it
    comes (it used to kill `up` alone before its wait began, leaving the three running)."""
    ports = [free_port_factory() for _ in range(4)]
    up = _start_up(tmp_path / "stack", ports)
    try:
        if when == "while it starts":
            assert _wait_for(lambda: _listening(ports[0]) or up.poll() is not None, 120), "the sidecar never listened"
        else:
            line = up.stdout.readline()
            while line and "stack is up" not in line:
                line = up.stdout.readline()
            assert "stack is up" in line, up.stderr.read()
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
    assert "Traceback" not in up.stderr.read()
    assert not [p for p in ports[:3] if _listening(p)]


def test_an_interrupt_after_the_components_are_ready_stops_them_all(tmp_path, free_port_factory):
    """An interrupt while `start()` looks up Prometheus' pages, the last thing it does once all three
    are ready, stops them all (a CI run's SIGTERM landed there and left them running). Raised at that
    call by a trace function: the moment is too short to hit with a signal from outside."""
    from otel_grpo.stack._local import find_alerts_page

    ports = {k: free_port_factory() for k in ("sidecar_port", "prometheus_port", "alertmanager_port",
                                              "trainer_metrics_port")}
    stack = LocalStack(StackSettings(dir=tmp_path, **ports))

    def interrupt_there(frame, event, arg):
        if event == "call" and frame.f_code is find_alerts_page.__code__:
            raise KeyboardInterrupt
        return None  # no per-line tracing

    sys.settrace(interrupt_there)
    try:
        with pytest.raises(KeyboardInterrupt):
            stack.start()
    finally:
        sys.settrace(None)
        started = list(stack.components)
        stack.stop()
    assert not started, [c.name for c in started]
    assert not [p for p in list(ports.values())[:3] if _listening(p)]


@contextmanager
def sigint_as_popen_returns(nth: int) -> Iterator[list[subprocess.Popen]]:
    """A real SIGINT to this process as the block's `nth` `subprocess.Popen(...)` returns, before its
    caller holds the process (a trace function: the moment is too short to hit from outside). Yields
    the Popens made, in order."""
    spawned: list[subprocess.Popen] = []

    def on_return(frame, event, arg):
        if event == "return":
            spawned.append(frame.f_locals["self"])
            if len(spawned) == nth:
                os.kill(os.getpid(), signal.SIGINT)
        return on_return

    def at_popen(frame, event, arg):
        return on_return if event == "call" and frame.f_code is subprocess.Popen.__init__.__code__ else None

    sys.settrace(at_popen)
    try:
        yield spawned
    finally:
        sys.settrace(None)


def test_an_interrupt_as_a_component_is_spawned_stops_it_too(tmp_path, free_port_factory):
    """Ctrl-C (or `up`'s SIGTERM) the moment a component's `Popen` returns, before the stack holds the
    process, stops that component with the others (a CI run's SIGTERM landed there and left Prometheus
    running)."""
    ports = {k: free_port_factory() for k in ("sidecar_port", "prometheus_port", "alertmanager_port",
                                              "trainer_metrics_port")}
    stack = LocalStack(StackSettings(dir=tmp_path, **ports))
    try:
        with sigint_as_popen_returns(2) as spawned, pytest.raises(KeyboardInterrupt):
            stack.start()
    finally:
        stack.stop()
    assert len(spawned) == 2 and not stack.components
    assert not [p for p in list(ports.values())[:3] if _listening(p)]
    assert not [popen.args[0] for popen in spawned if popen.poll() is None]  # none left running


def test_an_interrupt_as_the_demo_trainer_is_spawned_stops_the_trainer(stack, tmp_path):
    """The same moment for the demo's trainer: the interrupt reaches it as Ctrl-C would (it stops)."""
    demo = DemoSettings(run_id="spawn-interrupted", steps=2, trainer_log=tmp_path / "trainer.log", settle_s=0)
    with sigint_as_popen_returns(1) as spawned, pytest.raises(KeyboardInterrupt):
        run_demo(stack, demo)
    (trainer,) = spawned
    try:
        assert trainer.poll() is not None  # run_demo stopped it and waited before the interrupt went on
    finally:
        if trainer.poll() is None:
            trainer.kill()


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo.py"


def test_the_trl_example_lands_samples_in_the_sidecar_and_metrics_in_prometheus(stack, tmp_path):
    """`examples/trl_grpo.py` as its docstring says to run it, against `otel-grpo up`'s stack: a real
    TRL GRPOTrainer with `instrument(trainer)`, nothing else set."""
    s = stack.settings
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    run = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "4", "--output-dir", str(tmp_path / "trl-example"),
                          "--sidecar", s.sidecar_url, "--metrics-port", str(s.trainer_metrics_port)],
                         env=clean, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "run trl-example:" in run.stdout and "failed" not in run.stderr
    with httpx.Client(timeout=10) as http:
        rows = http.get(f"{s.sidecar_url}/api/runs/trl-example/samples", params={"step_min": 0}).json()
        steps = [row["step"] for row in http.get(f"{s.sidecar_url}/api/runs/trl-example/steps").json()]

        def series(query: str) -> list:
            return http.get(f"{s.prometheus_url}/api/v1/query", params={"query": query}).json()["data"]["result"]

        finished = _wait_for(lambda: series('max_over_time(grpo_run_finished{run_id="trl-example"}[1h])'))
        # lossless: a gauge is served only while its step is the latest, a 1 s scrape may miss a short step
        rewarded = series('max_over_time(grpo_sample_reward_count{run_id="trl-example"}[1h])')
    # 4 steps, num_iterations=2: two generation batches of 8 completions, each sent once
    assert len(rows) == 16 and {r["step"] for r in rows} == {1, 3}
    assert all(r["prompt"].startswith("say ") and "reward.reward_words" in r for r in rows)
    assert sorted(steps) == [1, 2, 3, 4]
    assert [float(r["value"][1]) for r in finished] == [1.0]
    assert rewarded and float(rewarded[0]["value"][1]) == 16


HEARTBEAT_FLOOR_S, FIRST_STEP_FLOOR_S = 10, 15
"""The hang floors of the runs that wait them out, their own (local mode's: 20 s, 30 s): per-run overrides, as a
user sets them for a run whose saves or model load take long; half the default's wait for the same case."""
STACK_RULES = RuleSettings.fast(overrides={"evaluates": {"stall_floor": f"{HEARTBEAT_FLOOR_S}s"},
                                           "saves": {"stall_floor": f"{HEARTBEAT_FLOOR_S}s"},
                                           "no-first-step": {"first_step_floor": f"{FIRST_STEP_FLOOR_S}s"}})

HANGS_BEFORE_ITS_FIRST_STEP = """
import time
from otel_grpo.telemetry import Telemetry
tel = Telemetry.from_env(run_id="no-first-step")
print("open", flush=True)
time.sleep(600)  # loading a model that never loads: no step
"""


def test_a_run_that_hangs_before_its_first_step_pages(stack, tmp_path):
    """A process whose telemetry started but that never completes a step: GRPONoFirstStep fires on the real
    Prometheus past the run's `first_step_floor` (FIRST_STEP_FLOOR_S), the run's start time scraped from its
    `/metrics`."""
    s = stack.settings
    proc = scraped_process(HANGS_BEFORE_ITS_FIRST_STEP, s, tmp_path)
    try:
        assert proc.stdout.readline().strip() == "open", proc.stderr.read()
        query = 'ALERTS{alertname="GRPONoFirstStep", alertstate="firing", run_id="no-first-step"}'
        with httpx.Client(timeout=10) as http:
            def firing() -> list:
                return http.get(f"{s.prometheus_url}/api/v1/query", params={"query": query}).json()["data"]["result"]

            fired = _wait_for(firing, deadline_s=120)
            stalled = http.get(f"{s.prometheus_url}/api/v1/query", params={
                "query": 'ALERTS{alertname=~"GRPOTrainerStalled|GRPOMetricsAbsent", run_id="no-first-step"}'}).json()
            limit = http.get(f"{s.prometheus_url}/api/v1/query", params={
                "query": f'{FIRST_STEP_LIMIT}{{run_id="no-first-step"}}'}).json()["data"]["result"]
        assert proc.poll() is None  # still alive, still exporting: a hang, not a crash
    finally:
        proc.kill()
        proc.wait()
    assert [a["metric"]["severity"] for a in fired] == ["critical"]
    assert stalled["data"]["result"] == []  # neither a stall after a step nor a crash
    assert [float(v["value"][1]) for v in limit] == [FIRST_STEP_FLOOR_S]  # the run's own floor


EVALUATES_THEN_HANGS = """
import time
from otel_grpo.telemetry import Telemetry
tel = Telemetry.from_env(run_id="evaluates")
with tel.step(0) as s:
    s.record({{"kl": 0.01, "step_time": 0.1}})
print("stepped", flush=True)
end = time.monotonic() + {work_s}  # an evaluation longer than the stall limit (HEARTBEAT_FLOOR_S), a beat per batch
while time.monotonic() < end:
    tel.heartbeat()
    time.sleep(0.2)
print("stuck", flush=True)
time.sleep(600)  # a batch that never finishes: no beat, no step
"""


SAVES_THEN_HANGS = """
import os, time
from pathlib import Path
from otel_grpo.telemetry import Telemetry
tel = Telemetry.from_env(run_id="saves")
with tel.step(0) as s:
    s.record({{"kl": 0.01, "step_time": 0.1}})
print("stepped", flush=True)
checkpoint = Path(os.environ["OTEL_GRPO_OUTPUT_DIR"]) / "checkpoint-1"
with tel.beat_while_writing(checkpoint, every_s=0.5):
    checkpoint.mkdir()
    with (checkpoint / "model.safetensors").open("wb") as shard:
        end = time.monotonic() + {work_s}  # a save longer than the stall limit (HEARTBEAT_FLOOR_S), writing
        while time.monotonic() < end:
            shard.write(b"x" * 4096)
            shard.flush()
            time.sleep(0.2)
    print("stuck", flush=True)
    time.sleep(600)  # the file system hangs: nothing more is written, no beat, no step
"""


@pytest.mark.parametrize("run_id, code", [("evaluates", EVALUATES_THEN_HANGS), ("saves", SAVES_THEN_HANGS)])
def test_heartbeats_keep_a_long_evaluation_or_save_from_paging_until_they_stop(stack, tmp_path, run_id, code):
    """Work between steps is progress to GRPOTrainerStalled on the real Prometheus: an evaluation's beats
    (`Telemetry.heartbeat()` per batch) or a save's (`Telemetry.beat_while_writing`: a beat per change on disk)
    for 1.5 times the run's stall limit after a step stay silent; once they stop, it fires."""
    s = stack.settings
    proc = scraped_process(code.format(work_s=1.5 * HEARTBEAT_FLOOR_S), s, tmp_path)
    stalled = f'ALERTS{{alertname="GRPOTrainerStalled", run_id="{run_id}"}}'
    try:
        assert proc.stdout.readline().strip() == "stepped", proc.stderr.read()
        with httpx.Client(timeout=10) as http:
            def series(query: str) -> list:
                return http.get(f"{s.prometheus_url}/api/v1/query", params={"query": query}).json()["data"]["result"]

            assert proc.stdout.readline().strip() == "stuck"
            during = series(f"max_over_time({stalled}[40s])")  # pending or firing at any point of the evaluation
            beats = series(f'grpo_process_activity_time_seconds{{run_id="{run_id}"}}')
            limit = series(f'{STALL_LIMIT}{{run_id="{run_id}"}}')  # the run's own floor, which the work outlasted
            fired = _wait_for(lambda: series(f'{stalled[:-1]}, alertstate="firing"}}'), deadline_s=120)
        assert proc.poll() is None  # still alive: a hang
    finally:
        proc.kill()
        proc.wait()
    assert beats and during == []
    assert [float(v["value"][1]) for v in limit] == [HEARTBEAT_FLOOR_S]
    assert [a["metric"]["severity"] for a in fired] == ["critical"]
