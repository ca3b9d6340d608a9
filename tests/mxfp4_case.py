"""Shared inputs for the MXFP4-weight grouped GEMM tests (host and GPU; CONTRACTS.md s4, s5)."""

from __future__ import annotations

import torch

from megamoe.experts.api import PRE_LANES
from megamoe.experts.mxfp4 import Mxfp4Matrix, interleave_rows
from oracle.formats import quantize_mxfp4
from tests.host.test_grouped_gemm_host import grouped_rows

__all__ = ["make_mxfp4_case"]


def make_mxfp4_case(mode: str, counts: list[int], k: int, n: int, *, seed: int,
                    out_dtype: torch.dtype = torch.bfloat16, pre: bool = True,
                    scale: bool = True, spread: float = 8.0,
                    device: str | torch.device = "cpu") -> dict:
    """Random grouped inputs with MXFP4 weights quantized by the *oracle* from float weights
    whose rows span ``2**-spread .. 2**spread`` (so scale bytes above and below 127 occur),
    canonical ``w`` (gate rows first) and the kernel operand ``b`` (interleaved for swiglu),
    a per-row ``pre`` scale wire ``[M_cap, 4]`` and score ``scale``."""
    gen = torch.Generator().manual_seed(seed)
    e = len(counts)
    cnt, seg, m_cap, a = grouped_rows(counts, k, gen)
    mag = torch.exp2(torch.linspace(-spread, spread, n)).view(1, n, 1)
    w = torch.randn(e, n, k, generator=gen) * mag / k**0.5
    codes, sbytes = quantize_mxfp4(w)
    canonical = Mxfp4Matrix(codes, sbytes)
    b = (Mxfp4Matrix(interleave_rows(codes), interleave_rows(sbytes)) if mode == "swiglu"
         else Mxfp4Matrix(codes.clone(), sbytes.clone()))
    d = (torch.rand(m_cap, 1, generator=gen) * 2 + 0.25).expand(m_cap, PRE_LANES).contiguous()
    rs = torch.rand(m_cap, generator=gen) + 0.5
    out_cols = n // 2 if mode == "swiglu" else n
    out = torch.empty(m_cap, out_cols, dtype=out_dtype)

    def to(t):
        return t.to(device) if t is not None else None

    return dict(a=to(a), w=Mxfp4Matrix(to(canonical.codes), to(canonical.scales)),
                b=Mxfp4Matrix(to(b.codes), to(b.scales)), seg=to(seg), counts=to(cnt),
                pre=to(d) if pre else None, scale=to(rs) if scale else None, out=to(out))
