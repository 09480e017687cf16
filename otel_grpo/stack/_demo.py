"""`otel-grpo demo`: the demo trainer against the local stack, then what happened.

The trainer runs as a subprocess exporting metrics on its own /metrics (scraped by
the local Prometheus) and traces over OTLP/HTTP straight to the sidecar. While it
runs, a watcher records which alerts Prometheus fires and which reach
Alertmanager and the sidecar: Alertmanager forgets resolved alerts, so looking
only at the end would miss an alert that fired and resolved during the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from .._fault_spec import Fault, check_fault_steps
from .._stop_request import StopRequest
from ..catalog.spans import check_run_id
from ._local import LocalStack, StackSettings
from ._process import interrupts_held

if TYPE_CHECKING:
    import httpx  # the [sidecar] extra: imported where used, so `otel-grpo dashboards` needs none

RECORD_GRACE_S = 3.0


@dataclass(kw_only=True, slots=True)
class DemoSettings:
    """What the demo trainer does."""

    run_id: str = field(default_factory=lambda: "demo-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S"))
    preset: str = "demo"
    steps: int | None = None
    """Training steps; None keeps the preset's."""
    faults: tuple[str, ...] = ()
    """`KIND@STEP`, as the trainer's --fault takes them."""
    trainer_args: tuple[str, ...] = ()
    """Further arguments for `otel-grpo train` (for example a config override)."""
    settle_s: float = 10.0
    """After the trainer exits, how long to wait for fired alerts to reach the sidecar."""
    trainer_log: Path | None = None
    """Send the trainer's output here instead of the terminal."""

    def __post_init__(self) -> None:
        # The trainer's own rule, before the stack starts: an id it would refuse (`/abs`, `../x`) would also
        # put the run's directory and summary outside the stack's --dir.
        check_run_id(self.run_id)
        faults = [Fault.parse(fault) for fault in self.faults]  # the trainer's rules, before the stack starts
        if self.steps is not None and self.steps < 1:
            raise ValueError("steps must be at least 1")
        if self.steps is not None:  # else the preset's steps: the trainer checks them
            check_fault_steps(faults, self.steps)


@dataclass(slots=True)
class DemoSummary:
    """What the run produced; also written to `<dir>/runs/<run_id>/summary.json`."""

    run_id: str
    trainer_exit_code: int
    steps: int
    reward_first: float | None
    reward_last: float | None
    alerts_fired: list[str]
    """Alert names Prometheus held as firing for this run."""
    alerts_in_alertmanager: list[str]
    alerts_in_sidecar: list[str]
    samples_url: str
    samples_spill: str
    """The run's sample spill (`<run dir>/samples`); empty where the trainer spilled none (it failed first)."""
    sidecar_db: str
    """The sidecar's database: `otel-grpo sidecar --db <it>` serves the run again after the stack stops."""
    urls: dict[str, str]
    """Pages that show this run after it ended (`LocalStack.run_urls`), while the stack is up."""
    started_at: float
    finished_at: float


class AlertWatcher:
    """Polls Prometheus and Alertmanager for this run's alerts on a background thread."""

    def __init__(self, settings: StackSettings, run_id: str, period_s: float = 0.5) -> None:
        self.settings, self.run_id, self.period_s = settings, run_id, period_s
        self.prometheus: set[str] = set()
        self.alertmanager: set[str] = set()
        self.suppressed: set[str] = set()
        """Inhibited or silenced in Alertmanager: never delivered to a receiver."""
        self._stop = threading.Event()
        self._recording = True
        self._thread = threading.Thread(target=self._loop, name="alert-watcher", daemon=True)

    def freeze(self) -> None:
        """Stop recording: alerts after the run (GRPOMetricsAbsent, once the trainer is
        gone) say nothing about the run itself."""
        self._recording = False

    def __enter__(self) -> "AlertWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def poll(self, client: httpx.Client) -> None:
        import httpx

        s, run = self.settings, self.run_id
        if not self._recording:
            return
        try:
            r = client.get(f"{s.prometheus_url}/api/v1/query",
                           params={"query": f'ALERTS{{alertstate="firing", run_id="{run}"}}'})
            self.prometheus.update(x["metric"]["alertname"] for x in r.json()["data"]["result"])
            r = client.get(f"{s.alertmanager_url}/api/v2/alerts", params={"filter": f'run_id="{run}"'})
            for a in r.json():
                self.alertmanager.add(a["labels"]["alertname"])
                if a["status"]["state"] == "suppressed":
                    self.suppressed.add(a["labels"]["alertname"])
        except (httpx.HTTPError, KeyError, ValueError):
            pass  # a slow answer costs one poll; the next one catches up

    def _loop(self) -> None:
        import httpx

        with httpx.Client(timeout=5.0) as client:
            while not self._stop.wait(self.period_s):
                self.poll(client)


def trainer_command(settings: StackSettings, demo: DemoSettings) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the demo trainer, per the trainer's CLI contract."""
    out = run_dir(settings, demo)
    argv = [sys.executable, "-m", "otel_grpo.cli", "train", "--preset", demo.preset,
            "--output-dir", str(out), "--run-id", demo.run_id]
    if demo.steps is not None:
        argv += ["--steps", str(demo.steps)]
    for fault in demo.faults:
        argv += ["--fault", fault]
    argv += list(demo.trainer_args)
    env = settings.trainer_env()
    return argv, env


def run_dir(settings: StackSettings, demo: DemoSettings) -> Path:
    return settings.dir / "runs" / demo.run_id


