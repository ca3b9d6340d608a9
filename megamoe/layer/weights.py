"""The layer's expert weights: metadata checks and the layer's own device copies, per recipe
(docs/contract.md s1, s4, s5).

- ``bf16``: bf16 ``w13 [E, 2I, H]`` (gate rows, then up rows) and ``w2 [E, H, I]``;
- ``fp8_mxfp4``: float tensors (quantized to MXFP4 here, mode ``rceil``) or ``Mxfp4Matrix``;
- ``mxfp8``: float tensors (quantized to MXFP8 E4M3 here, the config's scale mode) or
  ``Mxfp8Matrix``;
- ``nvfp4``: float tensors (quantized to NVFP4 here, ``g = amax / (448 * 6)`` per expert) or
  ``Nvfp4Matrix`` (E4M3 block scales, float32 ``global_scale [E]``).

Prequantized scale bytes may be uint8 or ``float8_e8m0fnu`` with columns padded up to a
multiple of 4; codes uint8 or ``float4_e2m1fn_x2``; MXFP8 payload ``float8_e4m3fn`` or
uint8. Bad weights raise ``ConfigError`` naming the argument; the caller's tensors are never
modified (the layer keeps contiguous copies, W13's gate/up rows interleaved for the
``swiglu`` epilogue).
"""

from __future__ import annotations

import torch

from megamoe.errors import ConfigError
from megamoe.experts import api as _gemm
from megamoe.experts.mxfp4 import Mxfp4Matrix, interleave_rows, quantize_mxfp4
from megamoe.experts.mxfp8 import Mxfp8Matrix, quantize_mxfp8_weights
from megamoe.experts.nvfp4 import Nvfp4Matrix, quantize_nvfp4_weights
from megamoe.layer.config import LayerConfig
from megamoe.staging.constants import MX_BLOCK, NVFP4_BLOCK, SCALE_COLUMN_MULTIPLE

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
QUANTIZED = {"fp8_mxfp4": Mxfp4Matrix, "mxfp8": Mxfp8Matrix, "nvfp4": Nvfp4Matrix}
"""The prequantized weight type of each quantized recipe."""
_PAYLOAD = {  # recipe -> (field, accepted dtypes, last dim divisor)
    "fp8_mxfp4": ("codes", (torch.uint8, torch.float4_e2m1fn_x2), 2),
    "mxfp8": ("payload", (torch.uint8, torch.float8_e4m3fn), 1),
    "nvfp4": ("codes", (torch.uint8, torch.float4_e2m1fn_x2), 2),
}
_SCALE = {  # recipe -> (accepted scale dtypes, elements per scale)
    "fp8_mxfp4": ((torch.uint8, torch.float8_e8m0fnu), MX_BLOCK),
    "mxfp8": ((torch.uint8, torch.float8_e8m0fnu), MX_BLOCK),
    "nvfp4": ((torch.uint8, torch.float8_e4m3fn), NVFP4_BLOCK),
}

Weights = torch.Tensor | Mxfp4Matrix | Mxfp8Matrix | Nvfp4Matrix


def check_weights(config: LayerConfig, w13: object, w2: object,
                  experts: int | None = None) -> None:
    """Metadata (and, for float weights of a quantized recipe, finiteness) of both matrices,
    which hold ``experts`` experts (default ``config.num_experts``; an EP rank holds its
    ``E / P``, which may be fewer than ``top_k``: docs/contract.md s7)."""
    e = config.num_experts if experts is None else experts
    h, i = config.hidden_size, config.intermediate_size
    kind = QUANTIZED.get(config.recipe)
    for name, w, shape in (("w13", w13, (e, 2 * i, h)), ("w2", w2, (e, h, i))):
        if kind is not None and isinstance(w, kind):
            _check_prequantized(config.recipe, name, w, shape)
            continue
        if not isinstance(w, torch.Tensor):
            want = f"a torch.Tensor or an {kind.__name__}" if kind else "a torch.Tensor"
            raise ConfigError(name, want, type(w).__name__)
        if kind is None and w.dtype != torch.bfloat16:
            raise ConfigError(f"{name}.dtype", "torch.bfloat16 (recipe bf16)", w.dtype)
        if kind is not None and w.dtype not in FLOAT_DTYPES:
            raise ConfigError(f"{name}.dtype", f"one of {FLOAT_DTYPES} (float weights, "
                              f"quantized by the layer) or an {kind.__name__}", w.dtype)
        if tuple(w.shape) != shape:
            raise ConfigError(f"{name}.shape", shape, tuple(w.shape))
        if kind is not None and not bool(torch.isfinite(w).all()):
            raise ConfigError(name, "finite float weights", "a non-finite value")


