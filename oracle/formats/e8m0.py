"""E8M0 scale bytes and the MX block-exponent rules (docs/contract.md section 4).

Byte ``b`` in 0..254 means ``2**(b - 127)``; ``0xFF`` is NaN. The block
exponent is computed exactly from float32 bits, never with ``log2``:

- ``rceil``: ``e = ceil(log2(d))`` with ``d = float32(amax) / float32(fmax)``
  (one IEEE float32 division), exact for normal and subnormal ``d``;
- ``floor``: ``e = floor(log2(amax)) - emax_elem`` (OCP MX v1.0);

then ``e`` is clamped to ``[-127, 127]`` and stored as ``e + 127``. An all-zero
block gets byte 0x00; a block holding NaN or Inf gets 0xFF.
"""

from __future__ import annotations

import torch

from ._validate import fail, require_dtype, require_integer
from .constants import E8M0_BIAS, E8M0_MAX_EXP, E8M0_MIN_EXP, E8M0_NAN, ElementFormat

_F32_MANT_MASK = 0x7FFFFF


def _log2_parts(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For float32 ``v >= 0``: (floor(log2 v), is-power-of-two, is-zero), all exact.

    Subnormal ``v = m * 2**-149`` is handled by converting the integer
    mantissa ``m < 2**23`` to float32 (exact) and reading its exponent.
    """
    bits = v.view(torch.int32)
    field = bits >> 23
    mant = bits & _F32_MANT_MASK
    m_bits = mant.to(torch.float32).view(torch.int32)  # exact: mant < 2**24
    sub_floor = (m_bits >> 23) - 127 - 149
    sub_pow2 = (m_bits & _F32_MANT_MASK) == 0
    normal = field > 0
    floor_log2 = torch.where(normal, field - 127, sub_floor)
    is_pow2 = torch.where(normal, mant == 0, sub_pow2)
    return floor_log2, is_pow2, bits == 0


def floor_log2_f32(v: torch.Tensor) -> torch.Tensor:
    """Exact ``floor(log2(v))`` (int32) of finite float32 ``v > 0``; ``v == 0`` gives -150."""
    f, _, zero = _log2_parts(v)
    return torch.where(zero, -150, f)


def ceil_log2_f32(v: torch.Tensor) -> torch.Tensor:
    """Exact ``ceil(log2(v))`` (int32) of finite float32 ``v > 0``; ``v == 0`` gives -150."""
    f, pow2, zero = _log2_parts(v)
    return torch.where(zero, -150, f + (~pow2).to(torch.int32))


def block_scale_bytes(amax: torch.Tensor, fmt: ElementFormat, mode: str) -> torch.Tensor:
    """E8M0 bytes (uint8) of blocks with float32 maxima ``amax`` (any shape), per docs/contract.md s4.

    ``mode`` is ``"rceil"`` (``fmax = fmt.fmax``) or ``"floor"`` (``emax_elem =
    fmt.emax_elem``). Zero blocks -> 0x00, non-finite amax -> 0xFF.
    """
    finite = torch.isfinite(amax)
    a = torch.where(finite, amax, 0.0)
    if mode == "rceil":
        d = a / torch.tensor(fmt.fmax, dtype=torch.float32, device=a.device)
        e = ceil_log2_f32(d)
    elif mode == "floor":
        e = floor_log2_f32(a) - fmt.emax_elem
    else:
        raise fail("mode", "unknown scale mode", "'rceil' or 'floor'", repr(mode))
    e = e.clamp(E8M0_MIN_EXP, E8M0_MAX_EXP)
    b = (e + E8M0_BIAS).to(torch.uint8)
    b = torch.where(a == 0, 0, b).to(torch.uint8)
    return torch.where(finite, b, E8M0_NAN).to(torch.uint8)


def e8m0_encode(exponent: torch.Tensor) -> torch.Tensor:
    """Integer exponents in ``[-127, 127]`` -> E8M0 bytes (uint8) ``e + 127``."""
    require_integer("exponent", exponent)
    if exponent.numel():
        lo, hi = int(exponent.min()), int(exponent.max())
        if lo < E8M0_MIN_EXP or hi > E8M0_MAX_EXP:
            raise fail(
                "exponent",
                "E8M0 exponent out of range",
                f"[{E8M0_MIN_EXP}, {E8M0_MAX_EXP}]",
                f"min {lo}, max {hi}",
            )
    return (exponent.to(torch.int32) + E8M0_BIAS).to(torch.uint8)


def e8m0_decode(scale_bytes: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes (uint8) -> float32 ``2**(b - 127)``; 0xFF -> NaN; byte 0 is the subnormal 2**-127."""
    require_dtype("scale_bytes", scale_bytes, (torch.uint8,))
    b = scale_bytes.to(torch.int32)
    normal = (b.clamp(min=1) << 23).view(torch.float32)  # 2**(b-127) for b >= 1
    sub = torch.tensor(2.0**-127, dtype=torch.float32, device=b.device)
    out = torch.where(b == 0, sub, normal)
    return torch.where(b == E8M0_NAN, torch.nan, out)