def _rewards(path: Path) -> tuple[int, float | None, float | None]:
    """Steps, first and last mean reward from the trainer's metrics.jsonl."""
    rewards = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0, None, None
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("reward"), (int, float)):
            rewards.append(float(row["reward"]))
    return len(lines), (rewards[0] if rewards else None), (rewards[-1] if rewards else None)


def _sidecar_alerts(client: httpx.Client, settings: StackSettings, run_id: str) -> set[str]:
    import httpx

    try:  # the run's own (exact); 404 until the sidecar has stored one of its steps
        r = client.get(f"{settings.sidecar_url}/api/runs/{quote(run_id, safe='/')}/alerts")
        if r.status_code != 200:
            return set()
        return {a["alertname"] for a in r.json() if a.get("alertname")}
    except (httpx.HTTPError, KeyError, ValueError, TypeError, AttributeError):
        return set()


def _exit_code(proc: subprocess.Popen, stop: StopRequest) -> int:
    """The trainer's exit code once it exits; KeyboardInterrupt once `stop` is requested."""
    while True:
        try:
            return proc.wait(0.2)
        except subprocess.TimeoutExpired:
            stop.check()


def _settle(watcher: AlertWatcher, settings: StackSettings, run_id: str, timeout_s: float,
            stop: StopRequest) -> set[str]:
    """Wait until every alert Prometheus fired and Alertmanager did not suppress reached the sidecar."""
    import httpx

    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5.0) as client:
        while True:
            in_sidecar = _sidecar_alerts(client, settings, run_id)
            if watcher.prometheus - watcher.suppressed <= in_sidecar or time.monotonic() > deadline:
                return in_sidecar
            stop.wait(0.5)
            stop.check()


def run_demo(stack: LocalStack, demo: DemoSettings, stop: StopRequest | None = None) -> DemoSummary:
    """Run the trainer to completion against a started stack and summarize; KeyboardInterrupt (Ctrl-C, or
    `stop` requested) stops the trainer as Ctrl-C would and goes on once it has exited."""
    stop = StopRequest() if stop is None else stop  # None: a request that never comes
    settings = stack.settings
    out = run_dir(settings, demo)
    out.mkdir(parents=True, exist_ok=True)
    argv, env = trainer_command(settings, demo)
    started = time.time()
    if demo.trainer_log:
        demo.trainer_log.parent.mkdir(parents=True, exist_ok=True)  # as --dir's folders: made where missing
    log = open(demo.trainer_log, "ab") if demo.trainer_log else None
    try:
        with AlertWatcher(settings, demo.run_id) as watcher:
            proc = None
            try:
                with interrupts_held():  # an interrupt comes once `proc` holds the trainer, so it is stopped
                    proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=log)
                code = _exit_code(proc, stop)
            except KeyboardInterrupt:
                if proc is not None:
                    proc.send_signal(signal.SIGINT)  # the user stopped it: a finished run (SIGTERM: preempted)
                    proc.wait()
                raise
            # A few evaluations more: an alert whose `for:` ends with the last step still counts.
            stop.wait(RECORD_GRACE_S)
            stop.check()
            watcher.freeze()
            in_sidecar = _settle(watcher, settings, demo.run_id, demo.settle_s, stop) & watcher.prometheus
    finally:
        if log:
            log.close()
    finished = time.time()
    steps, first, last = _rewards(out / "metrics.jsonl")
    summary = DemoSummary(
        run_id=demo.run_id, trainer_exit_code=code, steps=steps, reward_first=first, reward_last=last,
        alerts_fired=sorted(watcher.prometheus), alerts_in_alertmanager=sorted(watcher.alertmanager),
        alerts_in_sidecar=sorted(in_sidecar),
        samples_url=f"{settings.sidecar_url}/api/runs/{demo.run_id}/samples",
        samples_spill=str(out / "samples") if (out / "samples").is_dir() else "", sidecar_db=str(stack.sidecar_db),
        urls=stack.run_urls(demo.run_id, started, finished), started_at=started, finished_at=finished,
    )
    (out / "summary.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return summary


def format_summary(s: DemoSummary, live: bool = True) -> str:
    """The human summary printed after the demo: with `live`, the pages that show the run while the
    stack serves them; `live=False` once the stack is stopping (no URLs that are about to be dead:
    the samples are in the spill and the sidecar's database)."""
    def num(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    lines = [
        f"run {s.run_id}: {s.steps} steps, trainer exit code {s.trainer_exit_code}",
        f"reward (mean): {num(s.reward_first)} -> {num(s.reward_last)}",
        f"alerts fired:  {', '.join(s.alerts_fired) or 'none'}",
        f"  reached Alertmanager: {', '.join(s.alerts_in_alertmanager) or 'none'};"
        f" reached the sidecar: {', '.join(s.alerts_in_sidecar) or 'none'}",
    ]
    if live:
        lines.append("The run, its alerts and their history (Alertmanager forgets resolved alerts; the sidecar keeps them):")
        lines += [f"  {name:<16} {url}" for name, url in (s.urls or {"samples": s.samples_url}).items()]
        lines.append(f"  {'samples spilled':<16} {s.samples_spill or 'none (the trainer spilled no samples)'}")
    else:
        spill = f"spilled to {s.samples_spill}" if s.samples_spill else "none spilled (the trainer wrote none)"
        lines.append(f"samples: {spill}; the run is kept in {s.sidecar_db} "
                     f"(`otel-grpo sidecar --db {s.sidecar_db}` serves it again)")
    return "\n".join(lines)
