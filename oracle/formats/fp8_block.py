"""FP8 with float32 block scales (docs/contract.md s12): the DeepSeek-V3 style recipe of
FlashInfer's sm90 FP8 MegaMoE backends, exact.

A block is ``1 x 128`` elements of a row (activations, ``quantize_fp8_rows``) or a ``128 x 128``
tile of a matrix (weights, ``quantize_fp8_tiles``). Per block, in float32:

- ``amax`` = max |x| over the block (exact for bf16 input);
- ``d = max(amax / 448, 1e-30)``: one IEEE float32 division, then the floor (an all-zero block
  gets ``d = 1e-30`` and zero payload, signs kept);
- payload = ``e4m3_sat(x / d)``: one IEEE float32 division per element, then the E4M3 cast
  (round to nearest even, saturating to +-448);
- a block holding NaN or Inf gets ``d = NaN`` and every payload byte ``0x7F`` (E4M3 NaN).

Dequantization: ``float32(payload) * d``, one float32 multiplication per element.

FlashInfer's sm90 variant (recipe ``fp8_block_fi``, docs/contract.md s12) changes two things:
its A2 blocks are ``1 x 64`` with payload ``e4m3_sat(x * float32(1 / d))`` (``reciprocal=True``:
the float32 reciprocal of ``d``, then one float32 multiplication per element), and W13's tiles
are cut after its gate and up rows alternate in groups of 8 (``gate_up_interleave=8``), so one
tile spans 64 gate and 64 up rows; payloads stay in the canonical row order.
"""

from __future__ import annotations

import torch

from ._validate import fail, require_dtype, require_floating, require_last_dim_multiple
from .casts import round_to_grid_
from .constants import E4M3, E4M3_MAX, E4M3_NAN_BYTE, FP8_BLOCK, FP8_BLOCK_MIN_SCALE


def fp8_block_scale(amax: torch.Tensor) -> torch.Tensor:
    """float32 ``d`` of float32 block maxima ``amax`` (module docstring; NaN for a non-finite
    ``amax``)."""
    fmax = torch.tensor(E4M3_MAX, dtype=torch.float32, device=amax.device)
    floor = torch.tensor(FP8_BLOCK_MIN_SCALE, dtype=torch.float32, device=amax.device)
    d = torch.maximum(amax / fmax, floor)
    return torch.where(torch.isfinite(amax), d, torch.full_like(d, float("nan")))


