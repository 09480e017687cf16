"""A fault to inject, as `--fault KIND@STEP` names it: the kinds, the parsing and the rules, in one place for the
trainer (`trainer._faults`, which injects them) and the demo (`stack._demo`, which checks them before it starts the
stack, without the trainer's torch)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

FAULT_KINDS = ("kl-spike", "rollout-drift", "stall", "nan", "bad-batch")


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    step: int

    @classmethod
    def parse(cls, spec: str) -> Fault:
        """`"kl-spike@5"` -> Fault("kl-spike", 5); a readable ValueError otherwise."""
        kind, sep, step = spec.strip().partition("@")
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r} in {spec!r}: expected one of {', '.join(FAULT_KINDS)}")
        if not sep or not step.strip().isdigit():
            raise ValueError(f"fault {spec!r} must look like KIND@STEP with a non-negative integer step")
        return cls(kind, int(step))


def check_fault_steps(faults: Iterable[Fault], steps: int) -> None:
    """A ValueError for a fault at or after the last of `steps` steps (they run 0 .. steps - 1): it would never be
    injected, and the run would show no sign of it."""
    for fault in faults:
        if fault.step >= steps:
            raise ValueError(f"fault {fault.kind}@{fault.step} (--fault) comes after the last step ({steps - 1} of "
                             f"--steps {steps}): it would never be injected")
