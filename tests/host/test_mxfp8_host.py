"""The ``mxfp8`` building blocks on the host (docs/contract.md s4 MXFP8, s5): the weight
quantizer against the oracle byte for byte, the grouped GEMM's PyTorch path with MXFP8
weights against the oracle's steps, the MXFP8 A1 gather and the A2 quantizer against the
oracle's dequantized values, and the CPU layer against the oracle (PyTorch paths; the kernels
are compared with them on the GPU, tests/single). Planted bugs show the checks can fail."""

from __future__ import annotations

import pytest
import torch

from megamoe.experts import api
from megamoe.experts.api import grouped_gemm
from megamoe.experts.mxfp8 import Mxfp8Matrix, quantize_mxfp8_weights
from megamoe.layer import LayerConfig, MoELayer
from megamoe.layer.a2_quant import quantize_a2_mxfp8, segment_rows
from megamoe.layer.permute import widen_mx_rows
from oracle import formats as of
from oracle.ffn import rows_matmul, swiglu
from tests.bitwise import same_bits
from tests.host.test_grouped_gemm_host import POISON, assert_rows_match, live_mask, poison_
from tests.layer_check import compare_rows, layer_routes, layer_weights, oracle_output
from tests.mxfp4_case import make_mxfp4_case

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.contract("s4.mxfp8-floor", "s4.mxfp8-rceil")
@pytest.mark.parametrize("mode", ["rceil", "floor"])
def test_mxfp8_weight_quantizer_matches_the_oracle(mode: str) -> None:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(2, 8, 128, generator=g) * torch.logspace(-40, 36, 8).view(1, 8, 1)
    w[0, 0, :32] = 0.0
    w[1, 3, 7] = float("inf")
    got = quantize_mxfp8_weights(w, mode)
    payload, sbytes = of.quantize_mxfp8(w, elem="e4m3", mode=mode)
    assert same_bits(got.payload, payload) and same_bits(got.scales, sbytes)
    assert same_bits(got.dequantize(), of.dequantize_mxfp8(payload, sbytes))


@pytest.mark.parametrize(("mode", "out_dtype"), [("swiglu", torch.float32),
                                                 ("plain", torch.bfloat16)])
