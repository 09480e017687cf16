"""Step checks: streaks of checked scalars beyond their bounds, counted on every step (catalog._step_checks)."""

from __future__ import annotations

import math

from otel_grpo.catalog import STEP_CHECKS, STREAKS


def _points(metrics, name, **attrs):
    """value by (bound, streak) of the data points matching `attrs`."""
    out = {}
    for p in metrics[name].data.data_points:
        a = dict(p.attributes)
        if all(a.get(k) == v for k, v in attrs.items()):
            out[(a["bound"], a.get("streak"))] = p.value
    return out


def test_consecutive_steps_are_counted_and_a_good_step_resets_the_streak(captured):
    # KL over 1.0 at steps 0-2 (a streak of 3), 0.5 at step 3 (reset), 1.5 again at step 4.
    for step, kl in enumerate([1.5, 1.2, 1.1, 0.5, 1.5]):
        captured.tel.log_metrics(step, {"kl": kl})
    metrics = captured.metrics()
    beyond = _points(metrics, "grpo.step.beyond", signal="kl")
    assert beyond[("1.0", "1")] == 4  # every step over 1.0
    assert beyond[("1.0", "2")] == 2  # steps 1 and 2
    assert beyond[("1.0", "3")] == 1  # step 2 closed three in a row
    assert beyond[("1.0", "5")] == 0 and beyond[("1.0", "10")] == 0  # present at 0: no new series later
    assert beyond[("2.0", "1")] == 0
    assert beyond[("0.2", "5")] == 1  # all five steps over 0.2
    streak = _points(metrics, "grpo.step.streak", signal="kl")
    assert streak[("1.0", None)] == 1 and streak[("0.5", None)] == 1 and streak[("0.2", None)] == 5
    assert len(streak) == len(STEP_CHECKS["kl"].bounds)
    assert len(beyond) == len(STEP_CHECKS["kl"].bounds) * len(STREAKS)


def test_alternating_values_never_make_a_streak_of_two(captured):
    for step in range(20):
        captured.tel.log_metrics(step, {"kl": 1.5 if step % 2 else 0.5})
    beyond = _points(captured.metrics(), "grpo.step.beyond", signal="kl")
    assert beyond[("1.0", "1")] == 10 and beyond[("1.0", "2")] == 0


def test_below_checks_and_unseen_or_nonfinite_values_keep_the_streak(captured):
    """ESS is beyond when below; a step without the scalar (or with NaN) neither extends nor resets it."""
    captured.tel.log_metrics(0, {"rollout_is_eff_sample_size": 0.4})
    captured.tel.log_metrics(1, {"reward": 1.0})
    captured.tel.log_metrics(2, {"rollout_is_eff_sample_size": math.nan})
    captured.tel.log_metrics(3, {"rollout_is_eff_sample_size": 0.45})
    metrics = captured.metrics()
    streak = _points(metrics, "grpo.step.streak", signal="rollout_is_eff_sample_size")
    assert streak[("0.5", None)] == 2 and streak[("0.7", None)] == 2 and streak[("0.3", None)] == 0
    beyond = _points(metrics, "grpo.step.beyond", signal="rollout_is_eff_sample_size")
    assert beyond[("0.5", "2")] == 1


def test_unchecked_scalars_export_no_step_series(captured):
    captured.tel.log_metrics(0, {"loss": 1.0})
    metrics = captured.metrics()
    assert "grpo.step.beyond" not in metrics or not metrics["grpo.step.beyond"].data.data_points


def test_trls_logged_kl_feeds_the_kl_check(captured):
    """The issue's reproduction: TRL's `kl` (grpo.trl.kl) at 5.0 for four steps, no grpo.kl, is KL evidence."""
    for step in range(4):
        captured.tel.log_metrics(step, {"kl": 5.0}, source="trl")
    metrics = captured.metrics()
    beyond = _points(metrics, "grpo.step.beyond", signal="kl")
    assert beyond[("2.0", "1")] == 4 and beyond[("2.0", "3")] == 2  # steps 2 and 3 closed three in a row
    assert beyond[("5.0", "1")] == 0  # beyond is strictly above the bound
    streak = _points(metrics, "grpo.step.streak", signal="kl")
    assert streak[("1.0", None)] == 4 and streak[("10.0", None)] == 0
    assert not _points(metrics, "grpo.step.beyond", signal="trl_kl")  # the alerts' series are signal="kl" only
    (point,) = metrics["grpo.step.kl"].data.data_points  # the per-step KL histogram sees TRL's value too
    assert point.count == 4 and point.sum == 20.0


def test_a_step_with_both_estimates_is_judged_on_grpo_kl_once(captured):
    """`instrument` exports our plain k3 beside TRL's kl: the check reads grpo.kl, never both."""
    for step, (kl, trl_kl) in enumerate([(0.05, 5.0), (1.5, 1.5), (1.5, 0.05)]):
        captured.tel.log_metrics(step, {"kl": kl, "trl_kl": trl_kl})
    # a step of TRL's kl alone continues the same streak (a capture that failed mid-run)
    captured.tel.log_metrics(3, {"kl": 1.2}, source="trl")
    metrics = captured.metrics()
    beyond = _points(metrics, "grpo.step.beyond", signal="kl")
    assert beyond[("1.0", "1")] == 3  # steps 1, 2 (grpo.kl 1.5) and 3 (TRL's 1.2); step 0's TRL 5.0 is unread
    assert beyond[("2.0", "1")] == 0
    assert beyond[("1.0", "3")] == 1  # steps 1-3: one streak, whichever estimate each step had
    (point,) = metrics["grpo.step.kl"].data.data_points
    assert point.count == 4 and point.sum == 0.05 + 1.5 + 1.5 + 1.2  # one observation per step


