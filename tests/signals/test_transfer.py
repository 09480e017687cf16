"""`to_device`: host numbers onto the device without waiting for it (on CUDA: tests/gpu)."""

import pytest
import torch

from otel_grpo.signals import to_device


def test_on_the_cpu_a_host_tensor_comes_back_as_is():
    host = torch.arange(4)
    assert to_device(host, "cpu") is host


def test_lists_become_a_tensor_of_the_dtype_asked_for():
    out = to_device([[3, 5, 0], [True, False, True]], torch.device("cpu"), torch.int64)
    assert out.dtype == torch.int64 and out.tolist() == [[3, 5, 0], [1, 0, 1]]
    assert to_device([0.5, 1.5], "cpu").dtype == torch.float32  # torch's default, as torch.tensor gives


@pytest.mark.parametrize("values, device, named", [
    ("1,2,3", "cpu", "values"), ([[1, 2], [3]], "cpu", "values"), ([1.0, None], "cpu", "values"),
    ([1, 2], "gpu0", "device"),
])
def test_what_is_no_numbers_or_no_device_is_a_value_error_naming_the_argument(values, device, named):
    with pytest.raises(ValueError) as error:
        to_device(values, device)
    assert str(error.value).startswith(f"{named}: ") and "\n" not in str(error.value)
