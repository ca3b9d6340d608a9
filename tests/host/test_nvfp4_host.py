"""The ``nvfp4`` building blocks on the host (docs/contract.md s4 NVFP4, s5): the weight
quantizer (per-expert ``g``) against the oracle byte for byte, the NVFP4 A1 gather and the A2
quantizer against the oracle's values without ``g``, the GEMM's PyTorch path (which leaves
``g`` to the caller) and the CPU layer against the oracle. Planted bugs show the checks can
fail."""

from __future__ import annotations

import pytest
import torch

from megamoe.experts import api
from megamoe.experts.nvfp4 import Nvfp4Matrix, quantize_nvfp4_weights
from megamoe.layer import LayerConfig, MoELayer
from megamoe.layer.a2_quant import quantize_a2_nvfp4, segment_rows
from megamoe.layer.permute import widen_nvfp4_rows
from oracle import formats as of
from tests.bitwise import same_bits
from tests.host.test_grouped_gemm_host import live_mask
from tests.layer_check import compare_rows, layer_routes, layer_weights, oracle_output
from tests.mxfp4_case import make_mxfp4_case

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.contract("s4.nvfp4")
def test_nvfp4_weight_quantizer_matches_the_oracle_per_expert() -> None:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(3, 8, 128, generator=g) * torch.logspace(-3, 3, 8).view(1, 8, 1)
    m = quantize_nvfp4_weights(w)
    for e in range(3):
        ge = of.nvfp4_global_scale(w[e].abs().amax())
        codes, scales = of.quantize_nvfp4(w[e], global_scale=ge)
        assert same_bits(m.global_scale[e : e + 1], ge.view(1))
        assert same_bits(m.codes[e], codes) and same_bits(m.scales[e], scales)
        assert same_bits(m.dequantize()[e], of.dequantize_nvfp4(codes, scales, ge))


def test_nvfp4_gather_and_a2_give_the_oracles_values_without_g() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 128, generator=g) * torch.logspace(-3, 3, 6).view(6, 1)
    codes, scales = of.quantize_nvfp4(x, global_scale=0.37)
    dst = torch.full((9, 128), 5.0, dtype=torch.bfloat16)
    si, di = torch.tensor([5, 0, 3, 1]), torch.tensor([1, 8, 2, 0])
    widen_nvfp4_rows(codes, of.pad_scale_columns(scales.view(torch.uint8)), dst, si, di,
                     torch.tensor([3]))
    want = of.dequantize_nvfp4(codes, scales, 1.0)[si[:3]].to(torch.bfloat16)
    assert same_bits(dst[di[:3]], want)
    assert bool((dst[[0, 3, 4, 5, 6, 7]] == 5.0).all())
    counts = torch.tensor([4, 0, 2], dtype=torch.int32)
    seg = api.padded_segment_starts(counts)
    act = torch.randn(int(seg[-1]), 64, generator=g)
    a2 = torch.full_like(act, 5.0, dtype=torch.bfloat16)
    quantize_a2_nvfp4(act, a2, *segment_rows(seg, counts, act.shape[0]), 0.05)
    live = live_mask(seg.tolist(), counts.tolist(), act.shape[0])
    c2, s2 = of.quantize_nvfp4(act[live], global_scale=0.05)
    assert same_bits(a2[live], of.dequantize_nvfp4(c2, s2, 1.0).to(torch.bfloat16))
    assert bool((a2[~live] == 5.0).all())


def test_the_gemm_multiplies_code_times_scale_and_leaves_g_to_the_caller() -> None:
    g = torch.Generator().manual_seed(3)
    m = quantize_nvfp4_weights(torch.randn(1, 64, 128, generator=g))
    counts = torch.tensor([5], dtype=torch.int32)
    a = torch.randn(128, 128, generator=g).bfloat16()
    out = torch.zeros(128, 64, dtype=torch.bfloat16)
    api.grouped_gemm(a, m, api.padded_segment_starts(counts), counts, out, mode="plain")
    want = a[:5].float() @ m.dequantize(with_global=False)[0].t()
    assert float((out[:5].float() - want).norm() / want.norm()) < 0.01
    with_g = a[:5].float() @ m.dequantize()[0].t()
    assert float((out[:5].float() - with_g).norm() / with_g.norm()) > 0.1  # g not applied


