"""rollout_correction(with_mismatch=True): exactly what the two separate calls give."""

import math

import pytest
import torch

from otel_grpo.signals import mismatch_stats, reduce_stats, rollout_correction

LEVELS = ("token", "sequence", "geometric")
MODES = ("truncate", "mask", "both")


def _batch(seed_value: int, dtype, mask_dtype, B: int = 16, T: int = 40, scale: float = 1.5):
    """Ragged rows, an empty row, a one-token row, NaN / -inf garbage in padding, ratios past exp(+-20)."""
    g = torch.Generator().manual_seed(seed_value)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    lengths[3], lengths[5] = 0, 1
    mask = torch.arange(T) < lengths.unsqueeze(-1)
    rollout = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    train = rollout + torch.randn(B, T, generator=g, dtype=torch.float64) * scale
    train[0, 0], train[1, 1] = 30.0, -30.0  # beyond the safety bound both ways
    garbage = torch.where(torch.rand(B, T, generator=g) < 0.5, float("nan"), -float("inf")).double()
    train, rollout = (torch.where(mask, x, garbage).to(dtype) for x in (train, rollout))
    return train, rollout, mask.to(mask_dtype)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("dtype, mask_dtype", [(torch.float32, torch.float32), (torch.float64, torch.bool)])
@pytest.mark.parametrize("veto", (None, (1e-3, 1e3), (2.0, 1e3)))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("level", LEVELS)
def test_combined_equals_separate_calls(level, mode, veto, dtype, mask_dtype):
    train, rollout, mask = _batch(7, dtype, mask_dtype)
    kw = dict(level=level, mode=mode, threshold=(0.5, 2.0), veto_threshold=veto)
    w1, m1, s1 = rollout_correction(train, rollout, mask, **kw)
    s1 = s1 | mismatch_stats(train, rollout, mask)
    w2, m2, s2 = rollout_correction(train, rollout, mask, with_mismatch=True, **kw)
    assert torch.equal(w1, w2) and torch.equal(m1, m2) and m2.dtype == mask.dtype
    r1, r2 = reduce_stats(s1), reduce_stats(s2)
    assert set(r1) == set(r2) and r1.invalid == r2.invalid
    for key in r1:
        assert _same(r1[key], r2[key]), (key, r1[key], r2[key])
    assert r1.samples.keys() == r2.samples.keys()
    for key in r1.samples:
        assert r1.samples[key] == r2.samples[key], key


def test_combined_inputs_untouched_and_mask_checked():
    train, rollout, mask = _batch(3, torch.float32, torch.float32)
    before = [t.clone() for t in (train, rollout, mask)]
    rollout_correction(train, rollout, mask, with_mismatch=True)
    for t, b in zip((train, rollout, mask), before):
        assert torch.equal(t.nan_to_num(1.5), b.nan_to_num(1.5))
    bad = mask.clone()
    bad[0, 0] = 0.5
    with pytest.raises(ValueError, match="mask"):
        rollout_correction(train, rollout, bad, with_mismatch=True)


@pytest.mark.parametrize("with_mismatch", (False, True))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("level", LEVELS)
def test_results_survive_later_calls(level, mode, with_mismatch):
    """Nothing returned lives in the reused CPU workspace: a second call leaves the first results alone."""
    for mask_dtype in (torch.float32, torch.bool):
        train, rollout, mask = _batch(1, torch.float32, mask_dtype)
        kw = dict(level=level, mode=mode, veto_threshold=(1e-3, 1e3), with_mismatch=with_mismatch)
        w, m, _ = rollout_correction(train, rollout, mask, **kw)
        w_copy, m_copy = w.clone(), m.clone()
        other = _batch(2, torch.float32, mask_dtype)
        rollout_correction(*other, **kw)
        mismatch_stats(*other)
        assert torch.equal(w, w_copy) and torch.equal(m, m_copy)


def test_a_first_call_under_inference_mode_leaves_later_calls_working():
    """The TRL integration computes its stats under torch.inference_mode: CPU workspace buffers first
    made there must stay writable by later calls outside it (an inference tensor is not)."""
    import threading

    train, rollout, mask = _batch(3, torch.float32, torch.float32)
    expected = reduce_stats(rollout_correction(train, rollout, mask, with_mismatch=True)[2])
    got, errors = [], []

    def fresh_thread() -> None:  # the workspace is per thread: this one starts without buffers
        try:
            with torch.inference_mode():
                rollout_correction(train, rollout, mask, with_mismatch=True)
            got.append(reduce_stats(rollout_correction(train, rollout, mask, with_mismatch=True)[2]))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    t = threading.Thread(target=fresh_thread)
    t.start()
    t.join()
    assert not errors, errors
    assert all(_same(got[0][k], expected[k]) for k in expected)
