"""The pip command a missing extra's error names works: otel-grpo is on no package index, so
`pip install 'otel-grpo[follow]'` (what the error and the docs said) finds no distribution at all.
From a checkout the command installs the extra from that checkout; `tests/test_extras.py` checks the
wheel-installed case in fresh environments."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from otel_grpo import _extras
from otel_grpo._extras import EXTRAS, MissingExtra, require

ROOT = Path(__file__).resolve().parents[1]


def test_a_missing_extra_names_a_pip_command_that_installs_it_from_this_checkout(monkeypatch):
    monkeypatch.setitem(_extras.EXTRAS, "follow", ("no_such_module_for_this_test",))
    with pytest.raises(MissingExtra) as missing:
        require("follow", "otel-grpo follow --trl-output")
    assert str(missing.value).endswith(f"pip install -e '{ROOT}[follow]'"), missing.value


def test_every_extra_the_command_names_is_one_the_project_defines():
    defined = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in EXTRAS:
        assert extra in defined and _extras.install_command(extra) == f"pip install -e '{ROOT}[{extra}]'"
