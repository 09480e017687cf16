"""The suite's order: its longest files first, so that `make test`'s workers end together.

`make test` hands out whole files (pytest-xdist `--dist loadfile`) in collection order, the next one to the
first worker that is almost done. A long file handed out last keeps one worker busy while the others idle;
handed out first, the other workers run the many short files meanwhile. pytest-xdist's own order (files
with the most tests first) is turned off: it put these files, a few tests each, last.

While `make test` builds the backends beside the suite (scripts/test.sh sets OTEL_GRPO_BACKENDS_BUILDING),
the files that need none go first, each group longest first: handed out early, a file that needs a backend
would hold its worker waiting for the build.
"""

from __future__ import annotations

import os

import pytest

LONGEST_FIRST = (
    "tests/stack/test_alert_grid.py",
    "tests/stack/test_local.py",
    "tests/stack/test_rules.py",
    "tests/sidecar/test_db_faults.py",
    "tests/stack/test_skewed_clock.py",
    "tests/stack/test_collector_e2e.py",
    "tests/test_extras.py",
    "tests/stack/test_e2e.py",
    "tests/stack/test_compose_stack.py",
    "tests/stack/test_prometheus_restart.py",
    "tests/sidecar/test_process.py",
    "tests/sidecar/test_db_slots.py",
)
"""The files of a minute or more on a fresh 2-core run (`--durations`), longest first; every other file
follows in collection order. tests/test_suite_order.py checks that each is still there."""
NEED_BACKENDS = ("tests/stack/", "tests/integrations/follow/")
"""Where the tests run the Go-built backends (`need` in tests/stack/conftest.py)."""


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's --no-loadscope-reorder
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before --failed-first / --new-first, which then still put theirs first
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    building = bool(os.environ.get("OTEL_GRPO_BACKENDS_BUILDING"))

    def key(item: pytest.Item) -> tuple[bool, int]:
        path = item.nodeid.split("::", 1)[0]
        return building and path.startswith(NEED_BACKENDS), rank.get(path, len(LONGEST_FIRST))
    items.sort(key=key)
