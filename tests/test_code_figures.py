"""Measured figures live in benchmarks/README.md, not in the code's comments and docstrings.

A timing or a rate written into a comment goes stale with the next machine or library
version and nobody re-measures it there; the comment says why a design was chosen and
points to the benchmarks' README for how much it saves. Read from the source: comments
(`tokenize`) and the docstrings of modules, classes and functions (`ast`).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import otel_grpo

ROOT = Path(otel_grpo.__file__).resolve().parent
# a short duration (3 ms, ~4 us; not seconds: timeouts and intervals are settings), a throughput
# (0.5 GB/s) or a measured speed-up (100x slower)
FIGURE = re.compile(
    r"\d[\d.,]*\s?(?:ms|us|µs|ns)\b"
    r"|\d[\d.,]*\s?[KMG]i?B/s\b"
    r"|\d[\d.,]*\s?x\s(?:faster|slower|cheaper|less|more)\b",
)


def _comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every module, class and function docstring."""
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


def test_no_measured_figure_in_comments() -> None:
    hits = [f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}"
            for path in sorted(ROOT.rglob("*.py"))
            for line, text in _comments_and_docstrings(path.read_text())
            for m in FIGURE.finditer(text)]
    assert not hits, "measured figures belong in benchmarks/README.md: " + "; ".join(hits)


def test_the_pattern_finds_what_it_is_for() -> None:
    source = '"""Doc: a pass took 3.5 ms."""\nx = 1  # a socket moved ~0.5 GB/s here\n# 100x slower at 1M\n'
    found = [m.group(0) for _, text in _comments_and_docstrings(source) for m in FIGURE.finditer(text)]
    assert sorted(found) == ["0.5 GB/s", "100x slower", "3.5 ms"]
