"""The ``nvfp4`` recipe's kernels on a Hopper GPU (docs/contract.md s4 NVFP4, s5, s8): the
NVFP4-weight grouped GEMM (``code * scale`` decoded in the mainloop; ``g`` is the caller's
pre-scale), the NVFP4 A1 gather and the A2 quantizer, each against its PyTorch path
(checked against the oracle on the host). Values bit for bit, NaN by position."""

from __future__ import annotations

import pytest
import torch

from megamoe.experts.mxfp4_gemm_kernel import NVFP4_CONFIGS
from megamoe.experts.nvfp4 import Nvfp4Matrix
from megamoe.layer.a2_quant import quantize_a2_nvfp4, quantize_a2_nvfp4_torch
from megamoe.layer.permute import widen_nvfp4_rows
from oracle import formats as of
from tests.single.test_mxfp4_gemm_kernel import identity_gemm
from tests.single.test_mxfp8_kernels import (
    a2_matches_the_torch_path,
    gather_matches_the_torch_path,
    gemm_rows_match_the_torch_path,
)


@pytest.mark.parametrize("cfg", NVFP4_CONFIGS, ids=[c.name for c in NVFP4_CONFIGS])
@pytest.mark.parametrize(("mode", "out_dtype"), [("swiglu", torch.float32),
                                                 ("plain", torch.bfloat16)])
def test_nvfp4_gemm_rows_match_the_torch_path(cuda_device, cfg, mode, out_dtype) -> None:
    gemm_rows_match_the_torch_path(cfg, mode, seed=51, out_dtype=out_dtype, device=cuda_device,
                                   weights="nvfp4")


@pytest.mark.contract("s4.nvfp4")
def test_nvfp4_decode_is_exact_for_every_code_under_every_scale_byte(cuda_device) -> None:
    """a = I: out = code * scale exactly; row n's scale byte is n, every code in both
    nibbles (the NaN scale bytes 0x7F / 0xFF poison their rows' columns)."""
    n, k = 256, 128
    j = torch.arange(k // 2).view(1, -1)
    codes = ((j + 64 * (torch.arange(n).view(-1, 1) % 4)) % 256).to(torch.uint8)
    sbytes = torch.arange(n, dtype=torch.int32).to(torch.uint8).view(n, 1).expand(n, k // 16)
    w = Nvfp4Matrix(codes.unsqueeze(0).contiguous().to(cuda_device),
                    sbytes.contiguous().view(torch.float8_e4m3fn).unsqueeze(0).to(cuda_device),
                    torch.ones(1, device=cuda_device))
    got = identity_gemm(w, k, n, cuda_device)
    deq = w.dequantize(with_global=False)[0].cpu()
    want = deq.t().contiguous()
    poisoned = ~torch.isfinite(deq).all(dim=1)
    want[:, poisoned] = float("nan")
    assert torch.equal(got.isnan(), want.isnan())
    fin = ~want.isnan()
    assert torch.equal(got[fin], want[fin])
    assert int(poisoned.sum()) == 2  # scale bytes 0x7F and 0xFF


def test_nvfp4_gather_kernel_matches_the_torch_path(cuda_device) -> None:
    g = torch.Generator().manual_seed(5)
    src = torch.randint(0, 256, (40, 256), dtype=torch.uint8, generator=g)
    scales = torch.randint(0, 127, (40, 32), dtype=torch.uint8, generator=g)
    scales[1, 3] = 0x7F
    gather_matches_the_torch_path(
        widen_nvfp4_rows, src, scales, 35, 512, g, cuda_device,
        oracle=lambda p, s: of.dequantize_nvfp4(p, s.view(torch.float8_e4m3fn), 1.0).to(
            torch.bfloat16))


def test_nvfp4_a2_kernel_matches_the_torch_path(cuda_device) -> None:
    g = torch.Generator().manual_seed(6)
    m_cap = 640  # the segments of [3, 0, 129, 1] end at 512
    act = torch.randn(m_cap, 320, generator=g) * torch.logspace(-6, 6, m_cap).view(-1, 1)
    act[0, :16] = 0.0
    act[1, 40] = float("inf")
    a2_matches_the_torch_path(
        quantize_a2_nvfp4, quantize_a2_nvfp4_torch, act, slice(32, 48), cuda_device, 0.05,
        oracle=lambda rows: of.dequantize_nvfp4(
            *of.quantize_nvfp4(rows, global_scale=0.05), 1.0).to(torch.bfloat16))
