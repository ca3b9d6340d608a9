"""The ``mxfp8`` recipe's kernels on a Hopper GPU (docs/contract.md s4 MXFP8, s5, s8): the
MXFP8-weight grouped GEMM (decode in the mainloop), the MXFP8 A1 gather and the A2
quantizer, each against its PyTorch path (checked against the oracle on the host).
Values are compared bit for bit, NaN by position (a NaN's payload bits may differ)."""

from __future__ import annotations

import pytest
import torch

from megamoe.experts.api import padded_segment_starts
from megamoe.experts.mxfp4_gemm_kernel import MXFP8_CONFIGS
from megamoe.experts.mxfp8 import Mxfp8Matrix
from megamoe.layer import permute
from megamoe.layer.a2_quant import quantize_a2_mxfp8, quantize_a2_mxfp8_torch, segment_rows
from megamoe.layer.permute import widen_mx_rows
from oracle import formats as of
from tests.host.test_grouped_gemm_host import poison_
from tests.mxfp4_case import make_mxfp4_case
from tests.single.test_mxfp4_gemm_kernel import SHAPES, _check, _run, identity_gemm


def _same_values(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal bits where ``want`` is a number, NaN where it is NaN."""
    nan = want.isnan()
    return (torch.equal(got.isnan(), nan)
            and torch.equal(got[~nan].contiguous().view(torch.int16),
                            want[~nan].contiguous().view(torch.int16)))


@pytest.mark.parametrize("cfg", MXFP8_CONFIGS, ids=[c.name for c in MXFP8_CONFIGS])
@pytest.mark.parametrize(("mode", "out_dtype"), [("swiglu", torch.float32),
                                                 ("plain", torch.bfloat16)])
def test_mxfp8_gemm_rows_match_the_torch_path(cuda_device, cfg, mode, out_dtype) -> None:
    gemm_rows_match_the_torch_path(cfg, mode, seed=41, pre=False, out_dtype=out_dtype,
                                   device=cuda_device, weights="mxfp8")


def gemm_rows_match_the_torch_path(cfg, mode: str, **case: object) -> None:  # type: ignore[no-untyped-def]
    """The grouped GEMM variant ``cfg`` in ``mode`` (``SHAPES[mode]``; clamp 0.75 for swiglu)
    over expert counts ``[0, 1, 130, 77]`` (``make_mxfp4_case(..., **case)``): every live row
    within the bound of the PyTorch path, every other row still poisoned (``_check``)."""
    k, n = SHAPES[mode]
    made = make_mxfp4_case(mode, [0, 1, 130, 77], k, n, **case)
    poison_(made["out"])
    clamp = 0.75 if mode == "swiglu" else None
    _run(made, mode, clamp, cfg)
    _check(made, mode, clamp)


NAN_ROWS = (10, 11, 200, 201)
"""Rows of the exhaustive decode test that keep their E4M3 NaN bytes: scale bytes 10 and 11
(the folded scale) and 200 and 201 (past ``packed_decode.E4M3_FOLD_MAX_BYTE``: the flagged
two-product path), so a NaN byte meets both paths of ``e4m3_word_scaled``'s rare branch."""


@pytest.mark.contract("s4.e8m0")
@pytest.mark.parametrize("cfg", MXFP8_CONFIGS, ids=[c.name for c in MXFP8_CONFIGS])
def test_mxfp8_decode_is_exact_for_every_byte_under_every_scale_byte(cuda_device, cfg) -> None:
    """a = I: out = W's dequantized values; row n has scale byte n, every payload byte (odd
    rows shifted by one, so each byte sits in both halves of a bf16x2 pair). The NaN bytes
    0x7F / 0xFF stay in rows 10 and 200 (odd columns) and 11 and 201 (even columns) only:
    they poison those output columns, and the rest of the check needs finite weights
    (``NAN_ROWS``). Every variant: the scale bytes above
    ``packed_decode.E4M3_FOLD_MAX_BYTE`` take the two-product path, the others the folded
    scale, through each variant's scale path (shared memory, registers, the GEMV's; K =
    1024 puts the scale bytes of ``scale_regs`` variants in registers)."""
    n, k = 256, 1024
    rows = torch.arange(n, dtype=torch.int32).view(n, 1)
    payload = ((torch.arange(k, dtype=torch.int32).view(1, k) + rows % 2) % 256).to(torch.uint8)
    nan_byte = (payload == 0x7F) | (payload == 0xFF)
    nan_byte[list(NAN_ROWS)] = False
    payload[nan_byte] = 0
    sbytes = torch.arange(n, dtype=torch.int32).to(torch.uint8).view(n, 1).expand(n, k // 32)
    w = Mxfp8Matrix(payload.view(torch.float8_e4m3fn).unsqueeze(0).to(cuda_device),
                    sbytes.contiguous().unsqueeze(0).to(cuda_device))
    got = identity_gemm(w, k, n, cuda_device, config=cfg)
    deq = w.dequantize()[0].cpu()  # float32 [N, K]
    # the kernel multiplies bf16 values: the dequantized value rounded to bf16
    want = deq.to(torch.bfloat16).to(torch.float32).t().contiguous()
    poisoned = ~torch.isfinite(deq).all(dim=1)
    want[:, poisoned] = float("nan")
    assert torch.equal(got.isnan(), want.isnan())
    fin = ~want.isnan()
    assert torch.equal(got[fin], want[fin])
    assert all(bool(poisoned[r]) for r in NAN_ROWS)  # the E4M3 NaN weights decode to NaN
    assert int(poisoned.sum()) < n // 16  # only those, the overflowing scale bytes and 0xFF


def gather_matches_the_torch_path(widen, src, scales, live: int, cols: int, gen, device,
                                  *extra, oracle=None) -> None:
    """``widen(src, scales, dst, si, di, n, *extra)`` (a dequantizing A1 gather) on the GPU
    equals its PyTorch path bit for bit (NaN by position): ``live`` of the 40 source rows
    moved to a random 40 of 64 destination rows; the other rows keep their fill. ``oracle(src
    rows, scale rows) -> bf16 values`` (the format's dequantizer in ``oracle.formats``): the
    moved rows equal it too (issue 40 item 6)."""
    src, scales = src.to(device), scales.to(device)
    si = torch.randperm(40, generator=gen).to(device)
    di = torch.randperm(64, generator=gen)[:40].to(device)
    n = torch.tensor([live], dtype=torch.int32, device=device)
    got = torch.full((64, cols), 3.0, dtype=torch.bfloat16, device=device)
    assert widen(src, scales, got, si, di, n, *extra) == permute.PATH_KERNEL
    want = torch.full((64, cols), 3.0, dtype=torch.bfloat16)
    widen(src.cpu(), scales.cpu(), want, si.cpu(), di.cpu(), n.cpu(), *extra)
    assert _same_values(got.cpu(), want)
    if oracle is not None:
        moved, at = si[:live].cpu(), di[:live].cpu()
        assert _same_values(got.cpu()[at], oracle(src.cpu()[moved], scales.cpu()[moved]))


def a2_matches_the_torch_path(quantize, quantize_torch, act, nan_cols: slice, device,
                              *extra, oracle=None) -> None:
    """``quantize(act, a2, rows, n, *extra)`` (an A2 quantizer) on the GPU equals its
    PyTorch path bit for bit over the live rows of counts ``[3, 0, 129, 1]``, and the oracle
    itself (``oracle(live act rows) -> bf16 values``: the format functions of
    ``oracle.formats``, quantize then dequantize; issue 40 item 6); row 1's block
    ``nan_cols`` (holding a NaN/Inf) is NaN; rows outside the segments keep their fill. NaN is
    compared by position: these quantizers write dequantized bf16 values (the block scale
    folded in), whose NaN bits no format defines."""
    counts = torch.tensor([3, 0, 129, 1], dtype=torch.int32)
    seg = padded_segment_starts(counts)
    assert act.shape[0] == int(seg[-1]) + 128
    act = act.to(device)
    rows, n = segment_rows(seg.to(device), counts.to(device), act.shape[0])
    got = torch.full(act.shape, 9.0, dtype=torch.bfloat16, device=device)
    want = got.clone()
    assert quantize(act, got, rows, n, *extra) == "kernel"
    quantize_torch(act, want, rows, n, *extra)
    assert _same_values(got.cpu(), want.cpu())
    if oracle is not None:
        live = rows[: int(n)].cpu()
        assert _same_values(got.cpu()[live], oracle(act.cpu()[live]))
    assert bool(got[1, nan_cols].isnan().all()) and bool((got[3:128] == 9.0).all())


@pytest.mark.parametrize("elem", ["e4m3", "e5m2"])
@pytest.mark.mega_sm107("fused-mxfp8-staging")
def test_mxfp8_gather_kernel_matches_the_torch_path(cuda_device, elem) -> None:
    g = torch.Generator().manual_seed(3)
    src = torch.randint(0, 256, (40, 512), dtype=torch.uint8, generator=g)
    src[0, :256] = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(100, 150, (40, 16), dtype=torch.uint8, generator=g)
    scales[1, 3] = 255
    scales[2, 0] = 0
    fp8 = torch.float8_e4m3fn if elem == "e4m3" else torch.float8_e5m2
    gather_matches_the_torch_path(
        widen_mx_rows, src, scales, 33, 512, g, cuda_device, elem,
        oracle=lambda p, s: of.dequantize_mxfp8(p.view(fp8), s).to(torch.bfloat16))


@pytest.mark.contract("s4.mx-special-blocks", "s4.mxfp8-floor", "s4.mxfp8-rceil")
@pytest.mark.parametrize(("elem", "mode"), [("e4m3", "rceil"), ("e5m2", "floor")])
@pytest.mark.mega_sm107("fused-mxfp8-staging")
def test_mxfp8_a2_kernel_matches_the_torch_path(cuda_device, elem, mode) -> None:
    g = torch.Generator().manual_seed(4)
    m_cap = 640  # the segments of [3, 0, 129, 1] end at 512
    act = torch.randn(m_cap, 320, generator=g) * torch.logspace(-40, 30, m_cap).view(-1, 1)
    act[0, :32] = 0.0
    act[1, 40] = float("nan")
    act[130] *= 1e-20
    a2_matches_the_torch_path(
        quantize_a2_mxfp8, quantize_a2_mxfp8_torch, act, slice(32, 64), cuda_device, elem, mode,
        oracle=lambda rows: of.dequantize_mxfp8(
            *of.quantize_mxfp8(rows, elem=elem, mode=mode)).to(torch.bfloat16))
