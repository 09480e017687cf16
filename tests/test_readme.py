"""The README is one screen from a fresh clone to a working demo, then links: no dated
measurements and no test counts (they go stale; benchmarks/README.md keeps the figures, with
their dates), and every link in it, and in the docs it sends a reader to first, resolves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_readme_is_one_screen_without_dated_figures_or_test_counts():
    text = README.read_text()
    assert len(text.splitlines()) <= 60
    assert "make demo" in text and "make test" in text
    assert re.findall(r"\b20\d\d-\d\d-\d\d\b", text) == []  # a date: a measurement that goes stale
    assert re.findall(r"\b\d[\d.,]*\s?(?:ms|s|min|minutes|seconds|hours)\b", text) == []  # a duration
    assert re.findall(r"\b\d[\d,]* (?:tests|passed|runs|of \d+)\b", text) == []  # a count of tests


def test_the_links_of_the_readme_and_the_docs_it_names_first_resolve():
    for page in (README, ROOT / "docs/usage.md", ROOT / "docs/development.md"):
        targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
        assert targets, page
        broken = [t for t in targets if not t.startswith("http") and not (page.parent / t).exists()]
        assert broken == [], f"{page.relative_to(ROOT)}: {broken}"