@pytest.mark.parametrize(("g_in", "g_a2", "late", "prequantized"), [
    (1.0, 1.0, False, False), (0.37, 0.05, True, True),
])
def test_cpu_nvfp4_layer_meets_the_oracle(g_in, g_a2, late, prequantized) -> None:
    e, k, h, i, c = 8, 2, 128, 64, 16
    cfg = LayerConfig(e, k, h, i, c, recipe="nvfp4", late_weighting=late, clamp=0.5,
                      nvfp4_input_scale=g_in, nvfp4_a2_scale=g_a2)
    w13, w2 = layer_weights(3, e, h, i)
    if prequantized:
        w13 = quantize_nvfp4_weights(w13)
        q2 = quantize_nvfp4_weights(w2)
        w2 = Nvfp4Matrix(q2.codes.view(torch.float4_e2m1fn_x2), q2.scales, q2.global_scale)
    x, ids, w = layer_routes(4, c, num_experts=e, top_k=k, hidden=h, mask_p=0.25)
    out = MoELayer(cfg, w13, w2, "cpu").warmup(x, ids, w)
    w2_oracle = (Nvfp4Matrix(w2.codes.view(torch.uint8), w2.scales, w2.global_scale)
                 if prequantized else w2)  # the oracle takes the codes as uint8
    want = oracle_output(cfg, w13, w2_oracle, x, ids, w)
    report = compare_rows(out, want, ids, "nvfp4")
    assert report.problems == (), report


def test_planted_weight_g_dropped_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import megamoe.layer.moe_layer as ml

    e, k, h, i, c = 8, 2, 128, 64, 16
    cfg = LayerConfig(e, k, h, i, c, recipe="nvfp4", nvfp4_input_scale=0.5)
    w13, w2 = layer_weights(5, e, h, i)
    x, ids, w = layer_routes(6, c, num_experts=e, top_k=k, hidden=h, mask_p=0.0)
    want = oracle_output(cfg, w13, w2, x, ids, w)
    assert compare_rows(MoELayer(cfg, w13, w2, "cpu").warmup(x, ids, w), want, ids,
                        "nvfp4").problems == ()
    real = ml._gemm.grouped_gemm

    def no_pre(*args, **kw):  # type: ignore[no-untyped-def]
        kw["pre_scale"] = None
        return real(*args, **kw)

    monkeypatch.setattr(ml._gemm, "grouped_gemm", no_pre)
    out = MoELayer(cfg, w13, w2, "cpu").warmup(x, ids, w)
    assert compare_rows(out, want, ids, "nvfp4").problems


@pytest.mark.contract("s2.metadata-checks")
@pytest.mark.parametrize(("what", "edit"), [
    ("b.codes.dtype", lambda b: Nvfp4Matrix(b.codes.view(torch.int8), b.scales, b.global_scale)),
    ("b.codes.shape", lambda b: Nvfp4Matrix(b.codes[:, :, :-8].contiguous(), b.scales,
                                            b.global_scale)),
    ("b.scales.shape", lambda b: Nvfp4Matrix(b.codes, b.scales[:, :, :-1].contiguous(),
                                             b.global_scale)),
    ("b.scales.dtype", lambda b: Nvfp4Matrix(b.codes, b.scales.view(torch.int8),
                                             b.global_scale)),
    ("b.scales", lambda b: Nvfp4Matrix(b.codes, None, b.global_scale)),
])
def test_bad_nvfp4_weight_metadata_is_refused_by_name(what, edit) -> None:
    """The NVFP4 weights go through the same metadata checks as the MX ones (``_check_b``):
    each bad field is a ``ConfigError`` naming it, before any work."""
    case = make_mxfp4_case("plain", [4], 128, 64, seed=8, weights="nvfp4")
    before = case["out"].clone()
    with pytest.raises(api.ConfigError, match=what.replace(".", r"\.")):
        api.grouped_gemm(case["a"], edit(case["b"]), case["seg"], case["counts"], case["out"],
                         mode="plain")
    assert same_bits(case["out"], before)
