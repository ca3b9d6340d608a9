"""NVFP4: E2M1 codes in blocks of 16, E4M3 block scale, float32 global decode scale (docs/contract.md s4).

Exactly as written in the contract, each step one IEEE float32 operation,
rounded to nearest:

- ``s = e4m3(clamp((amax_blk / 6) / g, finfo(e4m3).tiny, 448))``
- ``r = (1 / g) / float32(s)``; ``code = e2m1(clamp(x * r, -6, 6))``
- a block holding NaN or Inf gets scale byte 0x7F (E4M3 NaN) and codes 0
- dequant: ``(code_value * float32(s)) * g``

``g`` (``global_scale``) is a python float or a float32 tensor broadcastable
to ``x.shape[:-1] + (1,)`` (e.g. ``[E, 1, 1]`` for per-expert weights); it
must be finite and positive. For weights ``g = amax_tensor / (448 * 6)``
(:func:`nvfp4_global_scale`).
"""

from __future__ import annotations

import torch

from ._validate import (
    fail,
    require_dtype,
    require_floating,
    require_last_dim_multiple,
    require_scale_columns,
)
from .casts import e2m1_codes_, e2m1_decode, round_to_grid_
from .constants import (
    E2M1_MAX,
    E4M3,
    E4M3_MAX,
    E4M3_NVFP4_NAN_SCALE_BYTE,
    E4M3_TINY,
    NVFP4_BLOCK,
    NVFP4_GLOBAL_DIVISOR,
)
from .mx import block_amax
from .packing import pack_fp4, unpack_fp4


def _global_scale(global_scale: object, lead: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Validated float32 ``g``, shaped to broadcast against ``[*lead, nblocks]``."""
    if isinstance(global_scale, bool):
        raise fail("global_scale", "must be a float or a float32 tensor", "float", "bool")
    if isinstance(global_scale, (int, float)):
        g = torch.tensor(float(global_scale), dtype=torch.float32, device=device)
    elif isinstance(global_scale, torch.Tensor):
        require_dtype("global_scale", global_scale, (torch.float32,))
        g = global_scale.to(device)
        target = (*lead, 1)
        try:
            ok = torch.broadcast_shapes(g.shape, target) == torch.Size(target)
        except RuntimeError:
            ok = False
        if not ok:
            raise fail(
                "global_scale",
                "shape must broadcast to x.shape[:-1] + (1,)",
                f"broadcastable to {target}",
                f"shape {tuple(g.shape)}",
            )
    else:
        raise fail(
            "global_scale", "must be a float or a float32 tensor", "float", type(global_scale).__name__
        )
    if g.numel():
        finite_positive = torch.isfinite(g) & (g > 0)
        if not bool(finite_positive.all()):
            bad = g[~finite_positive].flatten()[0].item()
            raise fail("global_scale", "must be finite and > 0", "finite positive", bad)
    return g


def _f32(value: float, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32, device=like.device)


def quantize_nvfp4(
    x: torch.Tensor, global_scale: float | torch.Tensor = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4 quantization (docs/contract.md s4).

    x: float tensor ``[..., K]``, ``K % 16 == 0`` (converted to float32 first;
    exact for bf16). Returns (packed uint8 ``[..., K/2]``, even element in the
    low nibble; scales float8_e4m3fn ``[..., K/16]``). Never modifies ``x``.
    """
    require_floating("x", x)
    require_last_dim_multiple("x", x, NVFP4_BLOCK, "NVFP4 block size")
    lead = tuple(x.shape[:-1])
    g = _global_scale(global_scale, lead, x.device)
    xf = x.to(torch.float32, copy=True)
    blocks = xf.reshape(*lead, xf.shape[-1] // NVFP4_BLOCK, NVFP4_BLOCK)
    amax = block_amax(blocks)
    bad = ~torch.isfinite(amax)
    s_pre = (amax / _f32(E2M1_MAX, xf)) / g
    s = round_to_grid_(torch.clamp(s_pre, E4M3_TINY, E4M3_MAX), E4M3)  # float32(e4m3(...))
    r = (_f32(1.0, xf) / g) / s
    xr = blocks.mul_(r.unsqueeze(-1)).clamp_(-E2M1_MAX, E2M1_MAX)
    codes = e2m1_codes_(xr)
    scale_bytes = s.to(torch.float8_e4m3fn).view(torch.uint8)
    if bool(bad.any()):
        codes = codes.masked_fill_(bad.unsqueeze(-1), 0)
        scale_bytes = scale_bytes.masked_fill_(bad, E4M3_NVFP4_NAN_SCALE_BYTE)
    return pack_fp4(codes.reshape(x.shape)), scale_bytes.view(torch.float8_e4m3fn)


def dequantize_nvfp4(
    packed: torch.Tensor, scales: torch.Tensor, global_scale: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """NVFP4 -> float32: ``(code_value * float32(s)) * g``; a NaN scale gives a NaN block.

    ``scales`` may carry padded columns: only the first ``K/16`` are read.
    """
    require_dtype("packed", packed, (torch.uint8,))
    require_dtype("scales", scales, (torch.float8_e4m3fn,))
    require_last_dim_multiple("packed", packed, NVFP4_BLOCK // 2, "NVFP4 block size / 2 bytes")
    lead = tuple(packed.shape[:-1])
    nb = packed.shape[-1] * 2 // NVFP4_BLOCK
    require_scale_columns("scales", scales, lead, nb)
    g = _global_scale(global_scale, lead, packed.device)
    values = e2m1_decode(unpack_fp4(packed)).reshape(*lead, nb, NVFP4_BLOCK)
    s = scales[..., :nb].to(torch.float32).unsqueeze(-1)
    return ((values * s) * g.unsqueeze(-1)).reshape(*lead, nb * NVFP4_BLOCK)


def nvfp4_global_scale(amax: float | torch.Tensor) -> torch.Tensor:
    """``float32(amax) / float32(448 * 6)``, one float32 division (docs/contract.md s4); returns float32.

    An ``amax`` of 0 gives ``g = 0``, which :func:`quantize_nvfp4` rejects.
    """
    if isinstance(amax, torch.Tensor):
        require_floating("amax", amax)
        a = amax.to(torch.float32)
    elif isinstance(amax, (int, float)) and not isinstance(amax, bool):
        a = torch.tensor(float(amax), dtype=torch.float32)
    else:
        raise fail("amax", "must be a float or a float tensor", "float", type(amax).__name__)
    return a / _f32(NVFP4_GLOBAL_DIVISOR, a)
