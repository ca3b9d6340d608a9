"""The oracle's number formats, bit-exact (docs/contract.md section 4).

Pure PyTorch, vectorized, device-agnostic. Public API (API.md):

- constants: E4M3_MAX, E5M2_MAX, E2M1_MAX, MX_BLOCK, NVFP4_BLOCK, SAFE_FP8_*,
  E8M0_NAN, SCALE_COLUMN_MULTIPLE (defined once in :mod:`.constants`);
- element casts: :func:`cast_e4m3`, :func:`cast_e5m2`, :func:`e2m1_encode`,
  :func:`e2m1_decode`; E8M0: :func:`e8m0_encode`, :func:`e8m0_decode`;
- MX: :func:`quantize_mxfp8`, :func:`dequantize_mxfp8`, :func:`quantize_mxfp4`,
  :func:`dequantize_mxfp4`;
- NVFP4: :func:`quantize_nvfp4`, :func:`dequantize_nvfp4`, :func:`nvfp4_global_scale`;
- safe FP8: :func:`safe_fp8_quantize`, :func:`safe_fp8_dequantize`, :func:`safe_fp8_scale_wire`;
- FP8 block scales (s12): :func:`quantize_fp8_rows`, :func:`dequantize_fp8_rows`,
  :func:`quantize_fp8_tiles`, :func:`dequantize_fp8_tiles`, :func:`fp8_block_scale`,
  :func:`interleave_gate_up`, :func:`deinterleave_gate_up`;
- packing: :func:`pack_fp4`, :func:`unpack_fp4`, :func:`pad_scale_columns`.
"""

from .casts import cast_e4m3, cast_e5m2, e2m1_decode, e2m1_encode
from .constants import (
    E2M1_MAX,
    E4M3_MAX,
    E4M3_NAN_BYTE,
    E4M3_TINY,
    E5M2_MAX,
    E5M2_NAN_BYTE,
    E8M0_NAN,
    FI_A2_BLOCK,
    FI_GATE_UP_INTERLEAVE,
    FP8_BLOCK,
    FP8_BLOCK_MIN_SCALE,
    MX_BLOCK,
    NVFP4_BLOCK,
    SAFE_FP8_FMAX,
    SAFE_FP8_SAFE_MIN,
    SAFE_FP8_TINY,
    SAFE_FP8_ZERO_SCALE,
    SCALE_COLUMN_MULTIPLE,
)
from .e8m0 import e8m0_decode, e8m0_encode
from .fp8_block import (
    deinterleave_gate_up,
    dequantize_fp8_rows,
    dequantize_fp8_tiles,
    fp8_block_scale,
    interleave_gate_up,
    quantize_fp8_rows,
    quantize_fp8_tiles,
)
from .mx import dequantize_mxfp4, dequantize_mxfp8, quantize_mxfp4, quantize_mxfp8
from .nvfp4 import dequantize_nvfp4, nvfp4_global_scale, quantize_nvfp4
from .packing import pack_fp4, pad_scale_columns, unpack_fp4
from .safe_fp8 import safe_fp8_dequantize, safe_fp8_quantize, safe_fp8_scale_wire

__all__ = [
    "E2M1_MAX",
    "E4M3_MAX",
    "E4M3_NAN_BYTE",
    "E4M3_TINY",
    "E5M2_MAX",
    "E5M2_NAN_BYTE",
    "E8M0_NAN",
    "FI_A2_BLOCK",
    "FI_GATE_UP_INTERLEAVE",
    "FP8_BLOCK",
    "FP8_BLOCK_MIN_SCALE",
    "MX_BLOCK",
    "NVFP4_BLOCK",
    "SAFE_FP8_FMAX",
    "SAFE_FP8_SAFE_MIN",
    "SAFE_FP8_TINY",
    "SAFE_FP8_ZERO_SCALE",
    "SCALE_COLUMN_MULTIPLE",
    "cast_e4m3",
    "cast_e5m2",
    "deinterleave_gate_up",
    "dequantize_fp8_rows",
    "dequantize_fp8_tiles",
    "dequantize_mxfp4",
    "dequantize_mxfp8",
    "dequantize_nvfp4",
    "e2m1_decode",
    "e2m1_encode",
    "e8m0_decode",
    "e8m0_encode",
    "fp8_block_scale",
    "interleave_gate_up",
    "nvfp4_global_scale",
    "pack_fp4",
    "pad_scale_columns",
    "quantize_fp8_rows",
    "quantize_fp8_tiles",
    "quantize_mxfp4",
    "quantize_mxfp8",
    "quantize_nvfp4",
    "safe_fp8_dequantize",
    "safe_fp8_quantize",
    "safe_fp8_scale_wire",
    "unpack_fp4",
]
