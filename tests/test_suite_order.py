"""`make test`'s order (tests/conftest.py): its longest files are handed out first, in the order listed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import LONGEST_FIRST, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_listed_as_long_is_there():
    assert [p for p in LONGEST_FIRST if not (ROOT / p).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_the_longest_files_come_first_and_xdist_keeps_that_order(request: pytest.FixtureRequest):
    """pytest-xdist would hand out the files with the most tests first (test_alert_grid.py's 7 after a hundred
    files of more); it keeps the collection order, which puts the listed files first, each file's tests and the
    other files in their own order."""
    nodeids = ["tests/a.py::x", "tests/a.py::y", f"{LONGEST_FIRST[1]}::t", "tests/b.py::z", f"{LONGEST_FIRST[0]}::u",
               f"{LONGEST_FIRST[0]}::v[1]"]
    items = [SimpleNamespace(nodeid=n) for n in nodeids]
    pytest_collection_modifyitems(request.config, items)
    assert [i.nodeid for i in items] == [f"{LONGEST_FIRST[0]}::u", f"{LONGEST_FIRST[0]}::v[1]",
                                         f"{LONGEST_FIRST[1]}::t", "tests/a.py::x", "tests/a.py::y", "tests/b.py::z"]
    assert getattr(request.config.option, "loadscopereorder", False) is False
