"""On a CUDA GPU, telemetry waits for the device once per logged step: `reduce_stats`' one copy to the host.

Any other host sync (a blocking copy either way, `.item()`, a data-dependent shape) stalls the training
thread until every kernel already queued has run, so one per stat would serialize a step with its own
launches. torch's sync debug mode reports each sync; the innermost frame outside torch says whose it is.
The syncs of TRL's own code and of our demo loop's are theirs: counted here are only those made by
otel_grpo's signals, telemetry and integrations. Skipped without CUDA (a CPU has nothing to wait for).
"""

from __future__ import annotations

import collections
import traceback
import warnings
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs exist on a CUDA device only")

_TELEMETRY = ("/otel_grpo/signals/", "/otel_grpo/telemetry/", "/otel_grpo/integrations/")
_SYNC = "called a synchronizing CUDA operation"


class HostSyncs:
    """Counts, by function, the CUDA host syncs made in otel_grpo's telemetry code while it is entered."""

    def __init__(self) -> None:
        self.sites: collections.Counter[str] = collections.Counter()

    def __enter__(self) -> HostSyncs:
        self._warnings = warnings.catch_warnings()  # restores the filters and showwarning on exit
        self._warnings.__enter__()
        warnings.filterwarnings("always", message=_SYNC)
        self._show, warnings.showwarning = warnings.showwarning, self._record
        self._mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: object) -> None:
        torch.cuda.set_sync_debug_mode(self._mode)
        self._warnings.__exit__(*exc)

    def _record(self, message, category, filename, lineno, file=None, line=None) -> None:
        if _SYNC not in str(message):
            return self._show(message, category, filename, lineno, file, line)
        frames = [f for f in traceback.extract_stack()[:-1]
                  if "/torch/" not in f.filename and not f.filename.endswith(("warnings.py", __file__))]
        if frames and any(part in frames[-1].filename for part in _TELEMETRY):
            self.sites[frames[-1].name] += 1


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """Each trainer here sets accelerate's process-wide state for CUDA; the next test (or one on the CPU)
    needs it fresh, as a new process has it."""
    yield
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


@pytest.fixture
def reductions(monkeypatch) -> collections.Counter[str]:
    """How many times `reduce_stats` ran (wrapped here, so its syncs stay attributed to it)."""
    from otel_grpo import signals

    calls: collections.Counter[str] = collections.Counter()
    original = signals.reduce_stats

    def counted(*args, **kwargs):
        calls["reduce_stats"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(signals, "reduce_stats", counted)  # the module every caller reads it from
    return calls


def test_the_demo_trainer_s_telemetry_waits_for_the_gpu_once_per_step(tmp_path: Path, reductions) -> None:
    from otel_grpo.telemetry import Telemetry, TelemetrySettings
    from otel_grpo.trainer import GRPOTrainer, load_config

    def train(name: str, steps: int) -> None:
        cfg = load_config(preset="tiny", overrides=[f"output_dir={tmp_path / name}", "progress=false", "device=cuda",
                                                    f"steps={steps}"])
        settings = TelemetrySettings(run_id=name, output_dir=tmp_path / name, metrics_exporters=["none"],
                                     traces_exporters=["none"])
        GRPOTrainer(cfg, telemetry=Telemetry(settings)).train()

    train("warm-up", 1)  # the few device constants made once per device (cached)
    reductions.clear()
    with HostSyncs() as syncs:
        train("measured", 4)
    assert reductions["reduce_stats"] >= 4
    assert syncs.sites == reductions


def test_trl_instrumentation_waits_for_the_gpu_once_per_logged_step(tmp_path: Path, reductions) -> None:
    from otel_grpo.integrations import instrument
    from tests._support import tiny_trl

    def train(name: str, steps: int) -> None:
        trainer = tiny_trl.make_grpo_trainer(tmp_path / name, model_dir=tmp_path / "model", use_cpu=False,
                                             max_steps=steps, logging_steps=2, num_iterations=2)
        assert next(trainer.model.parameters()).is_cuda
        instrument(trainer, run_id=name, output_dir=tmp_path / name / "telemetry", metrics_exporters=["none"],
                   traces_exporters=["none"])
        trainer.train()

    train("warm-up", 2)
    reductions.clear()
    with HostSyncs() as syncs:
        train("measured", 6)
    assert reductions["reduce_stats"] >= 3
    assert syncs.sites == reductions
