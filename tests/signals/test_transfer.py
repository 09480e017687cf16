"""`to_device`: host numbers onto the device without waiting for it (on CUDA: tests/gpu)."""

import torch

from otel_grpo.signals import to_device


def test_on_the_cpu_a_host_tensor_comes_back_as_is():
    host = torch.arange(4)
    assert to_device(host, "cpu") is host


def test_lists_become_a_tensor_of_the_dtype_asked_for():
    out = to_device([[3, 5, 0], [True, False, True]], torch.device("cpu"), torch.int64)
    assert out.dtype == torch.int64 and out.tolist() == [[3, 5, 0], [1, 0, 1]]
    assert to_device([0.5, 1.5], "cpu").dtype == torch.float32  # torch's default, as torch.tensor gives
