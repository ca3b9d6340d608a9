"""Constants of the oracle's number formats (docs/contract.md section 4).

Every constant is defined here once; other modules import it. The element
formats are described by :class:`ElementFormat`, a frozen dataclass holding
exactly what the rounding needs (mantissa bits, smallest normal exponent,
largest finite magnitude) plus the OCP ``emax_elem`` used by the MX ``floor``
scale mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

E4M3_MAX = 448.0
"""Largest finite E4M3 (``float8_e4m3fn``) magnitude."""
E5M2_MAX = 57344.0
"""Largest finite E5M2 magnitude."""
E2M1_MAX = 6.0
"""Largest E2M1 (FP4) magnitude."""
E4M3_TINY = 2.0**-6
"""Smallest normal E4M3 magnitude (``torch.finfo(torch.float8_e4m3fn).tiny``); NVFP4 scale floor."""

MX_BLOCK = 32
"""Elements per MX (MXFP8 / MXFP4) block along the last dim."""
NVFP4_BLOCK = 16
"""Elements per NVFP4 block along the last dim."""
SCALE_COLUMN_MULTIPLE = 4
"""Scale-byte columns are padded to a multiple of this (zero fill)."""

E8M0_BIAS = 127
"""E8M0 byte ``b`` in 0..254 means ``2**(b - E8M0_BIAS)``."""
E8M0_NAN = 0xFF
"""The E8M0 NaN byte."""
E8M0_MIN_EXP = -127
"""Smallest block exponent (byte 0x00)."""
E8M0_MAX_EXP = 127
"""Largest block exponent (byte 0xFE)."""

E4M3_NAN_BYTE = 0x7F
"""The NaN byte every NaN element casts to in E4M3 (sign bit clear)."""
E5M2_NAN_BYTE = 0x7F
"""The NaN byte every NaN element casts to in E5M2: our choice (docs/contract.md s4 leaves it open).

Sign clear, all exponent and mantissa bits set: the same byte as E4M3's NaN and
PTX's canonical FP8 NaN. (ml_dtypes produces 0x7E from a float32 quiet NaN.)
"""
E4M3_NVFP4_NAN_SCALE_BYTE = E4M3_NAN_BYTE
"""NVFP4 scale byte of a block holding NaN or Inf."""

FLT_MAX = 3.4028234663852886e38
"""Largest finite float32."""

SAFE_FP8_FMAX = 448.0
SAFE_FP8_TINY = 448e-30
SAFE_FP8_SAFE_MIN = 1.3165537626040637e-36
SAFE_FP8_ZERO_SCALE = 1e-30
SAFE_FP8_WIRE_LANES = 4
"""Safe FP8 dequant scale wire format: ``[T, 4]`` float32, four equal lanes."""

FP8_BLOCK = 128
"""FP8 block scaling (docs/contract.md s12): activation blocks of 1 x 128 along the row, weight
tiles of 128 x 128."""
FP8_BLOCK_MIN_SCALE = 1e-30
"""The smallest FP8 block scale ``d`` (float32-rounded): ``d = max(amax / 448, 1e-30)``."""
FI_A2_BLOCK = 64
"""Recipe ``fp8_block_fi`` (docs/contract.md s12): A2 blocks of 1 x 64, payload ``x * (1/d)``
(FlashInfer's sm90 FP8 pull, ``Fc1EpilogueStoreTileN``)."""
FI_GATE_UP_INTERLEAVE = 8
"""Recipe ``fp8_block_fi``: W13's gate and up rows alternate in groups of 8 before its 128 x 128
tiles are cut (FlashInfer's ``Fp8GateUpInterleave``), so a tile spans 64 gate and 64 up rows."""

NVFP4_GLOBAL_DIVISOR = E4M3_MAX * E2M1_MAX
"""``g = amax / (448 * 6)``: the per-tensor NVFP4 decode scale divisor."""


@dataclass(frozen=True)
class ElementFormat:
    """A narrow float element format, as the oracle's rounding sees it.

    name: short name ("e4m3", "e5m2", "e2m1").
    mant_bits: explicit mantissa bits.
    emin: exponent of the smallest normal value (subnormal quantum is
        ``2**(emin - mant_bits)``).
    fmax: largest finite magnitude; finite values beyond it saturate.
    emax_elem: OCP MX ``emax_elem`` (exponent of the largest normal binade),
        used by the MX ``floor`` scale mode.
    torch_dtype: the torch storage dtype (``None`` for E2M1, stored as codes).
    nan_byte: the byte NaN casts to (``None`` for E2M1: it has no NaN).
    """

    name: str
    mant_bits: int
    emin: int
    fmax: float
    emax_elem: int
    torch_dtype: torch.dtype | None
    nan_byte: int | None


E4M3 = ElementFormat("e4m3", 3, -6, E4M3_MAX, 8, torch.float8_e4m3fn, E4M3_NAN_BYTE)
E5M2 = ElementFormat("e5m2", 2, -14, E5M2_MAX, 15, torch.float8_e5m2, E5M2_NAN_BYTE)
E2M1 = ElementFormat("e2m1", 1, 0, E2M1_MAX, 2, None, None)

MXFP8_ELEMENTS = {"e4m3": E4M3, "e5m2": E5M2}
"""MXFP8 element formats by the ``elem`` argument's accepted values."""
SCALE_MODES = ("rceil", "floor")
"""MX scale rounding modes (docs/contract.md s4)."""