def test_each_exported_signals_extra_attributes_are_the_catalogs_point_labels(captured):
    """The dashboards keep apart (or ignore, to match the liveness series) exactly the attributes the catalog
    names for a signal (`Signal.point_labels`): every point's attributes beyond a plain gauge's are those."""
    from otel_grpo.catalog import get

    captured.tel.log_metrics(0, {"kl": 1.5, "reward_fn_mean/fmt": 0.5})
    metrics = captured.metrics()
    plain = set(dict(metrics["grpo.kl"].data.data_points[0].attributes))
    for key in ("reward_fn_mean", "step_streak", "step_beyond"):
        signal = get(key)
        extra = {frozenset(set(dict(p.attributes)) - plain) for p in metrics[signal.name].data.data_points}
        assert extra == {frozenset(signal.point_labels)}, key


def test_a_further_or_late_record_of_a_step_advances_no_streak(captured):
    """`otel-grpo follow` sends steps again after a failed flush; a summary comes at the last step: a streak
    counts steps, each once (the reviewer's g4: steps 4, 5, then 5 and 4 again, read a streak of 4)."""
    tel = captured.tel
    for step in (4, 5, 5, 4):
        tel.log_metrics(step, {"mismatch_chi2_token": 5.0})
    tel.log_metrics(5, {"train_runtime": 12.0})  # transformers' summary at the last step
    metrics = captured.metrics()
    streak = _points(metrics, "grpo.step.streak", signal="mismatch_chi2_token")
    assert streak[("1.0", None)] == 2
    beyond = _points(metrics, "grpo.step.beyond", signal="mismatch_chi2_token")
    assert beyond[("1.0", "1")] == 2 and beyond[("1.0", "2")] == 1 and beyond[("1.0", "3")] == 0


def test_a_check_a_step_has_not_judged_is_judged_by_its_later_record_once(captured):
    """A TRL step whose samples and scalars go out apart: its kl, in the second record, is that step's; a third
    record of the step judges it no more, and a late record's values never carry into the next step."""
    tel = captured.tel
    tel.log_metrics(1, {"kl": 1.5})
    tel.log_metrics(2, {"reward": 1.0})  # the step's first record: no kl yet
    tel.log_metrics(2, {"kl": 1.5})
    tel.log_metrics(2, {"kl": 1.5})
    tel.log_metrics(1, {"kl": 0.05})  # late: no step, and not the next step's value either
    tel.log_metrics(3, {"reward": 1.0})
    metrics = captured.metrics()
    assert _points(metrics, "grpo.step.streak", signal="kl")[("1.0", None)] == 2
    beyond = _points(metrics, "grpo.step.beyond", signal="kl")
    assert beyond[("1.0", "1")] == 2 and beyond[("1.0", "2")] == 1
    (point,) = metrics["grpo.step.kl"].data.data_points
    assert point.count == 2  # one observation per step


def test_a_new_attempt_starts_every_streak_again(captured):
    """A resume in this process (`new_attempt`) counts its own steps, as a resumed process does: steps 3-5 beyond,
    then the resume from step 3's checkpoint beyond at step 4 is a streak of 1, not 4 (the reviewer's g5)."""
    tel = captured.tel
    failed = tel.attempt
    for step in (3, 4, 5):
        tel.log_metrics(step, {"mismatch_chi2_token": 5.0, "kl": 1.5})
    tel.new_attempt()
    tel.log_metrics(4, {"mismatch_chi2_token": 5.0})
    metrics = captured.metrics()
    assert _points(metrics, "grpo.step.streak", signal="mismatch_chi2_token")[("1.0", None)] == 1
    assert _points(metrics, "grpo.step.streak", signal="kl")[("1.0", None)] == 0  # not judged in this attempt
    beyond = _points(metrics, "grpo.step.beyond", signal="mismatch_chi2_token")
    assert beyond[("1.0", "1")] == 4 and beyond[("1.0", "3")] == 1  # the process's counts stay: they happened
    with tel.logged_step(6, attempt=failed) as s:  # the failed attempt's record, sent late (`follow`)
        s.record({"mismatch_chi2_token": 5.0})
    for step in (5, 6):
        tel.log_metrics(step, {"mismatch_chi2_token": 5.0})
    metrics = captured.metrics()
    assert _points(metrics, "grpo.step.streak", signal="mismatch_chi2_token")[("1.0", None)] == 3
    beyond = _points(metrics, "grpo.step.beyond", signal="mismatch_chi2_token")
    assert beyond[("1.0", "1")] == 6 and beyond[("1.0", "3")] == 2
