"""Every stat family computed on a CUDA GPU gives the CPU's numbers (skipped without CUDA).

The signals are written once for every device; what differs on a GPU is where tensors live (a
constant made on the host, a mask indexed across devices) and the kernels' summation order. The
CPU suite cannot see the first; this compares both devices on the same batches, every rollout
correction level and mode included.
"""

from __future__ import annotations

import math

import pytest
import torch

from otel_grpo.signals import LEVELS, MODES, reduce_stats, rollout_correction
from tests.signals.signal_batches import everything

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="compares the CPU with a CUDA device")


def _assert_same(cpu, gpu) -> None:
    assert set(gpu) == set(cpu) and gpu.invalid == cpu.invalid
    for key, value in cpu.items():
        assert math.isclose(gpu[key], value, rel_tol=1e-5, abs_tol=1e-6), key
    assert gpu.samples.keys() == cpu.samples.keys()
    for key, values in cpu.samples.items():
        torch.testing.assert_close(torch.tensor(gpu.samples[key]), torch.tensor(values), rtol=1e-5, atol=1e-6)
    assert gpu.columns.keys() == cpu.columns.keys()
    for key, values in cpu.columns.items():
        assert [v is None for v in gpu.columns[key]] == [v is None for v in values], key
        for a, b in zip(gpu.columns[key], values):
            assert a is None or math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6), key


@pytest.mark.parametrize("B, T", [(7, 5), (64, 300)])
def test_every_family_on_cuda_equals_the_cpu(B: int, T: int) -> None:
    _assert_same(reduce_stats(everything(B, T, seed=1)), reduce_stats(everything(B, T, seed=1, device="cuda")))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("mode", MODES)
def test_rollout_correction_on_cuda_equals_the_cpu(level: str, mode: str) -> None:
    g = torch.Generator().manual_seed(3)
    mask = (torch.arange(40) < torch.randint(0, 41, (16,), generator=g)[:, None]).float()
    rollout = -torch.rand(16, 40, generator=g) * 3
    train = rollout + torch.randn(16, 40, generator=g) * 0.8
    kwargs = dict(level=level, mode=mode, threshold=(0.5, 2.0), veto_threshold=(1e-3, 1e3))
    cpu_w, cpu_mask, cpu_stats = rollout_correction(train, rollout, mask, **kwargs)
    gpu_w, gpu_mask, gpu_stats = rollout_correction(train.cuda(), rollout.cuda(), mask.cuda(), **kwargs)
    torch.testing.assert_close(gpu_w.cpu(), cpu_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gpu_mask.cpu(), cpu_mask)
    _assert_same(reduce_stats(cpu_stats), reduce_stats(gpu_stats))
