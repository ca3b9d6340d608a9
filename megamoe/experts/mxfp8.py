"""MXFP8 expert weights as the grouped GEMM reads them (docs/contract.md s4 MXFP8, s5 ``mxfp8``).

``Mxfp8Matrix`` holds per-expert E4M3 payload and E8M0 scale bytes (blocks of 32 along K);
``quantize_mxfp8_weights`` makes one from float weights (E4M3, the contract's weight element,
in the config's scale mode) with the staging Torch path's exact quantizer (``megamoe`` never
imports ``oracle``; the host tests check the bytes against ``oracle.formats``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamoe.staging import constants as c
from megamoe.staging.torch_path import pow2_f32, quantize_mxfp8

WEIGHT_ELEM = "e4m3"


@dataclass(frozen=True)
class Mxfp8Matrix:
    """Per-expert MXFP8 weights ``[E, N, K]``: ``payload`` ``float8_e4m3fn`` (or its uint8
    bytes) ``[E, N, K]`` and ``scales`` uint8 ``[E, N, K / 32]`` (E8M0 bytes, unpadded), both
    contiguous. Value: ``e4m3(payload) * 2**(scales[e, n, k // 32] - 127)`` (byte 0xFF: NaN).
    The tensors are referenced, never written."""

    payload: torch.Tensor
    scales: torch.Tensor

    @property
    def shape(self) -> tuple[int, int, int]:
        e, n, k = self.payload.shape
        return int(e), int(n), int(k)

    @property
    def device(self) -> torch.device:
        return self.payload.device

    def dequantize(self) -> torch.Tensor:
        """float32 ``[E, N, K]``: the values the GEMM multiplies (exact float32 products)."""
        vals = self.payload.view(torch.float8_e4m3fn).to(torch.float32)
        b = self.scales.to(torch.int32)
        scale = pow2_f32(b - c.E8M0_BIAS)
        scale = torch.where(b == c.E8M0_NAN, torch.full_like(scale, float("nan")), scale)
        e, n, k = vals.shape
        blocks = vals.reshape(e, n, k // c.MX_BLOCK, c.MX_BLOCK) * scale.unsqueeze(-1)
        return blocks.reshape(e, n, k)


def quantize_mxfp8_weights(w: torch.Tensor, mode: str = "rceil") -> Mxfp8Matrix:
    """Float weights ``[E, N, K]`` -> ``Mxfp8Matrix`` (E4M3, scale mode ``mode``; docs/contract.md
    s4), one expert at a time."""
    if w.dim() != 3 or w.shape[2] % c.MX_BLOCK:
        raise ValueError(f"w: expected [E, N, K] with K a multiple of {c.MX_BLOCK}, got "
                         f"{tuple(w.shape)}")
    e, n, k = w.shape
    payload = torch.empty(e, n, k, dtype=torch.float8_e4m3fn, device=w.device)
    scales = torch.empty(e, n, k // c.MX_BLOCK, dtype=torch.uint8, device=w.device)
    for x in range(e):
        payload[x], scales[x] = quantize_mxfp8(w[x].to(torch.float32), WEIGHT_ELEM, mode)
    return Mxfp8Matrix(payload, scales)
