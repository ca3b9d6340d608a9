"""Element casts: E4M3, E5M2 and E2M1 (docs/contract.md section 4).

Round to nearest, ties to even; finite values beyond the largest finite
magnitude saturate to it (E4M3 448, E5M2 57344, E2M1 6). Infinities saturate
too (PTX ``cvt.rn.satfinite`` semantics; the contract only fixes finite
values). NaN stays NaN with one canonical byte per format
(:data:`~oracle.formats.constants.E4M3_NAN_BYTE`,
:data:`~oracle.formats.constants.E5M2_NAN_BYTE`); E2M1 has no NaN and encodes
NaN as code 0. Zero keeps its sign in E4M3/E5M2 (IEEE); E2M1 code 0 never
carries a sign (docs/contract.md s4).

The rounding is done here, exactly, in the input's own precision (float64
input is rounded once from float64, never through float32); torch's float8
conversion is only used to store values that are already on the grid.
"""

from __future__ import annotations

import torch

from ._validate import fail, require_dtype, require_floating
from .constants import E2M1, E4M3, E5M2, ElementFormat

# float32 / float64 bit layouts: (int dtype, mantissa bits, exponent bias)
_LAYOUTS = {
    torch.float32: (torch.int32, 23, 127),
    torch.float64: (torch.int64, 52, 1023),
}

_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def working_copy(x: torch.Tensor) -> torch.Tensor:
    """A fresh copy of ``x`` in float64 (if float64) or float32 (every other float dtype, exact)."""
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.to(dtype, copy=True)


def round_to_grid_(v: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    """Round ``v`` (float32 or float64, owned by the caller) in place to ``fmt``'s grid; returns ``v``.

    RNE, saturating, NaN kept, sign (of zero too) kept. Afterwards every
    finite value is exactly representable in ``fmt``, so any later storage
    conversion is exact. ``v`` is clamped to ``[-fmax, fmax]`` first
    (saturation; Inf -> the largest finite value), the binade exponent ``e =
    max(floor(log2 |v|), emin)`` is read from the bits, and ``v`` is rounded to
    a multiple of the quantum ``2**(e - mant_bits)`` by scaling with exact
    powers of two around ``torch.round`` (half to even): one correctly
    rounded step. In place to keep the oracle fast (one integer temporary).
    """
    int_dtype, mbits, bias = _LAYOUTS[v.dtype]
    v.clamp_(-fmt.fmax, fmt.fmax)  # NaN stays NaN
    field_mask = (1 << (8 * v.element_size() - 1 - mbits)) - 1
    # quantum exponent shift = max(field - bias, emin) - mant_bits, from the exponent field
    # (NaN has the all-ones field: harmless). 2**-shift is built from bits:
    # (bias - shift) << mbits, and bias - shift = min(2 * bias + mant_bits - field, bias + mant_bits - emin)
    pow_bits = (v.view(int_dtype) >> mbits).bitwise_and_(field_mask).neg_()
    pow_bits.add_(2 * bias + fmt.mant_bits).clamp_(max=bias + fmt.mant_bits - fmt.emin)
    pow_bits.bitwise_left_shift_(mbits)
    v.mul_(pow_bits.view(v.dtype)).round_()
    # 2**shift: (bias + shift) << mbits == (2 * bias << mbits) - bits(2**-shift)
    pow_bits.neg_().add_((2 * bias) << mbits)
    return v.mul_(pow_bits.view(v.dtype))


def _cast_fp8(x: torch.Tensor, fmt: ElementFormat, argument: str = "x") -> torch.Tensor:
    require_floating(argument, x)
    r = round_to_grid_(working_copy(x), fmt)
    assert fmt.torch_dtype is not None and fmt.nan_byte is not None
    out = r.to(fmt.torch_dtype)
    nan = torch.isnan(r)
    if bool(nan.any()):
        out = out.view(torch.uint8).masked_fill_(nan, fmt.nan_byte).view(fmt.torch_dtype)
    return out


def cast_e4m3(x: torch.Tensor) -> torch.Tensor:
    """``x`` -> ``float8_e4m3fn``: RNE, saturating to +-448 (Inf too), NaN -> byte 0x7F (docs/contract.md s4)."""
    return _cast_fp8(x, E4M3)


def cast_e5m2(x: torch.Tensor) -> torch.Tensor:
    """``x`` -> ``float8_e5m2``: RNE, saturating to +-57344 (Inf too), NaN -> byte 0x7F (docs/contract.md s4)."""
    return _cast_fp8(x, E5M2)


def e2m1_codes_(v: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8 0..15) of float32 ``v`` (owned by the caller, consumed): RNE, saturating.

    The same rounding as :func:`round_to_grid_` with ``E2M1``, fused with the
    encoding: with ``e = max(floor(log2 |v|), 0)`` (0, 1 or 2 after clamping to
    +-6) and ``n = round_half_even(|v| / 2**(e - 1))``, the magnitude code is
    ``n + 2e`` (e.g. 5 -> e 2, n = round(2.5) = 2 -> code 6 = value 4). Bit 3
    is set only for a negative value that does not round to zero, so code 0
    never carries a sign; NaN -> code 0; Inf saturates.
    """
    v.clamp_(-E2M1.fmax, E2M1.fmax).nan_to_num_(nan=0.0)
    field = (v.view(torch.int32) >> 23).bitwise_and_(0xFF)
    # 2**(1 - e) = bits (127 + 1 - e) << 23, with e = clamp(field - 127, min=0)
    field.neg_().add_(255).clamp_(max=128).bitwise_left_shift_(23)
    v.mul_(field.view(torch.float32)).round_()  # n, signed (-0.0 when a negative rounds to 0)
    negative = v < 0
    twice_e = field.bitwise_right_shift_(23).neg_().add_(128).mul_(2)
    codes = v.abs_().add_(twice_e).to(torch.uint8)
    return codes.add_(negative.view(torch.uint8), alpha=8)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """``x`` -> E2M1 codes (uint8, one code per element, 0..15).

    RNE with ties to the even code (0.25->0, 0.75->1, 1.25->1, 1.75->2,
    2.5->2, 3.5->4, 5->4), saturating at +-6 (Inf too); code 0 never carries a
    sign; NaN -> code 0 (docs/contract.md s4).
    """
    require_floating("x", x)
    w = working_copy(x)
    if w.dtype == torch.float64:  # round once from float64; the grid values are exact in float32
        w = round_to_grid_(w, E2M1).to(torch.float32)
    return e2m1_codes_(w)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8 0..15) -> float32 values; code 8 decodes to -0.0."""
    require_dtype("codes", codes, (torch.uint8,))
    if codes.numel() and int(codes.max()) > 15:
        raise fail("codes", "E2M1 codes must be 4-bit", "values 0..15", f"max {int(codes.max())}")
    mags = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=codes.device)
    lut = torch.cat([mags, -mags])
    return lut[codes.long()]
