"""Input checks shared by the stat functions: `ValueError` naming the bad argument.

Shape and dtype checks read only metadata. Checks on values (a mask that is not
0/1) would need a host sync on accelerators, so there they are evaluated on
device and raised by `reduce_stats` from the step's one device-to-host copy; on
CPU (no transfer involved) they are raised at once.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from ._partial import Stats

# Devices whose tensors are checked eagerly; a GPU tensor's check is deferred to reduce_stats.
EAGER_VALUE_CHECK_DEVICES = {"cpu"}


def tensor(x: object, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def floating(x: object, name: str, shape: Sequence[int] | None = None, dim: int | None = None) -> Tensor:
    """`x` as a floating tensor of `shape` (or `dim` dimensions); bf16/fp16 promote to float32."""
    t = tensor(x, name)
    if not t.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    _shape(t, name, shape, dim)
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def integer(x: object, name: str, shape: Sequence[int] | None = None, dim: int | None = None) -> Tensor:
    t = tensor(x, name)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got {t.dtype}")
    _shape(t, name, shape, dim)
    return t


def binary(x: object, name: str, stats: Stats, shape: Sequence[int] | None = None, dim: int | None = None) -> Tensor:
    """`x` (bool, or numbers that must all be 0 or 1) as a bool tensor."""
    t = tensor(x, name)
    if t.is_complex():
        raise ValueError(f"{name} must be bool or 0/1 numbers, got {t.dtype}")
    _shape(t, name, shape, dim)
    if t.dtype == torch.bool:
        return t
    value_check(t, name, (t * (1 - t)).abs_().sum() != 0, stats)
    return t != 0


def mask_like(x: object, name: str, shape: Sequence[int]) -> Tensor:
    """`x` as a bool or numeric mask tensor of `shape` (its values are checked by TokenMask)."""
    t = tensor(x, name)
    if t.is_complex():
        raise ValueError(f"{name} must be bool or 0/1 numbers, got {t.dtype}")
    _shape(t, name, shape, None)
    return t


def value_check(t: Tensor, name: str, bad: Tensor, stats: Stats, message: str | None = None) -> None:
    """`name` fails a check on its values if `bad`: raised now on CPU, else by reduce_stats."""
    message = message or f"{name} must contain only 0 and 1 (or be bool)"
    if t.device.type in EAGER_VALUE_CHECK_DEVICES:
        if bad:  # a CPU tensor: no device-to-host transfer involved
            raise ValueError(message)
    else:
        stats.add_check(name, bad, message)


def _shape(t: Tensor, name: str, shape: Sequence[int] | None, dim: int | None) -> None:
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if dim is not None and t.dim() != dim:
        raise ValueError(f"{name} must be {dim}-D, got shape {tuple(t.shape)}")
    if dim is not None and t.shape[0] == 0:
        raise ValueError(f"{name} is empty (batch size 0)")


def choice(value: object, name: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return value  # type: ignore[return-value]


def bounds(value: object, name: str) -> tuple[float, float]:
    """A `(lower, upper)` pair with 0 <= lower < upper (verl/xtuner write `(upper, lower)`)."""
    try:
        lower, upper = (float(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a (lower, upper) pair of numbers, got {value!r}") from None
    if math.isnan(lower) or math.isnan(upper) or lower < 0:
        raise ValueError(f"{name} must be (lower, upper) with 0 <= lower; got {value!r}")
    if not lower < upper:
        raise ValueError(
            f"{name} must be (lower, upper) with lower < upper; got {value!r} "
            "(verl and xtuner write (upper, lower): swap the two)"
        )
    return lower, upper


def nonnegative(value: object, name: str) -> float:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not v >= 0 or math.isinf(v):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