def _check_prequantized(recipe: str, name: str, w: Mxfp4Matrix | Mxfp8Matrix | Nvfp4Matrix,
                        shape: tuple[int, int, int]) -> None:
    e, n, k = shape
    field, dtypes, per_byte = _PAYLOAD[recipe]
    payload, scales = getattr(w, field), w.scales
    if not isinstance(payload, torch.Tensor) or payload.dtype not in dtypes:
        raise ConfigError(f"{name}.{field}", " or ".join(map(str, dtypes)),
                          getattr(payload, "dtype", type(payload).__name__))
    if tuple(payload.shape) != (e, n, k // per_byte):
        raise ConfigError(f"{name}.{field}.shape", (e, n, k // per_byte), tuple(payload.shape))
    sdtypes, per_scale = _SCALE[recipe]
    if not isinstance(scales, torch.Tensor) or scales.dtype not in sdtypes:
        raise ConfigError(f"{name}.scales", " or ".join(map(str, sdtypes)),
                          getattr(scales, "dtype", type(scales).__name__))
    if isinstance(w, Nvfp4Matrix):
        g = w.global_scale
        if not isinstance(g, torch.Tensor) or g.dtype != torch.float32 or tuple(g.shape) != (e,):
            raise ConfigError(f"{name}.global_scale", f"float32 [{e}]",
                              getattr(g, "shape", type(g).__name__))
        if not bool((torch.isfinite(g) & (g > 0)).all()):
            raise ConfigError(f"{name}.global_scale", "finite values > 0", "another value")
    cols = k // per_scale
    padded = -(-cols // SCALE_COLUMN_MULTIPLE) * SCALE_COLUMN_MULTIPLE
    if scales.dim() != 3 or tuple(scales.shape[:2]) != (e, n) or scales.shape[2] not in (
        cols, padded
    ):
        raise ConfigError(f"{name}.scales.shape", f"({e}, {n}, {cols} or {padded})",
                          tuple(scales.shape))


def prepare_weights(config: LayerConfig, w: Weights, k: int, device: torch.device,
                    gate_up: bool) -> Weights:
    """The layer's own contiguous device copy of one matrix (``gate_up``: W13, whose
    gate/up rows are interleaved for the ``swiglu`` epilogue); ``k`` is its last dim."""
    recipe = config.recipe
    if recipe == "bf16":
        w = w.to(device)
        return _gemm.interleave_gate_up(w) if gate_up else w.contiguous().clone()
    if recipe == "fp8_mxfp4":
        m = w if isinstance(w, Mxfp4Matrix) else quantize_mxfp4(w.to(device))
        payload = m.codes.to(device).view(torch.uint8)
    elif recipe == "nvfp4":
        m = w if isinstance(w, Nvfp4Matrix) else quantize_nvfp4_weights(w.to(device))
        payload = m.codes.to(device).view(torch.uint8)
    else:
        m = w if isinstance(w, Mxfp8Matrix) else quantize_mxfp8_weights(w.to(device),
                                                                         config.mxfp8_mode)
        payload = m.payload.to(device).view(torch.uint8)
    scales = m.scales.to(device).view(torch.uint8)[..., : k // _SCALE[recipe][1]]
    if gate_up:
        payload, scales = interleave_rows(payload), interleave_rows(scales)
    payload, scales = payload.contiguous().clone(), scales.contiguous().clone()
    if recipe == "fp8_mxfp4":
        return Mxfp4Matrix(payload, scales)
    if recipe == "nvfp4":
        g = m.global_scale.to(device=device, dtype=torch.float32).contiguous().clone()
        return Nvfp4Matrix(payload, scales.view(torch.float8_e4m3fn), g)
    return Mxfp8Matrix(payload.view(torch.float8_e4m3fn), scales)
