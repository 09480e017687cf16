"""A run's end reaches Prometheus: the local pull endpoint lingers after `finish()` (or a preemption) until one
more scrape, and OTLP metrics wait for a collector that is restarting, so Prometheus sees how the run ended
(else GRPOMetricsAbsent pages a crash); what could not get through is said once. And every step's KL is also
one observation of `grpo.step.kl` (one-step spikes between scrapes)."""

from __future__ import annotations

import http.server
import logging
import threading
import time
import urllib.request

import httpx
import pytest

from otel_grpo.telemetry import Telemetry
from otel_grpo.telemetry._prometheus import Scrapes
from tests._support.waiting import wait_for

from ._receiver import OTLPReceiver
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
    monkeypatch.setattr(Scrapes, "UNWATCHED_AFTER_S", 60.0)  # watched: scraped within any scrape interval
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


def test_a_late_scrape_still_reads_the_end_where_prometheus_was_restarting(tmp_path, caplog):
    """Scraped every 0.2 s, then not (Prometheus restarting as the run finishes): the endpoint waits on for the
    scrape that comes back 3 s later, well past its watcher's interval, and that scrape reads the end."""
    port = free_port()
    tel = Telemetry.from_env(run_id="late", output_dir=str(tmp_path), metrics_exporters=["prometheus"],
                             traces_exporters=["none"], prometheus_port=port, prometheus_linger_s=60.0)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    for _ in range(3):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        time.sleep(0.2)
    ender = threading.Thread(target=tel.finish)
    with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        ender.start()
        ender.join(3.0)
        assert ender.is_alive()
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        wait_for(lambda: not ender.is_alive(), "finish() once the late scrape read the run", timeout=30)
    assert _finished_line(text)
    assert not [r for r in caplog.records if "did not reach Prometheus" in r.getMessage()]


def _finish_said(tel: Telemetry, caplog) -> tuple[list[str], float]:
    """`tel.finish()`: the warnings it gave, and how long it took."""
    with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        started = time.monotonic()
        tel.finish()
        took = time.monotonic() - started
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING], took


def _pushed_run(tmp_path, port: int, linger_s: float, interval_ms: int = 10_000) -> Telemetry:
    """A run pushing its metrics to the receiver on `port`, which has taken one export of them."""
    tel = Telemetry.from_env(run_id="pushed", output_dir=str(tmp_path), metrics_exporters=["otlp"],
                             traces_exporters=["none"], otlp_protocol="http/protobuf",
                             otlp_endpoint=f"http://127.0.0.1:{port}", prometheus_linger_s=linger_s,
                             metric_export_interval_ms=interval_ms)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    assert tel.flush(10)
    return tel


def _finished_after_a_restart(tel: Telemetry, port: int, caplog) -> OTLPReceiver:
    """`tel.finish()` while nothing listens on `port`: still waiting 3 s on, when a receiver comes back there and
    takes what it sends until `finish()` returns. That receiver."""
    ender = threading.Thread(target=tel.finish)
    with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        ender.start()
        ender.join(3.0)
        assert ender.is_alive()
        with OTLPReceiver(port) as back:
            wait_for(lambda: not ender.is_alive(), "finish() once the collector was back", timeout=30)
    return back


def test_a_run_that_finishes_while_its_collector_restarts_delivers_its_end_once_it_is_back(tmp_path, caplog):
    """The collector goes away before `finish()` and is back 3 s later on its port: the run's end gets there
    (grpo.run.finished = 1), and nothing is said; `finish()` waited for it, not for the whole bound."""
    with OTLPReceiver() as first:
        port = first.port
        tel = _pushed_run(tmp_path, port, linger_s=60.0)
        assert first.metric_points("grpo.run.finished")[-1][1].as_double == 0.0
    back = _finished_after_a_restart(tel, port, caplog)
    assert back.metric_points("grpo.run.finished")[-1][1].as_double == 1.0
    assert not [r for r in caplog.records if "did not reach Prometheus" in r.getMessage()]


def test_a_restart_that_outlasts_the_minute_since_the_last_export_is_still_waited_for(tmp_path, caplog, monkeypatch):
    """Whether the collector is gone is judged as the run ends (its last export within `GONE_AFTER_S`, here 2 s),
    not again while waiting: a restart that began before the end and ends 3 s into the wait (past the last
    export's 2 s) still takes the run's end."""
    from otel_grpo.telemetry import _exporters

    monkeypatch.setattr(_exporters, "GONE_AFTER_S", 2.0)
    with OTLPReceiver() as first:
        port = first.port
        tel = _pushed_run(tmp_path, port, linger_s=30.0, interval_ms=200)
    time.sleep(1.0)
    back = _finished_after_a_restart(tel, port, caplog)
    assert back.metric_points("grpo.run.finished")[-1][1].as_double == 1.0


def test_a_console_exporter_beside_a_dead_collector_is_no_collector_that_took_the_run(tmp_path, caplog):
    """`otlp,console`: the console's exports succeed, the collector never took one: nothing downstream knows the
    run, so its end is not waited for, and the dead collector is the one warning."""
    tel = Telemetry.from_env(run_id="console", output_dir=str(tmp_path), metrics_exporters=["otlp", "console"],
                             traces_exporters=["none"], otlp_protocol="http/protobuf",
                             otlp_endpoint=f"http://127.0.0.1:{free_port()}", prometheus_linger_s=30.0)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    tel.flush(5)
    said, took = _finish_said(tel, caplog)
    assert len(said) == 1, said
    assert took < 15, took  # not the 30 s wait


