"""`logged_step`: one exported step standing for the steps since the last one (TRL's logging_steps)."""

from __future__ import annotations

from .conftest import points


def test_steps_counter_advances_by_the_steps_each_logged_step_covers(captured):
    for step in (4, 8, 10):
        with captured.tel.logged_step(step) as s:
            s.record({"kl": 0.1})
            s.samples([{"reward": 1.0, "completion": f"c{step}"}])
    metrics = captured.metrics()
    (steps,) = points(metrics["grpo.steps"]).values()
    assert steps.value == 7  # 1 for the first call (a resumed run must not jump), then 4 and 2
    (last,) = points(metrics["grpo.step_index"]).values()
    assert last.value == 10
    events = [e for sp in captured.spans("grpo.samples") for e in sp.events]
    assert sorted(e.attributes["completion"] for e in events) == ["c10", "c4", "c8"]
