"""The layer tests can fail: planted bugs in the layer's stages, on the CPU path, are caught
by the same oracle comparison the GPU tests use (docs/contract.md s5, s6, s8)."""

from __future__ import annotations

import math

import torch

import megamoe.layer.moe_layer as ml
from megamoe.layer import LayerConfig, MoELayer
from megamoe.layer.config import H_MULTIPLE, I_MULTIPLE
from tests.layer_check import compare_rows, oracle_output

E, K, H, INTER, C = 8, 2, 2 * H_MULTIPLE, I_MULTIPLE, 16


def _setup(late: bool = False, recipe: str = "bf16", clamp: float | None = None):
    g = torch.Generator().manual_seed(40)
    w13 = (torch.randn(E, 2 * INTER, H, generator=g) / math.sqrt(H)).bfloat16()
    w2 = (torch.randn(E, H, INTER, generator=g) / math.sqrt(INTER)).bfloat16()
    cfg = LayerConfig(E, K, H, INTER, C, recipe=recipe, clamp=clamp, late_weighting=late)
    x = torch.randn(12, H, generator=g).bfloat16()
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(12)])
    ids[4, 1] = -1
    w = torch.rand(12, K, generator=g) * 0.9 + 0.1
    w[4, 1] = float("nan")
    return cfg, w13, w2, x, ids, w


def _problems(cfg, w13, w2, x, ids, w) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    """Warm up, pour NaN into the layer's term buffer (docs/contract.md s10: what lies behind
    masked slots must never matter), run again and judge every row against the oracle."""
    layer = MoELayer(cfg, w13, w2, "cpu")
    layer.warmup(x, ids, w)
    layer._terms.fill_(float("nan"))
    out = layer.forward(x, ids, w)
    want = oracle_output(cfg, w13, w2, x, ids, w)
    return compare_rows(out, want, ids, cfg.recipe).problems


def test_the_unplanted_layer_passes() -> None:
    assert _problems(*_setup()) == ()
    assert _problems(*_setup(recipe="fp8_mxfp4")) == ()
    assert _problems(*_setup(recipe="fp8_mxfp4", late=True, clamp=0.5)) == ()


def test_planted_gate_up_not_interleaved_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(ml._gemm, "interleave_gate_up", lambda w: w.contiguous())
    assert _problems(*_setup())


def test_planted_score_dropped_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real = ml._gemm.grouped_gemm

    def no_scale(*args, **kw):  # type: ignore[no-untyped-def]
        kw["row_scale"] = None
        return real(*args, **kw)

    monkeypatch.setattr(ml._gemm, "grouped_gemm", no_scale)
    assert _problems(*_setup())
    assert _problems(*_setup(late=True))


def test_planted_last_route_not_gathered_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real = ml._permute.permute_rows

    def short(src, dst, si, di, count):  # type: ignore[no-untyped-def]
        return real(src, dst, si, di, count - 1)

    monkeypatch.setattr(ml._permute, "permute_rows", short)
    assert _problems(*_setup())


def test_planted_combine_of_masked_slots_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real = ml._combine.masked_combine

    def with_masked(terms, ids, out, t, **kw):  # type: ignore[no-untyped-def]
        return real(terms, torch.where(ids == -1, 0, ids), out, t, **kw)

    monkeypatch.setattr(ml._combine, "masked_combine", with_masked)
    assert _problems(*_setup())


# ---------------------------------------------------------------- fp8_mxfp4


def test_planted_a1_scale_dropped_in_fc1_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """FC1 without A1's safe-FP8 ``d``: h1 off by each row's scale."""
    real = ml._gemm.grouped_gemm

    def no_pre_in_fc1(*args, **kw):  # type: ignore[no-untyped-def]
        if kw.get("mode") == "swiglu":
            kw["pre_scale"] = None
        return real(*args, **kw)

    monkeypatch.setattr(ml._gemm, "grouped_gemm", no_pre_in_fc1)
    assert _problems(*_setup(recipe="fp8_mxfp4"))


def test_planted_a1_scale_after_the_clamp_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``d`` applied to the SwiGLU output instead of h1 (after the clamp): wrong whenever
    the clamp bites or SwiGLU is not linear."""
    real = ml._gemm.grouped_gemm

    def pre_late(a, b, seg, counts, out, **kw):  # type: ignore[no-untyped-def]
        pre = kw.get("pre_scale")
        if kw.get("mode") != "swiglu" or pre is None:
            return real(a, b, seg, counts, out, **kw)
        kw["pre_scale"] = None
        path = real(a, b, seg, counts, out, **kw)
        out.mul_(pre[:, :1])
        return path

    monkeypatch.setattr(ml._gemm, "grouped_gemm", pre_late)
    assert _problems(*_setup(recipe="fp8_mxfp4", clamp=0.5))


def test_planted_a2_unrounded_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A2 as bf16(act) with d = 1 instead of its safe-FP8 quantization: FC2 sees different
    values (act is not rounded to E4M3)."""
    def fake_a2(act, a2, d, rows, count):  # type: ignore[no-untyped-def]
        a2.copy_(act.to(torch.bfloat16))
        d.fill_(1.0)
        return "torch"

    monkeypatch.setattr(ml._a2, "quantize_a2_safe_fp8", fake_a2)
    assert _problems(*_setup(recipe="fp8_mxfp4"))


def test_planted_a2_missing_the_last_route_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A2 walks one route fewer than the layout counted: that route's GEMM row of A2 is
    never quantized, so FC2 reads a stale row."""
    real = ml._a2.quantize_a2_safe_fp8

    def short(act, a2, d, rows, count):  # type: ignore[no-untyped-def]
        return real(act, a2, d, rows, count - 1)

    monkeypatch.setattr(ml._a2, "quantize_a2_safe_fp8", short)
    assert _problems(*_setup(recipe="fp8_mxfp4"))


def test_planted_mxfp4_scale_rows_not_interleaved_is_caught(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """W13 codes interleaved but their scale bytes left in the canonical row order."""
    real = ml._weights.interleave_rows
    calls = {"n": 0}

    def codes_only(x):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        return real(x) if calls["n"] % 2 == 1 else x.contiguous()

    monkeypatch.setattr(ml._weights, "interleave_rows", codes_only)
    assert _problems(*_setup(recipe="fp8_mxfp4"))
