"""The generation/running split holds: every module of `otel_grpo.generate` and `otel_grpo.stack` imports,
generation imports only the catalog (never the runner, never an integration), and no import circle is hidden
behind a function-local import or a private name.

The graph is read from the source (`ast`), function bodies included, so an import moved into a function
to dodge a circle still counts as an edge.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import otel_grpo

ROOT = Path(otel_grpo.__file__).resolve().parent
SPLIT = ("otel_grpo.generate", "otel_grpo.stack")
GENERATION_MAY_IMPORT = ("otel_grpo.catalog",)


def _modules() -> dict[str, Path]:
    """Every module of every package in the package tree, by dotted name (a package: its `__init__`)."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ["otel_grpo", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _imported(name: str, path: Path, runtime: bool = False) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import of otel_grpo in the file, at any depth;
    `runtime`: those that run (not under `if TYPE_CHECKING:`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    tree = ast.parse(path.read_text(), str(path))
    if runtime:
        tree.body = [n for n in tree.body if not (isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            out.append((base, [a.name for a in node.names]))
    return [(m, names) for m, names in out if _under(m, ("otel_grpo",))]


def _edges(name: str, runtime: bool = False) -> set[str]:
    """The modules of the tree that `name` imports (`from pkg import mod` counts as importing `mod`)."""
    edges = set()
    for module, names in _imported(name, MODULES[name], runtime):
        submodules = {f"{module}.{n}" for n in names} & MODULES.keys()
        edges |= submodules
        if len(submodules) < len(names) or not names:  # a name defined in `module` itself
            edges.add(module)
    return edges


SPLIT_MODULES = sorted(m for m in MODULES if _under(m, SPLIT))


@pytest.mark.parametrize("name", SPLIT_MODULES)
def test_every_module_imports(name):
    importlib.import_module(name)


def test_generation_imports_only_the_catalog():
    wrong = {(m, e) for m in SPLIT_MODULES if _under(m, ("otel_grpo.generate",))
             for e in _edges(m) if not _under(e, ("otel_grpo.generate", *GENERATION_MAY_IMPORT))}
    assert wrong == set(), "otel_grpo.generate renders files from the catalog: it imports neither the runner nor integrations"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, as the modules along it (first = last), or None."""
    done: set[str] = set()

    def visit(stack: list[str]) -> list[str] | None:
        for nxt in sorted(graph.get(stack[-1], ())):
            if nxt in stack:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in done and (found := visit(stack + [nxt])):
                return found
        done.add(stack[-1])
        return None

    for start in sorted(graph):
        if start not in done and (found := visit([start])):
            return found
    return None


def test_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle():
    graph = {m: {e for e in _edges(m) if e in SPLIT_MODULES} for m in SPLIT_MODULES}
    assert _cycle(graph) is None


def test_no_function_local_import_of_our_modules():
    """Imports of our own modules sit at the top, where the graph above reads them and a circle fails at once
    (a function-local `import httpx` for an optional extra is fine)."""
    local = set()
    for m in SPLIT_MODULES:
        for fn in ast.walk(ast.parse(MODULES[m].read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (node.level or _under(node.module or "", ("otel_grpo",))):
                        local.add((m, fn.name))
                    elif isinstance(node, ast.Import) and any(_under(a.name, ("otel_grpo",)) for a in node.names):
                        local.add((m, fn.name))
    assert local == set()


def test_no_private_name_crosses_a_module():
    """`from ._rules import _m` shares what its module keeps private: make it public or move it."""
    crossing = {(m, f"{module}.{n}") for m in SPLIT_MODULES for module, names in _imported(m, MODULES[m])
                for n in names if n.startswith("_") and f"{module}.{n}" not in MODULES}
    assert crossing == set()


HOST_HALF = ("otel_grpo.signals._gathered", "otel_grpo.signals._table_finishes", "otel_grpo.integrations.trl._logged",
             "otel_grpo.telemetry._backend", "otel_grpo.telemetry._child")
"""What the telemetry process runs: a logged step's finishing (`Step.defer`) and the backend. That process never
imports torch (about 280 MB of its own memory): `test_trl_process` reads its memory map."""


def _imports_torch(name: str) -> bool:
    return any(m == "torch" or m.startswith("torch.")
               for node in ast.walk(ast.parse(MODULES[name].read_text()))
               for m in ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []))


def _reach(start: str) -> set[str]:
    """Every module of the tree that importing `start` runs: its imports' (at any depth), and each one's packages."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen or name not in MODULES:
            continue
        seen.add(name)
        todo += _edges(name, runtime=True)
        todo += [name.rsplit(".", i)[0] for i in range(1, name.count("."))]  # its packages' __init__
    return seen


@pytest.mark.parametrize("name", HOST_HALF)
def test_the_host_half_imports_no_torch(name):
    assert {m for m in _reach(name) if _imports_torch(m)} == set()


def test_the_torch_check_sees_a_torch_module():
    assert _imports_torch("otel_grpo.signals._partial") and "otel_grpo.signals._partial" in _reach("otel_grpo.signals._masked")
    assert "otel_grpo.signals._gathered" in _reach("otel_grpo.signals._reduce")
