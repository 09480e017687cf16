"""promtool's CPU time per scenario of prometheus/tests/grpo_alerts_test.yml: full rule files vs each scenario's cut.

    .venv/bin/python benchmarks/promtool_tests.py [--full] [--only REGEX]

Runs each scenario group in a promtool of its own (as tests/stack/test_rules.py does), one at a time, against
the rules it asserts on and the records they read (`otel_grpo.generate._promtool.scenario_rules`), or with
`--full` against the committed rule files whole, and prints each group's CPU seconds (user + system, the
promtool process's own) as a markdown table. CPU seconds, not wall time: they do not depend on what else
the machine runs.
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from otel_grpo.generate._configs import RULE_FILES
from otel_grpo.generate._promtool import TESTS, load_scenarios, scenario_rules
from otel_grpo.stack._process import StackError, find_binary

ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds(promtool: str, work: Path, name: str) -> tuple[float, bool]:
    """promtool's CPU seconds on the one group `name` of work/tests/t.yml, and whether it passed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([promtool, "test", "rules", "--run", f"^{re.escape(name)}$", "tests/t.yml"], cwd=work,
                         capture_output=True, text=True, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, out.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the committed rule files whole, not each scenario's cut")
    parser.add_argument("--only", default="", help="only the scenarios whose name matches this regex")
    args = parser.parse_args()
    try:
        promtool = find_binary("promtool", pinned_only=True)
    except StackError as missing:
        print(f"{missing}: run scripts/build-backends.sh", file=sys.stderr)
        return 1
    tests = (ROOT / TESTS).read_text()
    print(f"rules: {'the committed files whole' if args.full else 'each scenario cut to what it asserts on'}\n")
    print("| scenario | length | scrape | CPU s |\n| --- | --- | --- | --- |", flush=True)
    rows, total, failed = 0, 0.0, []
    with tempfile.TemporaryDirectory() as tmp:
        for i, sc in enumerate(load_scenarios(ROOT)):
            if not re.search(args.only, sc["name"]):
                continue
            work = Path(tmp) / str(i)
            rules = {rel: (ROOT / "prometheus" / rel).read_text() for rel in RULE_FILES} if args.full \
                else scenario_rules(ROOT, sc)
            for rel, text in {**rules, "tests/t.yml": tests}.items():
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                (work / rel).write_text(text)
            cpu, ok = cpu_seconds(promtool, work, sc["name"])
            total += cpu
            failed += [] if ok else [sc["name"]]
            rows += 1
            print(f"| {sc['name']} | {sc.get('length', '')} | {sc['interval']} | {cpu:.1f} |", flush=True)
    print(f"\n{rows} groups, {total:.0f} CPU-s in all; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
