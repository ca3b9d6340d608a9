"""Shared inputs for the MXFP4-weight grouped GEMM tests (host and GPU; docs/contract.md s4, s5)."""

from __future__ import annotations

import torch

from megamoe.experts.api import PRE_LANES
from megamoe.experts.mxfp4 import Mxfp4Matrix, interleave_rows
from megamoe.experts.mxfp8 import Mxfp8Matrix
from megamoe.experts.nvfp4 import Nvfp4Matrix, quantize_nvfp4_weights
from oracle.formats import quantize_mxfp4, quantize_mxfp8
from tests.host.test_grouped_gemm_host import grouped_rows

__all__ = ["make_mxfp4_case"]


def make_mxfp4_case(mode: str, counts: list[int], k: int, n: int, *, seed: int,
                    out_dtype: torch.dtype = torch.bfloat16, pre: bool = True,
                    scale: bool = True, spread: float = 8.0,
                    device: str | torch.device = "cpu", weights: str = "mxfp4") -> dict:
    """Random grouped inputs with MXFP4 (or, ``weights="mxfp8"``, MXFP8 E4M3) weights
    quantized by the *oracle* from float weights
    whose rows span ``2**-spread .. 2**spread`` (so scale bytes above and below 127 occur),
    canonical ``w`` (gate rows first) and the kernel operand ``b`` (interleaved for swiglu),
    a per-row ``pre`` scale wire ``[M_cap, 4]`` and score ``scale``."""
    gen = torch.Generator().manual_seed(seed)
    e = len(counts)
    cnt, seg, m_cap, a = grouped_rows(counts, k, gen)
    mag = torch.exp2(torch.linspace(-spread, spread, n)).view(1, n, 1)
    w = torch.randn(e, n, k, generator=gen) * mag / k**0.5
    extra: tuple = ()
    if weights == "nvfp4":  # the layer's quantizer (checked against the oracle on the host)
        q = quantize_nvfp4_weights(w)
        codes, sbytes, extra = q.codes, q.scales, (q.global_scale,)
        kind = Nvfp4Matrix
    elif weights == "mxfp8":
        codes, sbytes = quantize_mxfp8(w, elem="e4m3")
        kind = Mxfp8Matrix
    else:
        codes, sbytes = quantize_mxfp4(w)
        kind = Mxfp4Matrix
    canonical = kind(codes, sbytes, *extra)
    b = (kind(interleave_rows(codes), interleave_rows(sbytes), *extra) if mode == "swiglu"
         else kind(codes.clone(), sbytes.clone(), *extra))
    d = (torch.rand(m_cap, 1, generator=gen) * 2 + 0.25).expand(m_cap, PRE_LANES).contiguous()
    rs = torch.rand(m_cap, generator=gen) + 0.5
    out_cols = n // 2 if mode == "swiglu" else n
    out = torch.empty(m_cap, out_cols, dtype=out_dtype)

    def to(t):
        return t.to(device) if t is not None else None

    def moved(m):
        fields = ("codes", "payload", "scales", "global_scale")
        return kind(*(to(getattr(m, f)) for f in fields if hasattr(m, f)))

    return dict(a=to(a), w=moved(canonical), b=moved(b), seg=to(seg), counts=to(cnt),
                pre=to(d) if pre else None, scale=to(rs) if scale else None, out=to(out))