def test_torch_path_with_mxfp8_weights_meets_the_oracle(mode, out_dtype) -> None:
    case = make_mxfp4_case(mode, [3, 0, 130], 128, 128, seed=5, out_dtype=out_dtype,
                           pre=False, weights="mxfp8")
    poison_(case["out"])
    assert grouped_gemm(case["a"], case["b"], case["seg"], case["counts"], case["out"],
                        mode=mode, row_scale=case["scale"]) == api.PATH_TORCH
    seg, cnt = case["seg"].tolist(), case["counts"].tolist()
    for e, c in enumerate(cnt):
        if not c:
            continue
        lo, hi = seg[e], seg[e] + c
        w = of.dequantize_mxfp8(case["w"].payload[e], case["w"].scales[e])
        h = rows_matmul(case["a"][lo:hi].float(), w)
        if mode == "swiglu":
            h = swiglu(h[:, : w.shape[0] // 2], h[:, w.shape[0] // 2 :], None)
        assert_rows_match(case["out"][lo:hi], h * case["scale"][lo:hi].unsqueeze(1))
    dead = case["out"][~live_mask(seg, cnt, case["out"].shape[0])]
    assert bool((dead.contiguous().view(torch.int16) == POISON).all())


@pytest.mark.parametrize(("elem", "mode"), [("e4m3", "rceil"), ("e5m2", "floor")])
def test_mxfp8_gather_and_a2_give_the_oracles_dequantized_values(elem, mode) -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 128, generator=g) * torch.logspace(-30, 30, 6).view(6, 1)
    payload, sbytes = of.quantize_mxfp8(x, elem=elem, mode=mode)
    dst = torch.full((9, 128), 5.0, dtype=torch.bfloat16)
    si, di = torch.tensor([5, 0, 3, 1]), torch.tensor([1, 8, 2, 0])
    widen_mx_rows(payload, of.pad_scale_columns(sbytes), dst, si, di, torch.tensor([3]), elem)
    want = of.dequantize_mxfp8(payload, sbytes)[si[:3]].to(torch.bfloat16)
    assert same_bits(dst[di[:3]], want)
    assert bool((dst[[0, 3, 4, 5, 6, 7]] == 5.0).all())
    counts = torch.tensor([4, 0, 2], dtype=torch.int32)
    seg = api.padded_segment_starts(counts)
    act = torch.randn(int(seg[-1]), 64, generator=g) * 1e-3
    act[129] *= 1e-33  # a tiny row: e clamps at -127
    a2 = torch.full_like(act, 5.0, dtype=torch.bfloat16)
    quantize_a2_mxfp8(act, a2, *segment_rows(seg, counts, act.shape[0]), elem, mode)
    live = live_mask(seg.tolist(), counts.tolist(), act.shape[0])
    p2, s2 = of.quantize_mxfp8(act[live], elem=elem, mode=mode)
    assert same_bits(a2[live], of.dequantize_mxfp8(p2, s2).to(torch.bfloat16))
    assert bool((a2[~live] == 5.0).all())


@pytest.mark.parametrize(("elem", "mode", "late", "prequantized"), [
    ("e4m3", "rceil", False, False), ("e5m2", "floor", True, True),
])
def test_cpu_mxfp8_layer_meets_the_oracle(elem, mode, late, prequantized) -> None:
    e, k, h, i, c = 8, 2, 128, 64, 16
    cfg = LayerConfig(e, k, h, i, c, recipe="mxfp8", late_weighting=late, mxfp8_elem=elem,
                      mxfp8_mode=mode, clamp=0.5)
    w13, w2 = layer_weights(3, e, h, i)
    if prequantized:
        w13 = Mxfp8Matrix(*of.quantize_mxfp8(w13.float(), elem="e4m3", mode=mode))
        w2 = Mxfp8Matrix(*(t for t in of.quantize_mxfp8(w2.float(), elem="e4m3", mode=mode)))
        w2 = Mxfp8Matrix(w2.payload, of.pad_scale_columns(w2.scales))
    x, ids, w = layer_routes(4, c, num_experts=e, top_k=k, hidden=h, mask_p=0.25)
    layer = MoELayer(cfg, w13, w2, "cpu")
    out = layer.warmup(x, ids, w)
    report = compare_rows(out, oracle_output(cfg, w13, w2, x, ids, w), ids, "mxfp8")
    assert report.problems == (), report


@pytest.mark.contract("s8.row-tolerance")
def test_planted_a2_not_quantized_is_caught_for_mxfp8(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import megamoe.layer.moe_layer as ml

    def bf16_a2(act, a2, rows, count, elem, mode):  # type: ignore[no-untyped-def]
        a2.copy_(act.to(torch.bfloat16))
        return "torch"

    e, k, h, i, c = 8, 2, 256, 128, 64
    cfg = LayerConfig(e, k, h, i, c, recipe="mxfp8")
    w13, w2 = layer_weights(5, e, h, i)
    x, ids, w = layer_routes(6, c, num_experts=e, top_k=k, hidden=h, mask_p=0.0)
    want = oracle_output(cfg, w13, w2, x, ids, w)
    out = MoELayer(cfg, w13, w2, "cpu").warmup(x, ids, w)
    assert compare_rows(out, want, ids, "mxfp8").problems == ()
    monkeypatch.setattr(ml._a2, "quantize_a2_mxfp8", bf16_a2)
    out = MoELayer(cfg, w13, w2, "cpu").warmup(x, ids, w)
    assert compare_rows(out, want, ids, "mxfp8").problems
