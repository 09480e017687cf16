"""The replay of per-step values as scraped series (the promtool scenarios' input), checked against the
training process's own exports: the same steps through the real telemetry give the same counters."""

from __future__ import annotations

import re

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_grpo.catalog import STEP_CHECKS
from otel_grpo.generate._replay import Pause, Segment, encode, expand, replay
from otel_grpo.telemetry._instruments import Instruments

KL = [0.1, 1.5, 1.2, 0.4, 1.1, 2.5, 3.0, 1.5, 0.2, 5.5]
GRAD_NORM = [1.0] * 9 + [12.0] + [1.0] * 15 + [12.0, 1.0, 4.0, 1.0]


def _last(series: dict[str, str], name: str) -> float:
    """The last value of promtool's notation (`a`, `axn`, `a+bxn`)."""
    m = re.fullmatch(r"(-?[\d.e]+)(?:([+-][\d.e]+)?x(\d+))?", series[name].split()[-1])
    assert m, series[name]
    return float(m.group(1)) + float(m.group(2) or 0) * int(m.group(3) or 0)


REWARD = [0.6] * 12 + [0.1] * 3 + [0.6] * 5  # a collapse against the run's own steps (a trend check)


@pytest.mark.parametrize("key, values", [("kl", KL), ("grad_norm", GRAD_NORM), ("reward", REWARD)],
                         ids=["kl", "grad_norm-relative", "reward-trend"])
def test_replayed_step_evidence_equals_what_the_trainer_exports(key, values):
    reader = InMemoryMetricReader()
    instruments = Instruments(MeterProvider(metric_readers=[reader]).get_meter("t"), {"run_id": "r"})
    for step, value in enumerate(values):
        instruments.record_scalars({key: value})
        instruments.count_steps(1, step, False, 10.0, 10.0 * (step + 1))
    exported = {}
    for metric in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics:
        if metric.name in ("grpo.step.beyond", "grpo.step.streak"):
            for p in metric.data.data_points:
                a = dict(p.attributes)
                assert ("process" in a) == (metric.name == "grpo.step.beyond")
                exported[(metric.name, a["signal"], a["bound"], a.get("streak"))] = p.value
    series = replay([Segment("r", {key: values}, step_s=10)], scrape_s=10, scrapes=len(values))
    assert exported and any(v > 0 for (name, *_), v in exported.items() if name == "grpo.step.beyond")
    assert {signal for _, signal, _, _ in exported} == {c.name for c in STEP_CHECKS.values() if key in c.inputs}
    for (name, signal, bound, streak), value in exported.items():
        if name == "grpo.step.beyond":
            series_name = f'grpo_step_beyond_total{{run_id="r", job="grpo-trainer", instance="r", signal="{signal}", bound="{bound}", process="0", streak="{streak}"}}'
        else:
            series_name = f'grpo_step_streak{{run_id="r", job="grpo-trainer", instance="r", signal="{signal}", bound="{bound}"}}'
        assert _last(series, series_name) == value, series_name


def test_a_grad_norm_spike_counts_against_the_median_of_earlier_steps_after_a_warm_up():
    series = replay([Segment("r", {"grad_norm": GRAD_NORM}, step_s=10)], scrape_s=10, scrapes=len(GRAD_NORM))
    spikes = {b: _last(series, f'grpo_step_beyond_total{{run_id="r", job="grpo-trainer", instance="r", signal="grad_norm", bound="{b}", process="0", streak="1"}}')
              for b in ("3.0", "5.0", "10.0", "20.0")}
    # 12 at step 9 (9 earlier steps, fewer than the baseline's 10) is never judged; 12 at step 25 is 12 x the
    # median 1.0; 4.0 is 4 x.
    assert spikes == {"3.0": 2, "5.0": 1, "10.0": 1, "20.0": 0}


def test_a_crash_goes_stale_after_the_expiry_and_a_resume_takes_over():
    first = Segment("r", {"kl": [0.1] * 3}, step_s=60, end="crash", expire_s=120)
    resumed = Segment("r", {"kl": [0.1] * 2}, step_s=60, start_s=600, first_step=1)
    series = replay([first, resumed], scrape_s=60, scrapes=13)
    # steps at 1-3 min, kept to 5 min, stale at 6, nothing, then the resumed process from step 1.
    assert series['grpo_step_index{run_id="r", job="grpo-trainer", instance="r"}'] == "_ 0+1x2 2 2 stale _x4 1 2 2"
    # the end markers are 0 from each process's start on
    assert series['grpo_run_finished{run_id="r", job="grpo-trainer", instance="r"}'] == "0x5 stale _x3 0x3"


