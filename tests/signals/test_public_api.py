"""Every promised public name imports, and nothing private leaks into __all__."""

import importlib

import otel_grpo.signals as signals

EXPECTED = {
    "GatheredStats", "LEVELS", "MODES", "SAFETY_BOUND", "ReducedStats", "RolloutCorrection", "Stats", "gather_stats",
    "advantage_stats", "diversity_stats", "length_stats", "loss_stats", "mismatch_stats", "policy_stats", "reduce_stats",
    "reward_stats", "rollout_correction", "sample_diagnostics", "single_threaded", "to_device",
}  # fmt: skip


def test_all_names_import():
    assert set(signals.__all__) == EXPECTED
    module = importlib.import_module("otel_grpo.signals")
    for name in signals.__all__:
        assert getattr(module, name) is not None, name
        assert not name.startswith("_")


def test_star_import_gives_exactly_all():
    namespace: dict = {}
    exec("from otel_grpo.signals import *", namespace)
    assert EXPECTED <= set(namespace)
    assert not {k for k in namespace if not k.startswith("__")} - EXPECTED
