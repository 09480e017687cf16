#!/usr/bin/env python3
"""`make demo`'s backends: the servers `otel-grpo up` runs (Prometheus and Alertmanager), built from their
Go modules only where the machine has neither the pinned build nor one on PATH. A fresh machine with
Debian's packages (`make system-deps`) starts the demo in minutes instead of after a 15-20 minute Go build;
each server used from PATH is named with its version, as `otel-grpo up` names it again.

    usage: scripts/demo-backends.py [component ...]   (default: prometheus alertmanager)
"""

import os
import sys
from pathlib import Path

from otel_grpo.stack._process import Backend, StackError, build_target


def main(components: list[str]) -> None:
    missing = []
    for component in components:
        try:
            backend = Backend.find(component)
        except StackError:
            missing.append(build_target(component))
            continue
        print(f"demo-backends: {backend}", file=sys.stderr)
    if missing:
        script = Path(__file__).resolve().parent / "build-backends.sh"
        os.execv(script, [str(script), *missing])


if __name__ == "__main__":
    main(sys.argv[1:] or ["prometheus", "alertmanager"])
