"""What a retention pass reads and how long it holds the write lock, by statements and transactions (no
timings): its work follows what changed since the last pass, not how many runs the store holds, and the
`max_steps` rule gives the lock back between chunks of runs. On both backends (`db`)."""

from __future__ import annotations

import time

from otel_grpo.sidecar.otlp import extract
from otel_grpo.sidecar.store import open_store


def _load(store, otlp, run_id, steps, samples=1):
    store.write_batch(extract(otlp.request(otlp.spans(run_id, steps, samples=samples))))


def test_a_step_a_late_phase_makes_again_widens_its_runs_step_range(db, otlp):
    """Age retention deletes a step but not its span's link; a phase of that step arriving later makes the
    step again. The run's step range takes it in, or `max_steps`, which reads only runs whose range is longer
    than it keeps, would never trim that run."""
    store = open_store(db)
    early = otlp.spans("late", [0])
    store.write_batch(extract(otlp.request(early)))
    time.sleep(0.05)
    cutoff = time.time()
    time.sleep(0.05)
    _load(store, otlp, "late", range(1, 4))
    now = time.time()
    assert store.apply_retention(max_age_s=now - cutoff, now=now)["steps"] == 1
    assert store.runs()[0]["first_step"] == 1
    store.write_batch(extract(otlp.request([s for s in early if s.name.startswith("grpo.phase.")])))
    assert [r["step"] for r in store.steps("late")] == [0, 1, 2, 3]
    assert store.runs()[0]["first_step"] == 0
    store.apply_retention(max_steps=3)
    assert [r["step"] for r in store.steps("late")] == [1, 2, 3]
    store.close()
