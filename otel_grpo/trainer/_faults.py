"""Fault injection for demonstrating alerts: `--fault KIND@STEP` (repeatable).

- `kl-spike@S`: from step S the learning rate is multiplied by `kl_spike_lr_factor`
  (for `kl_spike_steps` steps, 0: to the end), so KL to the reference explodes.
- `rollout-drift@S`: from step S the rollout copy gets weight noise that grows by
  `rollout_drift_scale` per step: the IS ratio and the mismatch KL drift away.
- `stall@S`: before step S the loop stops making progress while the process stays
  alive (for `stall_seconds`, 0: until interrupted).
- `nan@S`: the loss of step S is NaN; the update is skipped and reported.
- `bad-batch@S`: scoring the batch of step S fails; the step is skipped, not fatal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._fault_spec import Fault

@dataclass(kw_only=True, slots=True)
class FaultConfig:
    """Faults to inject and their strength."""

    inject: list[str] = field(default_factory=list)
    """Faults as KIND@STEP strings: kl-spike, rollout-drift, stall, nan, bad-batch."""
    kl_spike_lr_factor: float = 100.0
    """kl-spike: learning-rate multiplier."""
    kl_spike_steps: int = 0
    """kl-spike: steps the multiplier lasts; 0 until the end of the run."""
    rollout_drift_scale: float = 0.05
    """rollout-drift: relative weight-noise scale added per step since the fault started."""
    stall_seconds: float = 0.0
    """stall: how long the loop stalls; 0 until interrupted (Ctrl-C)."""

    def __post_init__(self) -> None:
        self.parsed()  # raises on an unknown kind or a bad step
        if self.kl_spike_lr_factor <= 0 or self.rollout_drift_scale < 0 or self.stall_seconds < 0:
            raise ValueError("faults: kl_spike_lr_factor must be > 0, rollout_drift_scale and stall_seconds >= 0")
        if self.kl_spike_steps < 0:
            raise ValueError(f"faults.kl_spike_steps must be >= 0, got {self.kl_spike_steps}")

    def parsed(self) -> list[Fault]:
        return [Fault.parse(s) for s in self.inject]

    def _start(self, kind: str) -> int | None:
        starts = [f.step for f in self.parsed() if f.kind == kind]
        return min(starts) if starts else None

    def lr_factor(self, step: int) -> float:
        start = self._start("kl-spike")
        if start is None or step < start or (self.kl_spike_steps and step >= start + self.kl_spike_steps):
            return 1.0
        return self.kl_spike_lr_factor

    def rollout_drift(self, step: int) -> float:
        """Relative noise scale for the rollout copy after the update of `step`."""
        start = self._start("rollout-drift")
        return 0.0 if start is None or step < start else self.rollout_drift_scale * (step - start + 1)

    def stalls_at(self, step: int) -> bool:
        return any(f.kind == "stall" and f.step == step for f in self.parsed())

    def nan_at(self, step: int) -> bool:
        return any(f.kind == "nan" and f.step == step for f in self.parsed())

    def bad_batch_at(self, step: int) -> bool:
        return any(f.kind == "bad-batch" and f.step == step for f in self.parsed())
