"""One torch version everywhere: the Makefile installs it, the Dockerfile builds it, and every extra
that brings torch (directly, or through accelerate or TRL) pins it, so `pip install otel-grpo[trainer]`
does not pull a newer torch (gigabytes of CUDA wheels) than the one the tests ran."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
# What pulls torch in when installed: an extra holding one of these must pin torch itself.
BRINGS_TORCH = {"torch", "accelerate", "trl", "peft"}


def _makefile_torch() -> str:
    return re.search(r"^TORCH_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)


def test_the_dockerfile_builds_the_makefiles_torch():
    assert re.search(r"^ARG TORCH_VERSION=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M).group(1) == _makefile_torch()


def test_every_extra_that_brings_torch_pins_the_makefiles():
    extras = {name: [Requirement(r) for r in requirements] for name, requirements in
              tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"].items()}
    pinned = f"=={_makefile_torch()}"
    pins = {name: [str(r.specifier) for r in reqs if r.name == "torch"] for name, reqs in extras.items()}
    bringing = [name for name, reqs in extras.items() if {r.name for r in reqs} & BRINGS_TORCH]
    for name in bringing:
        # its own pin, or one of our extras it includes (dev: otel-grpo[trainer,...]) pins it
        included = [extra for r in extras[name] if r.name == "otel-grpo" for extra in r.extras]
        assert pins[name] == [pinned] or any(pins[extra] == [pinned] for extra in included), name
        assert set(pins[name]) <= {pinned}, name
    assert {"trainer", "trl", "dev"} <= set(bringing)
