"""Computing and reducing every stat of a step reads the device exactly once, and copies nothing to it."""

import pytest
import torch

from otel_grpo.signals import (
    _validate,
    diversity_stats,
    length_stats,
    mismatch_stats,
    policy_stats,
    reduce_stats,
    reward_stats,
    rollout_correction,
    sample_diagnostics,
)

# Every Tensor method that moves values to the host or into Python.
_HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


@pytest.fixture
def host_transfers(monkeypatch):
    """The names of the host reads and of the host-to-device copies made while the test runs, in order."""
    calls: list[str] = []
    for name in _HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    original_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args else None)
        if isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu":
            calls.append("to(cpu)")
        return original_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    # Host numbers placed on a tensor's device (`torch.tensor(x, device=...)`): on a GPU a blocking copy
    # from pageable memory, which waits for every kernel already queued, as a read does
    for name in ("tensor", "as_tensor"):
        original = getattr(torch, name)

        def made(*args, _name=name, _original=original, **kwargs):
            if kwargs.get("device") is not None:
                calls.append(f"{_name}(device=)")
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, made)
    return calls


def _inputs(B=8, T=16):
    g = torch.Generator().manual_seed(0)
    mask = torch.arange(T) < torch.randint(1, T + 1, (B,), generator=g).unsqueeze(-1)  # bool: no value check
    lp = -torch.rand(B, T, generator=g)
    rollout = lp + 0.2 * torch.randn(B, T, generator=g)
    rewards = torch.rand(B, generator=g)
    ids = torch.randint(0, 100, (B, T), generator=g)
    return mask, lp, rollout, rewards, ids


def test_one_device_to_host_transfer_per_step(host_transfers, monkeypatch):
    # As on a GPU: value checks (mask is 0/1, ids in range) ride in reduce_stats' one copy.
    # (On CPU they run eagerly; reading a CPU tensor there transfers nothing.)
    monkeypatch.setattr(_validate, "EAGER_VALUE_CHECK_DEVICES", set())
    mask, lp, rollout, rewards, ids = _inputs()
    mask = mask.float()  # a float mask: its 0/1 check is one of the deferred ones
    for step in range(3):
        host_transfers.clear()
        stats = reward_stats(rewards, 4, {"acc": rewards.round()}, advantages=rewards - 0.5)
        stats |= length_stats(mask, torch.zeros(8, dtype=torch.bool))
        stats |= policy_stats(lp, rollout, rewards - 0.5, mask, 0.2, 0.2, ref_logprobs=rollout, entropy=-lp)
        for level in ("token", "sequence", "geometric"):
            _, _, is_stats = rollout_correction(
                lp, rollout, mask, level=level, mode="both", veto_threshold=(1e-2, 1e2)
            )
        stats |= is_stats | mismatch_stats(lp, rollout, mask) | diversity_stats(ids, mask)
        stats |= sample_diagnostics(mask, logprobs=lp, rollout_logprobs=rollout, ref_logprobs=rollout, entropy=-lp,
                                    truncated=torch.zeros(8))
        if step == 0:  # the first step makes the few constants cached per device (a copy each, once)
            reduce_stats(stats)
            continue
        assert host_transfers == []  # the stat functions never read the device, nor copy host numbers to it
        reduced = reduce_stats(stats)
        assert host_transfers == ["numpy"]
        assert len(reduced) > 60
        assert len(reduced.columns["is_weight_max"]) == 8  # the per-sample columns came in that one copy


def test_the_counter_sees_a_hidden_sync(host_transfers):
    """The fixture would catch a stray `if tensor:` or float(tensor) in the code under test."""
    t = torch.ones(2)
    bool(t.any()), float(t.sum())
    torch.tensor(2.0, device=t.device)
    assert host_transfers == ["__bool__", "__float__", "tensor(device=)"]
