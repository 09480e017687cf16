"""The local pull endpoint lingers after `finish()` (or a preemption), so Prometheus sees how the run ended;
and every step's KL is also one observation of `grpo.step.kl` (one-step spikes between scrapes)."""

from __future__ import annotations

import threading

import httpx

from otel_grpo.telemetry import Telemetry
from otel_grpo.telemetry._prometheus import Scrapes
from tests._support.waiting import wait_for

from .conftest import free_port, points


def _finished_line(text: str, marker: str = "grpo_run_finished") -> bool:
    return any(line.startswith(marker + "{") and line.endswith(" 1.0") for line in text.splitlines())


def _scrape_during(tel: Telemetry, port: int, end) -> list[str]:
    seen: list[str] = []
    ender = threading.Thread(target=end)
    ender.start()
    with httpx.Client(timeout=1.0) as http:
        while ender.is_alive():
            try:
                seen.append(http.get(f"http://127.0.0.1:{port}/metrics").text)
            except httpx.HTTPError:
                pass
    ender.join()
    return seen


def _scraped_run(tmp_path, run_id: str, scraped: bool = True) -> tuple[Telemetry, int]:
    """A run serving /metrics after one step; `scraped`: Prometheus has read it while it trains."""
    port = free_port()
    tel = Telemetry.from_env(run_id=run_id, output_dir=str(tmp_path), metrics_exporters=["prometheus"],
                             traces_exporters=["none"], prometheus_port=port, prometheus_linger_s=1.0)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    if scraped:
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    return tel, port


def test_a_finished_run_is_scraped_as_finished_before_the_endpoint_closes(tmp_path):
    tel, port = _scraped_run(tmp_path, "linger")
    scrapes = _scrape_during(tel, port, tel.finish)
    assert any(_finished_line(text) for text in scrapes)


def test_a_preempted_run_is_scraped_as_preempted_before_the_endpoint_closes(tmp_path):
    """Else Prometheus never learns of the preemption, and the run's alerts page a crash."""
    tel, port = _scraped_run(tmp_path, "preempt")
    scrapes = _scrape_during(tel, port, lambda: tel.shutdown(preempted=True))
    assert any(_finished_line(text, "grpo_run_preempted") for text in scrapes)
    assert not any(_finished_line(text) for text in scrapes)


def test_a_crashed_run_is_never_scraped_as_finished(tmp_path):
    tel, port = _scraped_run(tmp_path, "crash", scraped=False)
    scrapes = _scrape_during(tel, port, tel.shutdown)
    assert not any(_finished_line(text) for text in scrapes)


def test_each_steps_kl_is_one_observation_of_the_per_step_histogram(captured):
    for step, kl in enumerate((0.05, 1.5, 0.05)):
        with captured.tel.step(step) as s:
            s.record({"kl": kl})
    captured.tel.flush()
    (point,) = points(captured.metrics()["grpo.step.kl"]).values()
    bounds = list(point.explicit_bounds)
    over = sum(point.bucket_counts[bounds.index(1.0) + 1:])
    assert point.count == 3 and over == 1


def test_finish_waits_for_one_more_scrape_only_and_not_at_all_when_nothing_scrapes(tmp_path, monkeypatch):
    """The linger is a bound, not a sleep: a run nobody scrapes ends at once, one that is scraped ends
    once a scrape has read `grpo_run_finished` = 1 (the data is safe then)."""
    monkeypatch.setattr(Scrapes, "UNWATCHED_AFTER_S", 0.0)  # served long enough, unscraped: nobody watches
    port = free_port()
    unwatched = Telemetry.from_env(run_id="alone", output_dir=str(tmp_path / "a"), metrics_exporters=["prometheus"],
                                   traces_exporters=["none"], prometheus_port=port, prometheus_linger_s=60.0)
    with unwatched.step(0) as s:
        s.record({"kl": 0.1})
    ender = threading.Thread(target=unwatched.finish)
    ender.start()
    wait_for(lambda: not ender.is_alive(), "finish() without the 60 s linger", timeout=30)
    port = free_port()
    watched = Telemetry.from_env(run_id="watched", output_dir=str(tmp_path / "w"), metrics_exporters=["prometheus"],
                                 traces_exporters=["none"], prometheus_port=port, prometheus_linger_s=60.0)
    with watched.step(0) as s:
        s.record({"kl": 0.1})
    httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)  # Prometheus has seen this run
    scrapes = _scrape_during(watched, port, watched.finish)
    assert any(_finished_line(text) for text in scrapes)


def test_a_short_run_not_scraped_yet_waits_for_its_first_scrape(tmp_path):
    """A run that ends before Prometheus reached its endpoint (a short run, a loaded machine) still
    lingers until one scrape has read it: otherwise Prometheus would never see the run at all."""
    port = free_port()
    tel = Telemetry.from_env(run_id="short", output_dir=str(tmp_path), metrics_exporters=["prometheus"],
                             traces_exporters=["none"], prometheus_port=port, prometheus_linger_s=60.0)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    ender = threading.Thread(target=tel.finish)
    ender.start()
    ender.join(1.0)
    assert ender.is_alive()  # waiting for a first scrape
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    wait_for(lambda: not ender.is_alive(), "finish() once the first scrape read the run", timeout=30)
    assert _finished_line(text)
