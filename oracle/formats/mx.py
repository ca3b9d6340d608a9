"""MXFP8 and MXFP4 block formats (docs/contract.md section 4).

Blocks of 32 along the last dim share one E8M0 scale byte (see
:mod:`oracle.formats.e8m0` for the exponent rules). Payload =
``sat_cast(x * 2**-e)``: the product is formed in float32, which is exact
here (``2**-e`` is a power of two and, in both modes, ``|x * 2**-e| <
2**(emax_elem + 1)`` cannot overflow; a product can only lose bits in the
float32 subnormal range, below ``2**-126``, where every element format rounds
to zero anyway), then rounded once, RNE, saturating. Input of any float dtype
is first converted to float32 (exact for bf16/fp16; docs/contract.md s4 takes the
amax in float32).

A block holding NaN or Inf gets scale byte 0xFF and every payload element is
NaN (E4M3/E5M2 byte 0x7F) or, for MXFP4 (E2M1 has no NaN), code 0. An
all-zero block gets byte 0x00 and zero payload (a ``-0.0`` element keeps its
sign, exactly as the general formula ``cast(x * 2**127)`` gives it).
"""

from __future__ import annotations

import torch

from ._validate import (
    require_choice,
    require_dtype,
    require_floating,
    require_last_dim_multiple,
    require_scale_columns,
)
from .casts import e2m1_codes_, e2m1_decode, round_to_grid_
from .constants import E2M1, E8M0_NAN, MX_BLOCK, MXFP8_ELEMENTS, SCALE_MODES, ElementFormat
from .e8m0 import block_scale_bytes, e8m0_decode
from .packing import pack_fp4, unpack_fp4

_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_E8M0_NEGATE = 2 * 127  # byte of -e is 254 - byte of e


def block_amax(blocks: torch.Tensor) -> torch.Tensor:
    """max |x| over the last dim (float32 blocks), NaN-propagating, without an ``abs`` temporary."""
    return torch.maximum(blocks.amax(dim=-1), blocks.amin(dim=-1).neg_())


def _mx_scaled(
    x: torch.Tensor, fmt: ElementFormat, mode: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(``x * 2**-e`` float32 [..., nb, 32] (exact), scale bytes uint8 [..., nb], non-finite block mask)."""
    xf = x.to(torch.float32, copy=True)
    lead = tuple(xf.shape[:-1])
    blocks = xf.reshape(*lead, xf.shape[-1] // MX_BLOCK, MX_BLOCK)
    scale_bytes = block_scale_bytes(block_amax(blocks), fmt, mode)
    bad = scale_bytes == E8M0_NAN
    inv_bytes = (_E8M0_NEGATE - scale_bytes.to(torch.int32)).clamp_(0, 254).to(torch.uint8)
    return blocks.mul_(e8m0_decode(inv_bytes).unsqueeze(-1)), scale_bytes, bad


def quantize_mxfp8(
    x: torch.Tensor, elem: str = "e4m3", mode: str = "rceil"
) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP8 quantization (docs/contract.md s4).

    x: float tensor ``[..., K]``, ``K % 32 == 0``. elem: ``"e4m3"`` or
    ``"e5m2"``. mode: ``"rceil"`` (default) or ``"floor"``.
    Returns (payload float8_e4m3fn/float8_e5m2 of x's shape, scale_bytes uint8
    ``[..., K/32]``). Never modifies ``x``.
    """
    require_floating("x", x)
    require_choice("elem", elem, tuple(MXFP8_ELEMENTS))
    require_choice("mode", mode, SCALE_MODES)
    require_last_dim_multiple("x", x, MX_BLOCK, "MX block size")
    fmt = MXFP8_ELEMENTS[elem]
    scaled, scale_bytes, bad = _mx_scaled(x, fmt, mode)
    grid = round_to_grid_(scaled, fmt)
    assert fmt.torch_dtype is not None and fmt.nan_byte is not None
    payload = grid.to(fmt.torch_dtype).view(torch.uint8)
    if bool(bad.any()):
        payload = payload.masked_fill_(bad.unsqueeze(-1), fmt.nan_byte)
    return payload.view(fmt.torch_dtype).reshape(x.shape), scale_bytes


def _scaled_blocks(values: torch.Tensor, scale_bytes: torch.Tensor) -> torch.Tensor:
    """float32 ``values [..., K]`` times the E8M0 scale of each 32-block -> float32 ``[..., K]``."""
    lead = tuple(values.shape[:-1])
    nb = values.shape[-1] // MX_BLOCK
    require_scale_columns("scale_bytes", scale_bytes, lead, nb)
    scale = e8m0_decode(scale_bytes[..., :nb])
    out = values.reshape(*lead, nb, MX_BLOCK) * scale.unsqueeze(-1)
    return out.reshape(values.shape)


def dequantize_mxfp8(payload: torch.Tensor, scale_bytes: torch.Tensor) -> torch.Tensor:
    """MXFP8 -> float32: ``float32(payload) * 2**(b - 127)`` per block; byte 0xFF -> NaN.

    ``scale_bytes`` may carry padded columns: only the first ``K/32`` are read.
    """
    require_dtype("payload", payload, _FP8_DTYPES)
    require_dtype("scale_bytes", scale_bytes, (torch.uint8,))
    require_last_dim_multiple("payload", payload, MX_BLOCK, "MX block size")
    return _scaled_blocks(payload.to(torch.float32), scale_bytes)


def quantize_mxfp4(x: torch.Tensor, mode: str = "rceil") -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4 quantization (docs/contract.md s4): E2M1 codes, blocks of 32, E8M0 scale (fmax 6, emax_elem 2).

    Returns (packed uint8 ``[..., K/2]``, even element in the low nibble;
    scale_bytes uint8 ``[..., K/32]``). A NaN/Inf block gets 0xFF and codes 0.
    """
    require_floating("x", x)
    require_choice("mode", mode, SCALE_MODES)
    require_last_dim_multiple("x", x, MX_BLOCK, "MX block size")
    scaled, scale_bytes, bad = _mx_scaled(x, E2M1, mode)
    codes = e2m1_codes_(scaled)
    if bool(bad.any()):
        codes = codes.masked_fill_(bad.unsqueeze(-1), 0)
    return pack_fp4(codes.reshape(x.shape)), scale_bytes


def dequantize_mxfp4(packed: torch.Tensor, scale_bytes: torch.Tensor) -> torch.Tensor:
    """MXFP4 -> float32: ``e2m1_value * 2**(b - 127)`` per 32-block; byte 0xFF -> NaN."""
    require_dtype("packed", packed, (torch.uint8,))
    require_dtype("scale_bytes", scale_bytes, (torch.uint8,))
    require_last_dim_multiple("packed", packed, MX_BLOCK // 2, "MX block size / 2 bytes")
    return _scaled_blocks(e2m1_decode(unpack_fp4(packed)), scale_bytes)
