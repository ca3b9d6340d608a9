"""MXFP4 expert weights as the grouped GEMM reads them (docs/contract.md s4 MXFP4, s5).

``Mxfp4Matrix`` holds per-expert packed E2M1 codes and E8M0 scale bytes; ``quantize_mxfp4``
makes one from float weights (mode ``rceil``, the contract's default) and ``dequantize``
gives the float32 values the GEMM multiplies. ``megamoe`` never imports ``oracle`` (the
independent reference); these few lines reuse the staging Torch path's exact helpers, and
the host tests check them byte for byte against ``oracle.formats``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamoe.staging import constants as c
from megamoe.staging.torch_path import ceil_log2_bits, e2m1_codes, pow2_f32

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""Magnitude of E2M1 codes 0..7 (bit 3 is the sign)."""


@dataclass(frozen=True)
class Mxfp4Matrix:
    """Per-expert MXFP4 weights ``[E, N, K]`` (docs/contract.md s4): ``codes`` uint8
    ``[E, N, K / 2]`` (two E2M1 codes per byte, element ``2j`` in the low nibble) and
    ``scales`` uint8 ``[E, N, K / 32]`` (E8M0 bytes, unpadded), both contiguous. Value of
    element ``(e, n, k)``: ``e2m1(code) * 2**(scales[e, n, k // 32] - 127)`` (byte 0xFF:
    NaN). The tensors are referenced, never written."""

    codes: torch.Tensor
    scales: torch.Tensor

    @property
    def shape(self) -> tuple[int, int, int]:
        e, n, half = self.codes.shape
        return int(e), int(n), int(half) * 2

    @property
    def device(self) -> torch.device:
        return self.codes.device

    def dequantize(self) -> torch.Tensor:
        """float32 ``[E, N, K]``: the values the GEMM multiplies (exact float32 products)."""
        return dequantize_mxfp4(self.codes, self.scales)


def dequantize_mxfp4(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """float32 ``[..., K]`` from packed codes ``[..., K/2]`` and E8M0 bytes ``[..., K/32]``."""
    lo = (codes & 0xF).to(torch.int64)
    hi = (codes >> 4).to(torch.int64)
    code = torch.stack((lo, hi), dim=-1).reshape(*codes.shape[:-1], codes.shape[-1] * 2)
    mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=codes.device)
    val = mags[code & 7]
    val = torch.where((code & 8) != 0, -val, val)
    b = scales.to(torch.int32)
    scale = pow2_f32(b - c.E8M0_BIAS)
    scale = torch.where(b == c.E8M0_NAN, torch.full_like(scale, float("nan")), scale)
    blocks = val.reshape(*scales.shape, c.MX_BLOCK) * scale.unsqueeze(-1)
    return blocks.reshape(val.shape)


def quantize_mxfp4(w: torch.Tensor) -> Mxfp4Matrix:
    """Float weights ``[E, N, K]`` -> ``Mxfp4Matrix`` (docs/contract.md s4 MXFP4, mode ``rceil``:
    ``e = ceil(log2(amax / 6))`` from the bits of one float32 division, clamped to
    [-127, 127]; an all-zero block gets byte 0, a NaN/Inf block 0xFF and codes 0; codes
    ``e2m1(sat(x * 2**-e))`` with ties to the even code)."""
    if w.dim() != 3 or w.shape[2] % c.MX_BLOCK:
        raise ValueError(f"w: expected [E, N, K] with K a multiple of {c.MX_BLOCK}, got "
                         f"{tuple(w.shape)}")
    e, n, k = w.shape
    codes = torch.empty(e, n, k // 2, dtype=torch.uint8, device=w.device)
    scales = torch.empty(e, n, k // c.MX_BLOCK, dtype=torch.uint8, device=w.device)
    for x in range(e):  # one expert at a time: float32 temporaries stay small
        codes[x], scales[x] = _quantize_matrix(w[x])
    return Mxfp4Matrix(codes, scales)


def _quantize_matrix(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = w.shape
    xf = w.to(torch.float32).reshape(n, k // c.MX_BLOCK, c.MX_BLOCK)
    bad = ~torch.isfinite(xf).all(dim=-1)
    amax = torch.where(bad, torch.zeros((), dtype=torch.float32, device=w.device),
                       xf.abs().amax(dim=-1))
    d = amax / torch.tensor(c.E2M1_MAX, dtype=torch.float32, device=w.device)
    ex = ceil_log2_bits(d).clamp(c.E8M0_MIN_EXP, c.E8M0_MAX_EXP)
    byte = torch.where(amax == 0, torch.zeros_like(ex), ex + c.E8M0_BIAS)
    byte = torch.where(bad, torch.full_like(ex, c.E8M0_NAN), byte).to(torch.uint8)
    scaled = (xf * pow2_f32(-ex).unsqueeze(-1)).clamp(-c.E2M1_MAX, c.E2M1_MAX)
    scaled = torch.where(bad.unsqueeze(-1), torch.zeros_like(scaled), scaled)
    q = e2m1_codes(scaled).reshape(n, k)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8), byte


def interleave_rows(x: torch.Tensor) -> torch.Tensor:
    """``[E, 2I, ...]`` gate rows then up rows -> row ``2j`` = gate_j, ``2j + 1`` = up_j (the
    ``swiglu`` mode's layout; works on codes and scale bytes alike). New tensor."""
    i = x.shape[1] // 2
    return torch.stack((x[:, :i], x[:, i:]), dim=2).reshape(x.shape).contiguous()