def test_notation():
    assert expand("1*2 0.5,nan*2") == pytest.approx([1, 1, 0.5, float("nan"), 0.5, float("nan")], nan_ok=True)
    assert expand("1 none*2") == [1.0, None, None]
    assert encode([None, 1.0, 2.0, 3.0, 3.0, "stale"]) == "_ 1+1x2 3 stale"
    with pytest.raises(ValueError, match="value"):
        expand("1x3")


def test_a_value_not_logged_at_a_step_leaves_the_scrape_and_counts_nothing():
    """A recorded run's absent key (TRL logs no throughput at its first step) is no non-finite value; a step
    without it leaves the gauge without a data point, as the trainer's instruments export it."""
    pulled = replay([Segment("r", {"tokens_per_second": [None, 5.0, None]}, step_s=10, expire_s=0)], scrape_s=10,
                    scrapes=3)
    assert pulled['grpo_throughput{run_id="r", job="trainer", instance="127.0.0.1:9464"}'] == "_x2 5 stale"  # the trainer's /metrics: gone, stale
    # no non-finite count of its own; those of the signals that stop training exist at 0 from the start
    assert {n for n in pulled if n.startswith("grpo_nonfinite")} == {
        f'grpo_nonfinite_total{{run_id="r", job="trainer", instance="127.0.0.1:9464", process="0", signal="{k}"}}'
        for k in ("loss", "grad_norm")}
    # through the collector too: the next export ends the series ("no recorded value"), which its exporter drops
    # (before, it served the last value until metric_expiration: "_x2 5 5")
    collected = replay([Segment("r", {"tokens_per_second": [None, 5.0, None]}, step_s=10)], scrape_s=10, scrapes=3)
    assert collected['grpo_throughput{run_id="r", job="grpo-trainer", instance="r"}'] == "_x2 5 stale"
    reader = InMemoryMetricReader()
    instruments = Instruments(MeterProvider(metric_readers=[reader]).get_meter("t"), {"run_id": "r"})
    exported = []
    for step, value in enumerate([None, 5.0, None]):
        instruments.begin_record(False, step)
        instruments.record_scalars({} if value is None else {"tokens_per_second": value})
        instruments.end_record()
        metrics = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        exported.append(next((m.data.data_points[0].value for m in metrics if m.name == "grpo.throughput"), None))
        counted = {p.attributes["signal"] for m in metrics if m.name == "grpo.nonfinite" for p in m.data.data_points}
        assert counted == {"loss", "grad_norm"}
    assert exported == [None, 5.0, None]


def test_a_skipped_update_counts_as_the_trainer_counts_it():
    """The steps whose update the loop skipped (`Segment.skipped`) are the trainer's skipped-steps counter: a series
    of the process, at 0 from its start (so a skip is an increase of a known series), one per skipped step."""
    reader = InMemoryMetricReader()
    instruments = Instruments(MeterProvider(metric_readers=[reader]).get_meter("t"), {"run_id": "r"})
    skipped = {1, 3}
    exported: list[dict] = []
    for step in range(5):
        instruments.count_steps(1, step, step in skipped, 10.0, 10.0 * (step + 1))
        metrics = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        exported.append({tuple(sorted(p.attributes)): p.value for m in metrics if m.name == "grpo.skipped_steps"
                         for p in m.data.data_points})
    series = replay([Segment("r", {"kl": [0.1] * 5}, step_s=10, skipped=frozenset(skipped))], scrape_s=10, scrapes=5)
    (name,) = [n for n in series if n.startswith("grpo_skipped_steps_total")]
    assert name == 'grpo_skipped_steps_total{run_id="r", job="grpo-trainer", instance="r", process="0"}'
    assert exported[0] == {("process", "run_id"): 0} and set(exported[-1]) == {("process", "run_id")}
    # a scrape at the start, then one per step end: the counter's values after each step
    assert series[name] == encode([0.0] + [e[("process", "run_id")] for e in exported])


