"""The local pull endpoint lingers after `finish()`, so Prometheus sees `grpo_run_finished` = 1;
and every step's KL is also one observation of `grpo.step.kl` (one-step spikes between scrapes)."""

from __future__ import annotations

import threading

import httpx

from otel_grpo.telemetry import Telemetry

from .conftest import free_port, points


def _finished_line(text: str) -> bool:
    return any(line.startswith("grpo_run_finished{") and line.endswith(" 1.0") for line in text.splitlines())


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


def test_a_finished_run_is_scraped_as_finished_before_the_endpoint_closes(tmp_path):
    port = free_port()
    tel = Telemetry.from_env(run_id="linger", output_dir=str(tmp_path), metrics_exporters=["prometheus"],
                             traces_exporters=["none"], prometheus_port=port, prometheus_linger_s=1.0)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    scrapes = _scrape_during(tel, port, tel.finish)
    assert any(_finished_line(text) for text in scrapes)


def test_a_crashed_run_is_never_scraped_as_finished(tmp_path):
    port = free_port()
    tel = Telemetry.from_env(run_id="crash", output_dir=str(tmp_path), metrics_exporters=["prometheus"],
                             traces_exporters=["none"], prometheus_port=port, prometheus_linger_s=1.0)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
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
