"""docs/usage.md's table of `OTEL_GRPO_*` variables names real `TelemetrySettings` fields with their real defaults.

A user sets these in a job spec from that table alone; a stale default there (the Prometheus linger was
documented as 2.5 s while the setting is 75) misleads them about what a run does when they set nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from otel_grpo.telemetry import TelemetrySettings

USAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"
PREFIX = TelemetrySettings.model_config["env_prefix"]
# A default the table describes by what it means rather than by its value.
DESCRIBED = {"output_dir": "runs/<run_id>"}


def _rows() -> list[tuple[str, str]]:
    """(field, default as the table writes it) for each variable of each `| `OTEL_GRPO_...` | default |` row."""
    out = []
    for line in USAGE.read_text().splitlines():
        if not line.startswith(f"| `{PREFIX}"):
            continue
        names_cell, default_cell = (cell.strip() for cell in line.split("|")[1:3])
        names = re.findall(r"`([A-Z_]+)`", names_cell)
        # `OTEL_GRPO_TOP_K` / `_BOTTOM_K`: a name after the first is written without the prefix
        fields = [n.removeprefix(PREFIX).lstrip("_") for n in names]
        defaults = re.sub(r"\s*\(.*\)$", "", default_cell).replace("`", "").split(" / ")
        assert len(defaults) == len(fields), line
        out += [(f.lower(), d.strip()) for f, d in zip(fields, defaults)]
    return out


def _as_written(field: str, value: object) -> str:
    if field in DESCRIBED:
        return DESCRIBED[field]
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def test_every_variable_of_the_usage_table_is_a_setting_with_the_default_it_states():
    rows = _rows()
    assert len(rows) >= 15, rows
    for field, documented in rows:
        assert field in TelemetrySettings.model_fields, f"{PREFIX}{field.upper()} is no TelemetrySettings field"
        actual = TelemetrySettings.model_fields[field].default
        if isinstance(actual, (int, float)) and not isinstance(actual, bool):
            assert float(documented) == float(actual), f"{PREFIX}{field.upper()}: usage.md {documented}, code {actual}"
        else:
            assert documented == _as_written(field, actual), f"{PREFIX}{field.upper()}: usage.md {documented}, code {actual}"
