"""Alert latency per failure mode and step time: the scenario grid through promtool (docs/alerts.md).

    .venv/bin/python benchmarks/alerts.py [--per-mode N] [--workers N] [--evaluation-interval 15s]
                                          [--step-times 2 10] [--modes healthy kl-jump]

Runs `otel_grpo.generate._grid.grid()` through the committed rules in promtool 3.16 (built by
scripts/build-backends.sh), delivers what fires as the committed alertmanager/alertmanager.yml routes,
groups and inhibits it, and prints, per failure mode and step time, the median and worst latency
from the onset to the alert's first notification of a person (group_wait included) against the
bound, and the cases that did not hold. Not a timed benchmark: the figures are simulated time.
`--evaluation-interval` evaluates the rules as often as a deployment does (compose: 15 s; the grid's
default, 60 s, measures a latency up to 45 s late); `--step-times` and `--modes` keep the cases of those step
times and failure modes.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from otel_grpo.generate import RuleSettings, rule_files
from otel_grpo.generate._grid import PER_MODE, STEP_TIMES, grid
from otel_grpo.generate._grid_run import Verdict, run
from otel_grpo.stack._process import StackError, find_binary


ALERTMANAGER = Path(__file__).resolve().parents[1] / "alertmanager/alertmanager.yml"
"""The committed Alertmanager config: its routing, grouping and inhibitions deliver what fires."""


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def table(verdicts: list[Verdict]) -> list[str]:
    """The latency table (markdown) and the cases that did not hold."""
    lines = ["| failure | " + " | ".join(f"{s:g} s steps" for s in STEP_TIMES) + " |",
             "| --- | " + " | ".join("---" for _ in STEP_TIMES) + " |"]
    for mode in dict.fromkeys(v.case.mode for v in verdicts):
        mine = [v for v in verdicts if v.case.mode == mode]
        cells = []
        for s in STEP_TIMES:
            at = [v for v in mine if v.case.step_s == s]
            if not at:
                cells.append("")
            elif mine[0].case.expect is None:
                cells.append(f"{sum(bool(v.early) for v in at)} of {len(at)} notified")
            else:
                lat = [v.latency_s for v in at if v.latency_s is not None]
                worst = None if len(lat) < len(at) else max(lat)
                cells.append(f"{_fmt(statistics.median(lat)) if lat else 'never'} / {_fmt(worst)} "
                             f"({_fmt(at[0].case.bound_s)})")
        label = f"{mode} (healthy)" if mine[0].case.expect is None else mode
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("\ncells: median / worst latency (bound)")
    for v in verdicts:
        if not v.held:
            c = v.case
            lines.append(f"NOT HELD {c.run_id}: {c.step_s:g} s steps, {c.scrape_s:g} s scrapes, {c.path}, start-up "
                         f"{c.startup_s:g} s: latency {_fmt(v.latency_s)} bound {_fmt(c.bound_s)} early {v.early}"
                         + (f" sent again at {v.repaged}" if v.repaged else ""))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-mode", type=int, default=PER_MODE)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--evaluation-interval", default="60s", help="a Prometheus duration: 15s as in compose")
    parser.add_argument("--step-times", type=float, nargs="+", metavar="S", help="only cases of these step times")
    parser.add_argument("--modes", nargs="+", metavar="MODE", help="only cases of these failure modes (healthy, kl-jump)")
    args = parser.parse_args()
    try:
        promtool = find_binary("promtool", pinned_only=True)
    except StackError as missing:
        print(f"{missing}: run scripts/build-backends.sh", file=sys.stderr)
        return 1
    cases = [c for c in grid(args.per_mode) if (not args.step_times or c.step_s in args.step_times)
             and (not args.modes or c.mode in args.modes)]
    started, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        verdicts = run(cases, promtool, rule_files(RuleSettings()), yaml.safe_load(ALERTMANAGER.read_text()), Path(tmp),
                       workers=args.workers, evaluation_interval=args.evaluation_interval)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    print(f"{len(cases)} cases evaluated every {args.evaluation_interval} in {time.monotonic() - started:.0f} s of "
          f"promtool ({cpu_s:.0f} CPU-s); {sum(v.held for v in verdicts)} hold\n")
    print("\n".join(table(verdicts)))
    return 0 if all(v.held for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
