"""NVFP4 expert weights as the grouped GEMM reads them (docs/contract.md s4 NVFP4, s5 ``nvfp4``).

``Nvfp4Matrix`` holds per-expert packed E2M1 codes, E4M3 block scales (16 elements each) and
the per-expert float32 global decode scale ``g``. The GEMM decodes ``code * scale`` to bf16
(exact: at most 6 significant bits) and the layer applies ``g`` in float32 in the epilogue
(through the per-row pre-scale), never folded into a bf16 operand (docs/design/
recipe-precision.md). ``quantize_nvfp4_weights`` uses the staging Torch path's exact
quantizer with ``g = amax / (448 * 6)`` per expert (``megamoe`` never imports ``oracle``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamoe.experts.mxfp4 import E2M1_MAGNITUDES
from megamoe.staging import constants as c
from megamoe.staging.torch_path import quantize_nvfp4

NVFP4_WEIGHT_DIVISOR = c.E4M3_MAX * c.E2M1_MAX
"""``g = amax / (448 * 6)`` per expert (docs/contract.md s4)."""


@dataclass(frozen=True)
class Nvfp4Matrix:
    """Per-expert NVFP4 weights ``[E, N, K]``: ``codes`` uint8 ``[E, N, K/2]``, ``scales``
    ``float8_e4m3fn`` (or its uint8 bytes) ``[E, N, K/16]``, ``global_scale`` float32 ``[E]``.
    Value: ``(e2m1(code) * float32(scale)) * g[e]``. Referenced, never written."""

    codes: torch.Tensor
    scales: torch.Tensor
    global_scale: torch.Tensor

    @property
    def shape(self) -> tuple[int, int, int]:
        e, n, half = self.codes.shape
        return int(e), int(n), int(half) * 2

    def dequantize(self, with_global: bool = True) -> torch.Tensor:
        """float32 ``[E, N, K]``; ``with_global=False``: ``code * scale`` (what the GEMM
        multiplies; ``g`` is the epilogue's)."""
        lo = (self.codes & 0xF).to(torch.int64)
        hi = (self.codes >> 4).to(torch.int64)
        e, n, half = self.codes.shape
        code = torch.stack((lo, hi), dim=-1).reshape(e, n, half * 2)
        mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=code.device)
        val = torch.where((code & 8) != 0, -mags[code & 7], mags[code & 7])
        s = self.scales.view(torch.float8_e4m3fn).to(torch.float32)
        out = (val.reshape(e, n, -1, c.NVFP4_BLOCK) * s.unsqueeze(-1)).reshape(e, n, half * 2)
        if with_global:
            out = out * self.global_scale.to(torch.float32).view(e, 1, 1)
        return out


def quantize_nvfp4_weights(w: torch.Tensor) -> Nvfp4Matrix:
    """Float weights ``[E, N, K]`` -> ``Nvfp4Matrix`` with ``g[e] = amax(w[e]) / (448 * 6)``
    (one float32 division), one expert at a time (docs/contract.md s4)."""
    if w.dim() != 3 or w.shape[2] % c.NVFP4_BLOCK:
        raise ValueError(f"w: expected [E, N, K] with K a multiple of {c.NVFP4_BLOCK}, got "
                         f"{tuple(w.shape)}")
    e, n, k = w.shape
    codes = torch.empty(e, n, k // 2, dtype=torch.uint8, device=w.device)
    scales = torch.empty(e, n, k // c.NVFP4_BLOCK, dtype=torch.float8_e4m3fn, device=w.device)
    g = torch.empty(e, dtype=torch.float32, device=w.device)
    div = torch.tensor(NVFP4_WEIGHT_DIVISOR, dtype=torch.float32, device=w.device)
    for x in range(e):
        wf = w[x].to(torch.float32)
        g[x] = wf.abs().amax() / div
        codes[x], scales[x] = quantize_nvfp4(wf, float(g[x]))
    return Nvfp4Matrix(codes, scales, g)