def _quantize_blocks(blocks: torch.Tensor,
                     reciprocal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``blocks [..., n]`` (one block per last-dim row) -> (E4M3 payload ``[..., n]``,
    float32 ``d [...]``); ``reciprocal``: ``x * float32(1 / d)`` instead of ``x / d``."""
    amax = blocks.abs().amax(dim=-1) if blocks.shape[-1] else blocks.new_zeros(blocks.shape[:-1])
    d = fp8_block_scale(amax)
    per_element = d.unsqueeze(-1)
    scaled = blocks * (1.0 / per_element) if reciprocal else blocks / per_element
    grid = round_to_grid_(scaled, E4M3)
    payload = grid.to(torch.float8_e4m3fn).view(torch.uint8)
    bad = ~torch.isfinite(amax)
    if bool(bad.any()):
        payload = payload.masked_fill_(bad.unsqueeze(-1), E4M3_NAN_BYTE)
    return payload.view(torch.float8_e4m3fn), d


def quantize_fp8_rows(x: torch.Tensor, block: int = FP8_BLOCK,
                      reciprocal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations: ``x [..., K]`` (float, ``K % block == 0``) -> (payload float8_e4m3fn
    ``[..., K]``, scales float32 ``[..., K/block]``), blocks of ``block`` along the last dim
    (128 in s12; ``fp8_block_fi``'s A2: 64 with ``reciprocal``, module docstring). Never
    modifies ``x``."""
    require_floating("x", x)
    require_last_dim_multiple("x", x, block, "FP8 block size")
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    blocks = x.to(torch.float32).reshape(*lead, k // block, block)
    payload, d = _quantize_blocks(blocks, reciprocal)
    return payload.reshape(x.shape), d


def dequantize_fp8_rows(payload: torch.Tensor, scales: torch.Tensor,
                        block: int = FP8_BLOCK) -> torch.Tensor:
    """float32 ``[..., K]`` of row-block FP8: ``float32(payload) * d`` per ``block``."""
    require_dtype("payload", payload, (torch.float8_e4m3fn,))
    require_dtype("scales", scales, (torch.float32,))
    require_last_dim_multiple("payload", payload, block, "FP8 block size")
    lead, k = tuple(payload.shape[:-1]), payload.shape[-1]
    if tuple(scales.shape) != (*lead, k // block):
        raise fail("scales", f"one float32 per {block}-block", [*lead, k // block],
                   list(scales.shape))
    blocks = payload.to(torch.float32).reshape(*lead, k // block, block)
    return (blocks * scales.unsqueeze(-1)).reshape(payload.shape)


def interleave_gate_up(w13: torch.Tensor, group: int) -> torch.Tensor:
    """``[..., 2I, K]``, gate rows then up rows -> gate and up rows alternating in groups of
    ``group`` (``I % group == 0``): rows ``g[0:group], u[0:group], g[group:2 group], ...``."""
    *lead, n, k = w13.shape
    if n % (2 * group):
        raise fail("w13", f"2I rows, I a multiple of the gate/up group {group}",
                   f"a multiple of {2 * group}", n)
    halves = w13.reshape(*lead, 2, n // (2 * group), group, k)
    return halves.transpose(-4, -3).reshape(w13.shape)


def deinterleave_gate_up(rows: torch.Tensor, group: int) -> torch.Tensor:
    """The inverse of :func:`interleave_gate_up`."""
    *lead, n, k = rows.shape
    pairs = rows.reshape(*lead, n // (2 * group), 2, group, k)
    return pairs.transpose(-4, -3).reshape(rows.shape)


def _tile_view(x: torch.Tensor) -> torch.Tensor:
    """``[..., N, K]`` -> ``[..., N/128, K/128, 128 * 128]`` (one tile per last-dim row)."""
    *lead, n, k = x.shape
    t = x.reshape(*lead, n // FP8_BLOCK, FP8_BLOCK, k // FP8_BLOCK, FP8_BLOCK)
    return t.transpose(-3, -2).reshape(*lead, n // FP8_BLOCK, k // FP8_BLOCK, FP8_BLOCK**2)


def _untile(tiles: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    *lead, n, k = shape
    t = tiles.reshape(*lead, n // FP8_BLOCK, k // FP8_BLOCK, FP8_BLOCK, FP8_BLOCK)
    return t.transpose(-3, -2).reshape(shape)


def _require_tiles(argument: str, x: torch.Tensor) -> None:
    if x.dim() < 2 or x.shape[-1] % FP8_BLOCK or x.shape[-2] % FP8_BLOCK:
        raise fail(argument, "the last two dims must be multiples of the FP8 tile (128 x 128)",
                   "[..., 128 n, 128 k]", list(x.shape))


def quantize_fp8_tiles(w: torch.Tensor,
                       gate_up_interleave: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights: ``w [..., N, K]`` (float, N and K multiples of 128) -> (payload float8_e4m3fn
    ``[..., N, K]``, scales float32 ``[..., N/128, K/128]``), one scale per 128 x 128 tile; with
    ``gate_up_interleave`` (a W13 of ``fp8_block_fi``), the tiles of
    ``interleave_gate_up(w, gate_up_interleave)``, the payload back in ``w``'s row order.
    Never modifies ``w``."""
    require_floating("w", w)
    _require_tiles("w", w)
    w32 = w.to(torch.float32)
    if gate_up_interleave is not None:
        w32 = interleave_gate_up(w32, gate_up_interleave)
    payload, d = _quantize_blocks(_tile_view(w32))
    payload = _untile(payload.view(torch.uint8), w.shape)
    if gate_up_interleave is not None:
        payload = deinterleave_gate_up(payload, gate_up_interleave)
    return payload.view(torch.float8_e4m3fn), d


def dequantize_fp8_tiles(payload: torch.Tensor, scales: torch.Tensor,
                         gate_up_interleave: int | None = None) -> torch.Tensor:
    """float32 ``[..., N, K]`` of tile FP8: ``float32(payload) * d`` per 128 x 128 tile (of the
    interleaved rows with ``gate_up_interleave``, as :func:`quantize_fp8_tiles` cut them)."""
    require_dtype("payload", payload, (torch.float8_e4m3fn,))
    require_dtype("scales", scales, (torch.float32,))
    _require_tiles("payload", payload)
    *lead, n, k = payload.shape
    if tuple(scales.shape) != (*lead, n // FP8_BLOCK, k // FP8_BLOCK):
        raise fail("scales", "one float32 per 128 x 128 tile",
                   [*lead, n // FP8_BLOCK, k // FP8_BLOCK], list(scales.shape))
    values = payload.to(torch.float32)
    if gate_up_interleave is not None:
        values = interleave_gate_up(values, gate_up_interleave)
    out = _untile(_tile_view(values) * scales.unsqueeze(-1), payload.shape)
    return out if gate_up_interleave is None else deinterleave_gate_up(out, gate_up_interleave)
