"""FP4 nibble packing and scale-column padding (docs/contract.md section 4).

Two E2M1 codes per byte, the even element in the low nibble. Scale-byte
matrices are padded with zero columns to a multiple of 4.
"""

from __future__ import annotations

import torch

from ._validate import fail, require_dtype, require_last_dim_multiple
from .constants import SCALE_COLUMN_MULTIPLE


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes ``[..., K]`` (0..15, K even) -> uint8 ``[..., K/2]``: ``lo | hi << 4``, lo = even element."""
    require_dtype("codes", codes, (torch.uint8,))
    require_last_dim_multiple("codes", codes, 2, "two FP4 codes per byte")
    if codes.numel() and int(codes.max()) > 15:
        raise fail("codes", "FP4 codes must be 4-bit", "values 0..15", f"max {int(codes.max())}")
    pairs = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., K/2]`` -> codes uint8 ``[..., K]`` (inverse of :func:`pack_fp4`)."""
    require_dtype("packed", packed, (torch.uint8,))
    if packed.dim() < 1:
        raise fail("packed", "needs a last dim", "at least 1 dim", f"shape {tuple(packed.shape)}")
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack([lo, hi], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def pad_scale_columns(scale: torch.Tensor, multiple: int = SCALE_COLUMN_MULTIPLE) -> torch.Tensor:
    """uint8 ``[..., n]`` -> uint8 ``[..., ceil(n/multiple)*multiple]``, new columns zero."""
    require_dtype("scale", scale, (torch.uint8,))
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise fail("multiple", "must be a positive int", "int >= 1", repr(multiple))
    if scale.dim() < 1:
        raise fail("scale", "needs a last dim", "at least 1 dim", f"shape {tuple(scale.shape)}")
    n = scale.shape[-1]
    padded = -(-n // multiple) * multiple
    out = scale.new_zeros(*scale.shape[:-1], padded)
    out[..., :n] = scale
    return out


__all__ = ["pack_fp4", "pad_scale_columns", "unpack_fp4"]
