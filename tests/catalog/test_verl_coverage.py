"""Every metric name verl 0.9.1 logs (from the installed wheel's source) has a catalog signal, is a
timing phase, or is listed in VERL_EXTRAS with the reason it stays a `grpo.extra.*` gauge."""

from __future__ import annotations

import fnmatch
import re

import pytest

from otel_grpo import catalog
from otel_grpo.catalog._table import VERL_ALIASES, VERL_EXTRAS
from tests._support.verl_source import logged_metric_names, verl_site


@pytest.fixture(scope="module")
def verl_names() -> set[str]:
    return logged_metric_names(verl_site())


def _covered(name: str) -> str | None:
    if "*" not in name and catalog.resolve(name) is not None:
        return "signal"
    if name.startswith(("val-core/", "val-aux/")) and catalog.resolve(name.replace("*", "x"), "verl") is not None:
        return "signal"  # a validation metric per data source, variable and statistic: grpo.eval
    if re.fullmatch(r"timing_s/[\w-]+", name) and name != "timing_s/step":
        return "phase"
    for pattern, reason in VERL_EXTRAS.items():
        if fnmatch.fnmatchcase(name, pattern) and reason:
            return "extra"
    return None


def test_every_verl_name_is_a_signal_a_phase_or_a_documented_extra(verl_names):
    missing = sorted(n for n in verl_names if _covered(n) is None)
    assert not missing, f"verl 0.9.1 names with no alias and no documented reason: {missing}"


def test_the_extraction_finds_each_family(verl_names):
    """The source scan itself works: each family the issue lists yields names (mismatch/ is pre-0.9 only)."""
    for family in ("actor", "critic", "response_length", "prompt_length", "timing_s", "perf", "rollout_corr",
                   "training", "val-core", "val-aux"):
        assert any(n.startswith(family + "/") for n in verl_names), family
    assert {"actor/pg_loss", "actor/kl_loss", "actor/loss", "rollout_corr/rollout_is_mean", "timing_s/gen",
            "perf/mfu/actor", "actor/perf/max_memory_allocated_gb", "actor/perf/cpu_memory_used_gb",
            "val-core/*/*/*@*", "val-aux/*/*/*@*", "val-aux/num_turns/mean"} <= verl_names
    assert not any(n.startswith("mismatch/") for n in verl_names)


def test_verl_names_map_to_the_signals_they_mean():
    assert catalog.resolve("rollout_corr/kl")[0].key == "mismatch_kl"
    # verl 0.9.1's IS statistics are of its truncated weights: not seed 004's signals (a documented extra)
    assert catalog.resolve("rollout_corr/rollout_is_eff_sample_size") is None
    assert catalog.resolve("actor/loss")[0].key == "loss" and catalog.resolve("training/epoch")[0].key == "epoch"
    assert catalog.resolve("perf/time_per_step")[0].key == "step_time"
    assert catalog.resolve("perf/mfu/actor_infer") == (catalog.get("mfu"), {"role": "actor_infer"})
    assert catalog.resolve("prompt_length/clip_ratio")[0].key == "prompt_clipped_ratio"
    # the actor worker's memory, prefixed by ray_trainer's rename_dict
    assert catalog.stat_key("actor/perf/max_memory_allocated_gb", "verl") == "device_memory_allocated_max"
    assert catalog.stat_key("actor/perf/max_memory_reserved_gb", "verl") == "device_memory_reserved_max"
    assert catalog.stat_key("actor/perf/cpu_memory_used_gb", "verl") == "host_memory_used"


def test_verl_validation_metrics_are_evaluation_metrics(verl_names):
    """`val-core/<data source>/<var>/<metric>` (data sources hold slashes) and `val-aux/...` are grpo.eval, the name
    after `val-` in attribute `metric`: the two sections stay apart; verl's training names stay where they were."""
    training = [n for n in verl_names if "*" not in n and not n.startswith("val-")]
    assert training and not any((catalog.resolve(n, "verl") or (None,))[0] == catalog.get("eval_metric")
                                for n in training)
    assert catalog.resolve("val-core/openai/gsm8k/reward/mean@4", "verl") == (
        catalog.get("eval_metric"), {"metric": "core/openai/gsm8k/reward/mean@4"})
    assert catalog.stat_key("val-aux/openai/gsm8k/reward/mean@4", "verl") == "eval_metric/aux/openai/gsm8k/reward/mean@4"
    assert catalog.stat_key("val-aux/num_turns/mean", "verl") == "eval_metric/aux/num_turns/mean"
    assert catalog.evaluation_key("val-core/openai/gsm8k/acc/best@4/mean") == "val-core/openai/gsm8k/acc/best@4/mean"
    assert catalog.stat_key("val/ratio") == "policy_ratio_mean"  # TRL PPO's `val/`, not verl's `val-`


def test_verl_aliases_name_catalog_keys_and_extras_give_reasons():
    assert all(catalog.get(key) for key in VERL_ALIASES.values())
    assert all(reason.strip() for reason in VERL_EXTRAS.values())


def test_the_verl_column_names_only_what_verl_0_9_1_logs(verl_names):
    """docs/signals.md's verl column is verl 0.9.1's: a name it never logs (the seed-004 helper's `mismatch/*`,
    verl's own before 0.9) is an other name, still resolved."""
    def logged(name: str) -> bool:
        pattern = re.sub(r"\{\w+\}", "*", name)
        return any(fnmatch.fnmatchcase(n, pattern) or fnmatch.fnmatchcase(pattern, n) for n in verl_names)

    wrong = sorted(s.verl for s in catalog.SIGNALS if s.verl and not logged(s.verl))
    assert not wrong, f"the verl column names what verl 0.9.1 does not log: {wrong}"
    assert catalog.get("mismatch_kl").verl == "rollout_corr/kl" and catalog.get("rollout_is_valid").verl is None
    assert catalog.stat_key("mismatch/mismatch_kl", "verl") == "mismatch_kl"  # the older names still resolve
    assert catalog.stat_key("mismatch/valid") == "rollout_is_valid"
