"""Safe FP8: the per-token E4M3 activation quantizer of the FP8 x MXFP4 recipe (docs/contract.md s4).

Per row, ``amax`` = max |x| in float32; constants FMAX = 448, TINY = 448e-30,
SAFE_MIN = 448 / FLT_MAX, all float32-rounded:

- ``amax == 0``: ``d = 1e-30``; payload all zero (``cast(x / d)``; a ``-0.0``
  element keeps its sign, as in every E4M3 cast);
- ``0 < amax < TINY`` (tiny path): ``q = min(448 / max(amax, SAFE_MIN), FLT_MAX)``,
  ``d = 1 / q``, payload = ``e4m3_sat(x * q)``;
- otherwise (normal path): ``d = max(amax * float32(1/448), 1e-30)``,
  payload = ``e4m3_sat(x / d)``.

Every operation is one IEEE float32 operation, rounded to nearest. Rows must
be finite (a ``ValueError`` names the first bad row).
"""

from __future__ import annotations

import torch

from ._validate import fail, require_dtype, require_floating
from .casts import round_to_grid_
from .constants import (
    E4M3,
    FLT_MAX,
    SAFE_FP8_FMAX,
    SAFE_FP8_SAFE_MIN,
    SAFE_FP8_TINY,
    SAFE_FP8_WIRE_LANES,
    SAFE_FP8_ZERO_SCALE,
)


def _f32(value: float, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32, device=like.device)


def safe_fp8_scales(amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For float32 row maxima ``amax [T]``: (d, multiplier q, use-multiplier mask), per docs/contract.md s4.

    Rows on the tiny path quantize with ``x * q``; the others with ``x / d``.
    """
    fmax = _f32(SAFE_FP8_FMAX, amax)
    tiny_path = (amax > 0) & (amax < _f32(SAFE_FP8_TINY, amax))
    q = torch.minimum(fmax / torch.maximum(amax, _f32(SAFE_FP8_SAFE_MIN, amax)), _f32(FLT_MAX, amax))
    d_tiny = _f32(1.0, amax) / q
    inv_fmax = _f32(1.0, amax) / fmax  # float32(1/448): one float32 division
    d_normal = torch.maximum(amax * inv_fmax, _f32(SAFE_FP8_ZERO_SCALE, amax))
    d = torch.where(tiny_path, d_tiny, d_normal)  # amax == 0 -> max(0, 1e-30) = 1e-30
    return d, q, tiny_path


def safe_fp8_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [T, H]`` (finite floats) -> (payload float8_e4m3fn ``[T, H]``, d float32 ``[T]``)."""
    require_floating("x", x)
    if x.dim() != 2:
        raise fail("x", "must be 2-D [T, H]", "2 dims", f"shape {tuple(x.shape)}")
    xf = x.to(torch.float32, copy=True)
    if xf.shape[1]:
        amax = torch.maximum(xf.amax(dim=1), xf.amin(dim=1).neg_())  # NaN/Inf propagate
    else:
        amax = xf.new_zeros(xf.shape[0])
    finite_rows = torch.isfinite(amax)
    if not bool(finite_rows.all()):
        row = int((~finite_rows).nonzero()[0, 0])
        raise fail("x", "rows must be finite (docs/contract.md s4 safe FP8)", "finite values", f"row {row}")
    d, q, tiny_path = safe_fp8_scales(amax)
    xf.div_(d.unsqueeze(1))
    if bool(tiny_path.any()):
        rows = tiny_path.nonzero().squeeze(1)
        xf[rows] = x[rows].to(torch.float32) * q[rows].unsqueeze(1)
    payload = round_to_grid_(xf, E4M3).to(torch.float8_e4m3fn)
    return payload, d


def safe_fp8_dequantize(payload: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """``float32(payload) * d[:, None]`` (one float32 multiply) -> float32 ``[T, H]``."""
    require_dtype("payload", payload, (torch.float8_e4m3fn,))
    require_dtype("d", d, (torch.float32,))
    if payload.dim() != 2 or d.shape != payload.shape[:1]:
        raise fail(
            "d",
            "must be [T] for payload [T, H]",
            f"shape ({payload.shape[0] if payload.dim() else '?'},)",
            f"shape {tuple(d.shape)} (payload {tuple(payload.shape)})",
        )
    return payload.to(torch.float32) * d.unsqueeze(1)


def safe_fp8_scale_wire(d: torch.Tensor) -> torch.Tensor:
    """Dequant scales ``d [T]`` float32 -> wire format ``[T, 4]`` float32, four equal lanes."""
    require_dtype("d", d, (torch.float32,))
    if d.dim() != 1:
        raise fail("d", "must be 1-D [T]", "1 dim", f"shape {tuple(d.shape)}")
    return d.unsqueeze(1).expand(d.shape[0], SAFE_FP8_WIRE_LANES).contiguous()
