"""Documentation files generated from the code: (repository path, render function) pairs.

`otel-grpo dashboards` writes them with the dashboards and rules; `--check` compares.
Add a generated document by appending its pair.
"""

from __future__ import annotations

from typing import Callable

from otel_grpo.catalog._docs import render_signals_md

from ._alerts_md import render_alerts_md
from ._integrations_md import render_integrations_md

DOC_FILES: list[tuple[str, Callable[[], str]]] = [
    ("docs/signals.md", render_signals_md),
    ("docs/integrations.md", render_integrations_md),
    ("docs/alerts.md", render_alerts_md),
]


def doc_files() -> dict[str, str]:
    """Generated documents by repository path."""
    return {path: render() for path, render in DOC_FILES}
