"""Bitwise comparison, as docs/contract.md defines it: equal bytes, NaN payloads included."""

from __future__ import annotations

import torch


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of ``t`` (any dtype, any strides) as a uint8 tensor."""
    return t.contiguous().view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` have the same shape and dtype and equal bytes."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(as_bytes(a), as_bytes(b))
