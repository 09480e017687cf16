"""`make test`'s order (tests/conftest.py): its longest files are handed out first, in the order listed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import LONGEST_FIRST, NEED_BACKENDS, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_listed_as_long_is_there():
    assert [p for p in LONGEST_FIRST if not (ROOT / p).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_the_longest_files_come_first_and_xdist_keeps_that_order(request: pytest.FixtureRequest, monkeypatch):
    """pytest-xdist would hand out the files with the most tests first (test_alert_grid.py's 7 after a hundred
    files of more); it keeps the collection order, which puts the listed files first, each file's tests and the
    other files in their own order."""
    monkeypatch.delenv("OTEL_GRPO_BACKENDS_BUILDING", raising=False)  # a machine with the backends built
    nodeids = ["tests/a.py::x", "tests/a.py::y", f"{LONGEST_FIRST[1]}::t", "tests/b.py::z", f"{LONGEST_FIRST[0]}::u",
               f"{LONGEST_FIRST[0]}::v[1]"]
    items = [SimpleNamespace(nodeid=n) for n in nodeids]
    pytest_collection_modifyitems(request.config, items)
    assert [i.nodeid for i in items] == [f"{LONGEST_FIRST[0]}::u", f"{LONGEST_FIRST[0]}::v[1]",
                                         f"{LONGEST_FIRST[1]}::t", "tests/a.py::x", "tests/a.py::y", "tests/b.py::z"]
    assert getattr(request.config.option, "loadscopereorder", False) is False


def test_while_the_backends_build_the_files_that_need_none_go_first(request: pytest.FixtureRequest, monkeypatch):
    """`make test` on a machine that lacks backends builds them beside the suite: a file that needs one, handed out
    first, would hold its worker waiting for the build."""
    stack = [p for p in LONGEST_FIRST if p.startswith(NEED_BACKENDS)]
    other = [p for p in LONGEST_FIRST if not p.startswith(NEED_BACKENDS)]
    assert stack and other
    nodeids = ["tests/stack/test_x.py::a", "tests/sidecar/test_y.py::b", f"{stack[0]}::c", f"{other[0]}::d",
               f"{stack[1]}::e", f"{other[1]}::f"]
    monkeypatch.setenv("OTEL_GRPO_BACKENDS_BUILDING", "1")
    items = [SimpleNamespace(nodeid=n) for n in nodeids]
    pytest_collection_modifyitems(request.config, items)
    assert [i.nodeid for i in items] == [f"{other[0]}::d", f"{other[1]}::f", "tests/sidecar/test_y.py::b",
                                         f"{stack[0]}::c", f"{stack[1]}::e", "tests/stack/test_x.py::a"]


def test_every_file_that_runs_a_backend_is_where_the_order_expects_it():
    """A test asking for a backend (`need`, the binaries' cache, the build script) outside NEED_BACKENDS would be
    handed out first while the backends build, and wait."""
    asking = [p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("*.py")
              if any(word in p.read_text() for word in ("need(", "bin_cache()", "build-backends.sh"))]
    assert "tests/stack/conftest.py" in asking
    assert [p for p in asking if not p.startswith(NEED_BACKENDS) and p != "tests/test_suite_order.py"] == []
