"""The ``fp8_mxfp4`` layer's own kernels on a Hopper GPU (docs/contract.md s4, s5, s9): the
E4M3 -> bf16 widening gather and the A2 safe-FP8 quantizer, each bitwise equal to its
PyTorch path (which the host tests check against ``ml_dtypes`` and the oracle), writing
only the rows it owns, and replaying under a CUDA graph with new counts."""

from __future__ import annotations

import pytest
import torch

from megamoe.experts.api import padded_segment_starts
from megamoe.graphs import capture
from megamoe.layer import a2_quant, permute
from megamoe.layer.a2_quant import quantize_a2_safe_fp8, quantize_a2_torch, segment_rows
from megamoe.layer.permute import widen_rows
from oracle import formats as of
from tests.bitwise import same_bits


def _widen_torch(src, dst, si, di, n) -> None:
    cpu = dst.cpu()
    widen_rows(src.cpu(), cpu, si.cpu(), di.cpu(), n.cpu())
    dst.copy_(cpu)


def test_widen_kernel_equals_the_torch_path_for_every_byte(cuda_device) -> None:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(0, 256, (40, 512), dtype=torch.uint8, generator=g)
    src[0, :256] = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    src = src.to(cuda_device)
    si = torch.randperm(40, generator=g).to(cuda_device)
    di = torch.randperm(64, generator=g)[:40].to(cuda_device)
    n = torch.tensor([29], dtype=torch.int32, device=cuda_device)
    got = torch.full((64, 512), 3.0, dtype=torch.bfloat16, device=cuda_device)
    want = got.clone()
    assert widen_rows(src, got, si, di, n) == permute.PATH_KERNEL
    _widen_torch(src, want, si, di, n)
    assert same_bits(got, want)


def test_widen_kernel_replays_under_a_graph_with_a_new_count(cuda_device) -> None:
    src = torch.randint(0, 256, (16, 64), dtype=torch.uint8, device=cuda_device)
    si = torch.arange(16, device=cuda_device)
    di = torch.arange(16, device=cuda_device).flip(0)
    n = torch.tensor([16], dtype=torch.int32, device=cuda_device)
    out = torch.zeros(16, 64, dtype=torch.bfloat16, device=cuda_device)
    widen_rows(src, out, si, di, n)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        widen_rows(src, out, si, di, n)
    out.fill_(7.0)
    n.fill_(5)
    graph.replay()
    want = torch.full_like(out, 7.0)
    _widen_torch(src, want, si, di, n)
    torch.cuda.synchronize()
    assert same_bits(out, want)


def _a2_case(device, seed: int):
    g = torch.Generator().manual_seed(seed)
    counts = torch.tensor([3, 0, 129, 1, 60], dtype=torch.int32)
    seg = padded_segment_starts(counts)
    m_cap = int(seg[-1]) + 128
    act = torch.randn(m_cap, 320, generator=g) * torch.logspace(-40, 30, m_cap).view(-1, 1)
    act[0] = 0.0
    act[1, 3] = float("nan")  # a non-finite row: d NaN, payload NaN
    act[2, 9] = float("inf")
    act[130] *= 1e-20  # tiny path
    act[131] = -act[131]
    return act.to(device), seg.to(device), counts.to(device)


@pytest.mark.contract("s4.safe-fp8")
def test_a2_kernel_equals_the_torch_path_bitwise(cuda_device) -> None:
    act, seg, counts = _a2_case(cuda_device, 2)
    m_cap = act.shape[0]
    a2k = torch.full((m_cap, 320), 9.0, dtype=torch.bfloat16, device=cuda_device)
    dk = torch.full((m_cap, 4), 9.0, device=cuda_device)
    a2t, dt = a2k.clone(), dk.clone()
    rows, n = segment_rows(seg, counts, m_cap)
    assert quantize_a2_safe_fp8(act, a2k, dk, rows, n) == a2_quant.PATH_KERNEL
    quantize_a2_torch(act, a2t, dt, rows, n)
    assert same_bits(a2k, a2t) and same_bits(dk, dt)
    assert bool(a2k[1].isnan().all()) and bool(dk[1].isnan().all())
    assert bool((a2k[3:128] == 9.0).all())  # padding rows of expert 0 untouched
    # and the oracle itself (issue 40 item 6) on the finite live rows: payload values, d bytes
    live = rows[: int(n)].cpu()
    finite = live[torch.isfinite(act.cpu()[live]).all(dim=1)]
    payload, d = of.safe_fp8_quantize(act.cpu()[finite])
    assert same_bits(a2k.cpu()[finite], payload.to(torch.bfloat16))
    assert same_bits(dk.cpu()[finite], d.view(-1, 1).expand(-1, 4).contiguous())


def test_a2_kernel_replays_under_a_graph_with_new_counts(cuda_device) -> None:
    act, seg, counts = _a2_case(cuda_device, 3)
    m_cap = act.shape[0]
    a2 = torch.zeros(m_cap, 320, dtype=torch.bfloat16, device=cuda_device)
    d = torch.zeros(m_cap, 4, device=cuda_device)
    rows, n = segment_rows(seg, counts, m_cap)
    quantize_a2_safe_fp8(act, a2, d, rows, n)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        quantize_a2_safe_fp8(act, a2, d, rows, n)
    new_counts = torch.tensor([1, 2, 0, 1, 100], dtype=torch.int32)
    counts.copy_(new_counts)
    seg.copy_(padded_segment_starts(new_counts))
    new_rows, new_n = segment_rows(seg, counts, m_cap)
    rows.copy_(new_rows)
    n.copy_(new_n)
    a2.fill_(5.0)
    d.fill_(5.0)
    graph.replay()
    a2t = torch.full_like(a2, 5.0)
    dt = torch.full_like(d, 5.0)
    quantize_a2_torch(act, a2t, dt, rows, n)
    torch.cuda.synchronize()
    assert same_bits(a2, a2t) and same_bits(d, dt)
