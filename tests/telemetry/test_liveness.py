"""What the alerts read on the trainer's clock (docs/alerts.md): the process vouches for itself at every
collection, reports its steps' end times, says "running" from its start, and measures its log interval
without its start-up or beating pauses."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import httpx

from otel_grpo.telemetry import Telemetry
from otel_grpo.telemetry._prometheus import Scrapes

from .conftest import free_port, points


def _value(captured, name: str) -> float:
    (point,) = points(captured.metrics()[name]).values()
    return point.value


def test_a_new_process_is_running_before_its_first_step(captured):
    """A relaunch under a finished run's id is running again at once, so a crash before its first step pages."""
    assert _value(captured, "grpo.run.finished") == 0.0 and _value(captured, "grpo.run.preempted") == 0.0


def test_each_collection_vouches_for_the_process_until_its_next_export(make_captured):
    """A collection exports its own time plus the push readers' interval (none: a scrape's time); a closing
    process promises nothing further."""
    for run_id, interval_ms in (("short", 100), ("long", 30_000)):
        cap = make_captured(run_id=run_id, metric_export_interval_ms=interval_ms)
        s = cap.tel.settings
        promise = interval_ms / 1000 if {"otlp", "console"} & set(s.metrics_exporters) else 0.0
        before = time.time()
        collected = _value(cap, "grpo.process.alive_until") - promise
        assert before - 1 <= collected <= time.time()
        cap.tel.finish()
        assert _value(cap, "grpo.process.alive_until") <= time.time()


def test_each_collection_exports_the_processs_clock(make_captured):
    """Whatever the export interval, the clock gauge is the time of the collection itself (no promise added):
    Prometheus subtracts it from its own scrape time to learn the process's clock offset."""
    for run_id, interval_ms in (("short", 100), ("long", 30_000)):
        cap = make_captured(run_id=run_id, metric_export_interval_ms=interval_ms)
        before = time.time()
        assert before - 1 <= _value(cap, "grpo.process.clock") <= time.time()


def test_each_step_reports_its_end_time_and_the_first_its_own_duration(captured):
    tel = captured.tel
    time.sleep(0.5)  # a start-up: no step interval
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    assert _value(captured, "grpo.log_interval") < 0.3  # the first step's own duration
    end0 = _value(captured, "grpo.step.end_time")
    assert abs(end0 - time.time()) < 5
    with tel.step(1) as s:
        s.record({"kl": 0.1})
    assert _value(captured, "grpo.step.end_time") >= end0
    assert 0 <= _value(captured, "grpo.log_interval") < 0.3


def test_a_pause_that_beats_is_no_part_of_the_next_interval(captured):
    """A 2.5 s 'evaluation' beating every 0.5 s (at most one beat a second goes out) between two steps: the
    interval counts from its last beat, not from the step before it."""
    tel = captured.tel
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    for _ in range(5):
        time.sleep(0.5)
        tel.heartbeat()
    with tel.step(1) as s:
        s.record({"kl": 0.1})
    assert _value(captured, "grpo.log_interval") < 1.5


def test_finish_waits_about_one_scrape_interval_of_its_watcher(tmp_path, monkeypatch):
    """Scraped every 0.2 s, a finished run's endpoint closes within a scrape or two, not after the 75 s bound; a
    scrape reads the end."""
    port = free_port()
    tel = Telemetry.from_env(run_id="watched", output_dir=str(tmp_path), metrics_exporters=["prometheus"],
                             traces_exporters=["none"], prometheus_port=port)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    seen: list[str] = []
    stop = threading.Event()

    def scrape() -> None:
        with httpx.Client(timeout=2.0) as http:
            while not stop.is_set():
                try:
                    seen.append(http.get(f"http://127.0.0.1:{port}/metrics").text)
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)

    scraper = threading.Thread(target=scrape)
    scraper.start()
    time.sleep(0.5)
    started = time.monotonic()
    tel.finish()
    took = time.monotonic() - started
    stop.set()
    scraper.join()
    assert took < 30  # the bound is 75 s; the watcher scrapes every 0.2 s
    assert any("grpo_run_finished{" in t and "} 1.0" in t.split("grpo_run_finished{", 1)[1].splitlines()[0]
               for t in seen)
    assert Scrapes.FIRST_SCRAPE_S < tel.settings.prometheus_linger_s


_KILLED_EARLY = """
import os, signal, sys, time
from otel_grpo.telemetry import Telemetry
tel = Telemetry.from_env(run_id="killed-early", output_dir=sys.argv[1], metrics_exporters=["console"],
                         traces_exporters=["none"], metric_export_interval_ms=60_000)
time.sleep(3)  # loading a model: no step yet, and 57 s before the first periodic export
os.killpg(0, signal.SIGKILL)  # the container's OOM kill: the trainer and its telemetry child at once
"""


def test_a_process_killed_before_its_first_interval_was_seen(tmp_path):
    """The first export leaves at the start, not one interval later: a run killed while loading is seen, with
    a promise that runs out, so the absence alert fires for it (docs/alerts.md)."""
    started = time.time()
    proc = subprocess.run([sys.executable, "-c", _KILLED_EARLY, str(tmp_path)], capture_output=True, text=True,
                          timeout=60, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL
    exported = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1])
    (promise,) = [p["value"] for rm in exported["resource_metrics"] for sm in rm["scope_metrics"]
                  for m in sm["metrics"] if m["name"] == "grpo.process.alive_until" for p in m["data"]["data_points"]]
    assert started + 60 <= promise <= time.time() + 60  # its start plus the push interval it vouched for


def test_a_further_or_late_record_of_a_step_is_no_step(captured):
    """A second record of the latest step (a summary) and a late one of an earlier step (a re-send) measure no
    interval, move no end time and count no step (the reviewer's g4: 0.1 s and 0.003 s for 1 s steps)."""
    tel = captured.tel
    with tel.step(0):
        pass
    time.sleep(0.6)
    with tel.step(1):
        pass
    end1 = _value(captured, "grpo.step.end_time")
    time.sleep(0.2)
    tel.log_metrics(1, {"train_runtime": 12.0})
    with tel.step(1):  # the same step again
        pass
    tel.log_metrics(0, {"learning_rate": 1e-5})
    assert _value(captured, "grpo.log_interval") >= 0.55  # still step 0 to step 1
    assert _value(captured, "grpo.step.end_time") == end1
    assert _value(captured, "grpo.steps") == 2 and _value(captured, "grpo.step_index") == 1
    time.sleep(0.3)
    with tel.step(2):
        pass
    assert _value(captured, "grpo.log_interval") >= 0.45  # from step 1's end, not from its later records


def test_a_new_attempts_first_step_measures_its_own_duration(captured):
    """A resume in this process: the wait before it (the failed attempt's end, loading the checkpoint) is no step
    interval, as a process's start-up is none."""
    tel = captured.tel
    for step in (0, 1):
        with tel.step(step):
            pass
    time.sleep(1.0)
    tel.new_attempt()
    with tel.step(1):
        pass
    assert _value(captured, "grpo.log_interval") < 0.5
    assert _value(captured, "grpo.step_index") == 1