def test_a_run_whose_collector_stays_away_says_once_that_its_end_is_lost(tmp_path, caplog):
    """Bounded by `prometheus_linger_s`, and said: Prometheus will take the run for crashed."""
    with OTLPReceiver() as gone:
        tel = _pushed_run(tmp_path, gone.port, linger_s=2.0)
    said, took = _finish_said(tel, caplog)
    assert len(said) == 1, said  # the collector's going is said once, with what it cost the run
    assert "did not reach Prometheus" in said[0] and "GRPOMetricsAbsent" in said[0], said
    assert took < 30, took  # the bound, not the exporters' own retries on top of it


def test_a_collector_gone_for_a_minute_is_not_waited_for_and_that_is_said(tmp_path, caplog, monkeypatch):
    """Its last export taken longer ago than a minute and two export intervals (here 1 s, 0.2 s intervals): the
    collector is gone, not restarting; `finish()` does not wait the bound, and says the end is lost."""
    from otel_grpo.telemetry import _exporters

    monkeypatch.setattr(_exporters, "GONE_AFTER_S", 1.0)
    with OTLPReceiver() as gone:
        tel = _pushed_run(tmp_path, gone.port, linger_s=60.0, interval_ms=200)
    time.sleep(1.5)
    said, took = _finish_said(tel, caplog)
    assert len(said) == 1 and "did not reach Prometheus" in said[0], said
    assert took < 30, took  # not the 60 s bound


def test_a_prometheus_gone_for_a_minute_is_not_waited_for_and_that_is_said(tmp_path, caplog, monkeypatch):
    """Scraped once, then not for longer than any scrape interval (`UNWATCHED_AFTER_S`; here 1 s): its Prometheus
    is gone, not restarting. `finish()` does not wait the bound for it, and says the end is lost."""
    monkeypatch.setattr(Scrapes, "UNWATCHED_AFTER_S", 1.0)
    port = free_port()
    tel = Telemetry.from_env(run_id="gone", output_dir=str(tmp_path), metrics_exporters=["prometheus"],
                             traces_exporters=["none"], prometheus_port=port, prometheus_linger_s=60.0)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
    httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    time.sleep(1.5)
    said, took = _finish_said(tel, caplog)
    assert len(said) == 1 and "did not reach Prometheus" in said[0], said
    assert took < 30, took  # not the 60 s bound


class _ForwardProxy(http.server.BaseHTTPRequestHandler):
    """An HTTP forward proxy of one route: what it is asked for goes to `target`'s port on 127.0.0.1."""

    target = 0

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        path = "/" + self.path.split("/", 3)[3]  # the absolute URI a proxy is sent, as a path
        body = self.rfile.read(int(self.headers["Content-Length"]))
        forwarded = urllib.request.Request(
            f"http://127.0.0.1:{self.target}{path}", data=body, method="POST",
            headers={k: v for k, v in self.headers.items() if k.lower() in ("content-type", "content-encoding")})
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(forwarded, timeout=5) as answer:
            data, status = answer.read(), answer.status
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_a_collector_reached_through_a_proxy_is_not_taken_for_down(tmp_path, caplog, monkeypatch):
    """A cluster that reaches its collector only through HTTP_PROXY (a name only the proxy resolves): the end goes
    out at once and nothing is said, where a direct probe of the name waited the whole bound and warned."""
    with OTLPReceiver() as rx:
        _ForwardProxy.target = rx.port
        proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ForwardProxy)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            tel = Telemetry.from_env(run_id="proxied", output_dir=str(tmp_path), metrics_exporters=["otlp"],
                                     traces_exporters=["none"], otlp_protocol="http/protobuf",
                                     otlp_endpoint="http://otel-collector.invalid:4318", prometheus_linger_s=30.0)
            with tel.step(0) as s:
                s.record({"kl": 0.1})
            assert tel.flush(10)
            said, took = _finish_said(tel, caplog)
        finally:
            proxy.shutdown()
            proxy.server_close()
    assert said == []
    assert took < 10, took
    assert rx.metric_points("grpo.run.finished")[-1][1].as_double == 1.0


_PROXY_VARS = ("grpc_proxy", "https_proxy", "http_proxy", "all_proxy", "no_grpc_proxy", "no_proxy",
               "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.mark.parametrize("env, grpc, expected", [
    ({"grpc_proxy": "http://gp:3128", "https_proxy": "http://hp:3128"}, True, "http://gp:3128"),
    ({"https_proxy": "http://hp:3128"}, True, "http://hp:3128"),  # whatever the target's scheme
    ({"HTTPS_PROXY": "http://hp:3128"}, True, None),  # gRPC reads lowercase names only
    ({"https_proxy": "http://hp:3128", "no_grpc_proxy": "collector"}, True, None),
    ({"https_proxy": "http://hp:3128", "no_proxy": ".cluster"}, True, None),
    ({"HTTP_PROXY": "http://hp:3128"}, False, "http://hp:3128"),
    ({"ALL_PROXY": "http://ap:3128"}, False, "http://ap:3128"),
    ({"HTTP_PROXY": "http://hp:3128", "NO_PROXY": "10.0.0.0/8"}, False, None),  # a CIDR entry, as requests reads it
])
def test_the_end_probe_takes_the_proxy_the_exporters_client_takes(monkeypatch, env, grpc, expected):
    """Behind a proxy the probe must dial what the exporter dials: requests' choice for OTLP/HTTP, gRPC's own for
    gRPC; a probe that dials the collector where the exporter goes through a proxy waits and warns falsely."""
    from otel_grpo.telemetry._providers import _proxy

    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    host = "10.1.2.3" if "10.0.0.0/8" in env.values() else ("collector" if "no_grpc_proxy" in env else
                                                             "collector.cluster")
    assert _proxy(f"http://{host}:4317", grpc=grpc) == expected
