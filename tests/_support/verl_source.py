"""verl 0.9.1 for the tests, outside the shared environment: the wheel, and the metric names its source logs.

    site = verl_site()                  # installs verl==0.9.1 --no-deps into a cache dir once; skips if it cannot
    names = logged_metric_names(site)   # every name under the families issue 13 lists

The wheel ships a top-level `tests` package that would shadow ours, and its
`verl/__init__.py` imports torch, tensordict and ray: it is installed with
`pip install --no-deps --target <cache>` (never into the venv) and only read, or
loaded file by file (`verl/utils/tracking.py` needs just orjson and packaging).
The cache is `$OTEL_GRPO_VERL_DIR`, else `~/.cache/otel-grpo/verl-0.9.1`.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

VERL_VERSION = "0.9.1"
FAMILIES = ("actor", "critic", "response_length", "prompt_length", "timing_s", "perf", "rollout_corr", "mismatch",
            "training", "val-core", "val-aux")
_NAME = re.compile(rf"^({'|'.join(FAMILIES)})/[\w@.*/-]*[\w*]$")


def verl_site() -> Path:
    """The directory holding `verl/` 0.9.1; installed there on first use. pytest.skip only if pip cannot reach PyPI."""
    import pytest

    site = Path(os.environ.get("OTEL_GRPO_VERL_DIR") or Path.home() / ".cache" / "otel-grpo" / f"verl-{VERL_VERSION}")
    marker = site / f"verl-{VERL_VERSION}.dist-info"
    if not marker.exists():
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                               f"verl=={VERL_VERSION}"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or not marker.exists():
            pytest.skip(f"could not install verl=={VERL_VERSION} into {site} (is PyPI reachable?): "
                        f"{done.stderr.strip().splitlines()[-1:] }")
    return site


def _template(node: ast.AST) -> str | None:
    """A string constant as is; an f-string with its placeholders as `*`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
    return None


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"))


def _literal_names(root: Path) -> set[str]:
    """Every string (f-strings as globs) in verl's package that is a name of one of the families."""
    found = set()
    for path in (root / "verl").rglob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.JoinedStr):
                text = _template(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            if text and _NAME.match(text):
                found.add(text)
    return found


def _assigned_keys(path: Path, nested: bool = False) -> set[str]:
    """Keys written as `<...metrics>["key"] = ...` (f-string keys as globs) in one module; with `nested`,
    keys holding a `/` too (`perf/max_memory_allocated_gb`, which the trainer prefixes with the role)."""
    keys = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if not isinstance(target, ast.Subscript) or "metric" not in ast.unparse(target.value):
                    continue
                if (key := _template(target.slice)) and (nested or "/" not in key):
                    keys.add(key)
    return keys


def _timer_names(path: Path) -> set[str]:
    """First arguments of `marked_timer("name", ...)`: each becomes `timing_s/<name>`."""
    names = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "marked_timer":
            if node.args and (name := _template(node.args[0])):
                names.add(name)
    return names


def logged_metric_names(site: Path) -> set[str]:
    """Names verl 0.9.1 logs under the families, from its source; dynamic parts appear as `*`.

    Literal names anywhere in the package; `rollout_corr/<key>` for each key the
    rollout-correction helper assigns (it adds the prefix when returning); `actor/<key>`
    and `critic/<key>` for the keys the loss and the engine worker assign before
    `ray_trainer` prefixes them (`rename_dict`, nested keys such as `perf/...` included);
    `timing_s/<name>` for every
    `marked_timer` in the trainer; `val-core/*/*/*@*` and `val-aux/*/*/*@*` for the validation metrics.
    """
    verl = site / "verl"
    names = _literal_names(site)
    helper = verl / "trainer/ppo/rollout_corr_helper.py"
    # The helper's only `{prefix}` is `rollout_rs_{option_name}`: its f-string keys start with it.
    assert 'prefix = f"rollout_rs_{option_name}"' in helper.read_text(), "rollout_corr_helper changed: re-read it"
    keys = {("rollout_rs_" + k if k.startswith("*_") else k) for k in _assigned_keys(helper)}
    names |= {f"rollout_corr/{k}" for k in keys}
    names |= {f"actor/{k}" for k in _assigned_keys(verl / "workers/utils/losses.py")}
    # ray_trainer's rename_dict prefixes every key of the worker's metrics not already under the role,
    # `perf/max_memory_allocated_gb` included: it is logged as `actor/perf/max_memory_allocated_gb`.
    names |= {f"{role}/{k}" for role in ("actor", "critic")
              for k in _assigned_keys(verl / "workers/engine_workers.py", nested=True) if not k.startswith(role + "/")}
    names |= {f"timing_s/{n}" for n in _timer_names(verl / "trainer/ppo/ray_trainer.py")}
    # `_val_metrics_update` files each validation metric under `metric_sec` ("val-core" or "val-aux"):
    # `{metric_sec}/{data_source}/{var_name}/{metric_name}`, every metric name a statistic of N samples
    # (`mean@4`, `best@4/std`, `maj@4/mean`: it parses N after the `@`).
    trainer = (verl / "trainer/ppo/ray_trainer.py").read_text()
    assert 'pfx = f"{metric_sec}/{data_source}/{var_name}/{metric_name}"' in trainer, "_val_metrics_update changed"
    names |= {f"{section}/*/*/*@*" for section in ("val-core", "val-aux") if f'metric_sec = "{section}"' in trainer}
    # "rollout_corr/*" and "timing_s/*" are the prefixing f-strings themselves, expanded above.
    return {n for n in names if _NAME.match(n) and not n.endswith("/*")}