def _values(text: str) -> list[float | None]:
    """promtool's expanding notation back to one value per scrape (None: missing or stale)."""
    out: list[float | None] = []
    for token in text.split():
        m = re.fullmatch(r"(_|stale|-?[\d.e]+)(?:([+-][\d.e]+))?(?:x(\d+))?", token)
        assert m, token
        if m.group(1) in ("_", "stale"):
            out += [None] * int(m.group(3) or 1)
            continue
        start, step, n = float(m.group(1)), float(m.group(2) or 0), int(m.group(3) or 0)
        out += [start + step * k for k in range(n + 1)]
    return out


TIMES = ("grpo_process_start_time_seconds", "grpo_step_end_time_seconds", "grpo_process_activity_time_seconds",
         "grpo_process_alive_until_seconds", "grpo_process_clock_seconds")


@pytest.mark.parametrize("export_s, expire_s", [(0.0, 0.0), (60.0, 120.0)], ids=["pull", "push"])
@pytest.mark.parametrize("clock_s", [-600.0, 600.0], ids=["behind", "ahead"])
def test_a_skewed_clock_shifts_every_time_the_process_exports_and_no_scrape(clock_s, export_s, expire_s):
    """A trainer clock off Prometheus's: its start, step ends, heartbeats, promise and clock move by the offset
    (and its `process` label, its start), what it counts does not, and the scrapes keep Prometheus's time: a
    pull endpoint's clock gauge is the scrape's time plus the offset."""
    def run(skew: float) -> dict[str, list]:
        seg = Segment("r", {"kl": [0.1] * 12}, 30.0, start_s=15.0, export_s=export_s, expire_s=expire_s,
                      pauses={5: Pause(300.0, 30.0)}, end="finish", clock_s=skew)
        series = replay([seg], scrape_s=15.0, scrapes=60)
        return {re.sub(r'process="-?\d+"', "process", name): _values(v) for name, v in series.items()}

    agreed, skewed = run(0.0), run(clock_s)
    assert set(skewed) == set(agreed)
    for name, values in agreed.items():
        shift = clock_s if name.split("{")[0] in TIMES else 0.0
        assert skewed[name] == [None if v is None else v + shift for v in values], name
    clock = next(v for n, v in skewed.items() if n.startswith("grpo_process_clock_seconds"))
    if export_s == 0:
        assert all(v is None or v == 15.0 * k + clock_s for k, v in enumerate(clock))


def test_a_run_moved_to_another_replica_has_two_copies_until_the_first_expires():
    """Exports every 10 s, moved to replica 1 at 5 minutes: replica 0 serves its last values until its 2-minute
    expiry (then one staleness marker), replica 1 serves a copy of its own, under its own `pod`, from its first
    export on, at the counts so far."""
    run = Segment("r", {"kl": [0.1] * 60}, step_s=10, export_s=10, expire_s=120, moved_s=300)
    series = replay([run], scrape_s=15, scrapes=40)
    first = 'grpo_step_index{run_id="r", job="grpo-trainer", instance="r"}'
    moved = 'grpo_step_index{run_id="r", job="grpo-trainer", instance="r", pod="otel-collector-1"}'
    old, new = expand_scrapes(series[first]), expand_scrapes(series[moved])
    assert old[20] == 28 and old[27] == 28 and old[28] == "stale"  # last export at 290 s, expired by 420 s
    assert new[:20] == [None] * 20 and new[20] == 29 and new[40] == 59  # from 300 s on, the fresh steps
    steps = 'grpo_steps_total{run_id="r", job="grpo-trainer", instance="r", pod="otel-collector-1"}'
    assert expand_scrapes(series[steps])[20] == 30  # the count so far, not from 0
    assert 'up{job="otelcol", instance="otelcol-1:8888"}' in series  # the second replica is a target too


def expand_scrapes(text: str) -> list:
    """promtool's notation back to one value per scrape (None: no sample)."""
    out: list = []
    for token in text.split():
        m = re.fullmatch(r"(_|stale|-?[\d.e]+)(?:([+-][\d.e]+)?x(\d+))?", token)
        assert m, token
        head, step, n = m.group(1), float(m.group(2) or 0), int(m.group(3) or 0)
        if head in ("_", "stale"):
            out += [None if head == "_" else head] * max(n, 1)
        else:
            out += [float(head) + step * i for i in range(n + 1)]
    return out
