"""The ``layer`` benchmark's declarations and its stock-PyTorch baseline on the CPU: the
baseline computes the same layer as the oracle (so the comparison is like for like), and
the work each case declares (weight bytes touched, or FLOPs) is what the routes imply."""

from __future__ import annotations

import math

import pytest
import torch

from megamoe.bench.benchmarks import layer as lb
from megamoe.bench.registry import BuildContext, Case, get_benchmark
from oracle.compare import compare_rows
from oracle.experts import moe_forward
from oracle.moe_config import MoEConfig
from oracle.weights import ExpertWeights

TINY = lb.Shape("tiny", 128, 64, 8, 2)
CTX = BuildContext(torch.device("cpu"), 0, 1, seed=17)


@pytest.fixture
def tiny(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setitem(lb.SHAPES, "tiny", TINY)
    lb._WEIGHTS.clear()
    yield TINY
    lb._WEIGHTS.clear()


def _case(routes: str, t: int) -> Case:
    return Case(f"tiny-{routes}-T{t}", {"tokens": t}, scenario=routes, seed=17)


def test_layer_benchmark_declares_the_issue_grid() -> None:
    bench = get_benchmark("layer")
    assert [b.name for b in bench.baselines] == ["torch-grouped-mm"]
    got = {(c.shape["hidden"], c.shape["inter"], c.shape["experts"], c.shape["top_k"],
            c.scenario, c.shape["tokens"]) for c in bench.cases}
    shapes = ((7168, 2048, 256, 8), (2880, 2880, 128, 4))  # DeepSeek-like, gpt-oss-like
    assert got == {(*s, r, t) for s in shapes for r in ("uniform", "skewed")
                   for t in (1, 4, 16, 64, 256, 1024, 4096)}


@pytest.mark.parametrize(("routes", "t"), [("uniform", 12), ("skewed", 9), ("uniform", 1)])
def test_torch_baseline_computes_the_oracles_layer(tiny, routes: str, t: int) -> None:  # type: ignore[no-untyped-def]
    work = lb.build_torch_grouped_mm(_case(routes, t), CTX)
    got = work.fn()
    x, ids, w = lb._inputs(_case(routes, t), CTX)
    w13, w2 = lb._weights(TINY, CTX.device)
    cfg = MoEConfig("bf16", TINY.experts, TINY.top_k, TINY.hidden, TINY.inter)
    want = moe_forward(x, ids, w, ExpertWeights("bf16", w13, w2), cfg)
    report = compare_rows(got, want, ids, "bf16")
    assert report.problems == (), report


def test_declared_work_is_touched_weight_bytes_or_active_flops(tiny) -> None:  # type: ignore[no-untyped-def]
    small = lb.build_torch_grouped_mm(_case("skewed", 4), CTX)
    per_expert = (2 * TINY.inter * TINY.hidden + TINY.hidden * TINY.inter) * 2
    assert small.ceiling == "copy_bw" and small.bytes_moved == per_expert  # one expert
    big = lb.build_torch_grouped_mm(_case("uniform", 100), CTX)
    slots = 100 * TINY.top_k
    assert big.ceiling == "bf16_mm"
    assert big.flops == 2 * slots * 3 * TINY.hidden * TINY.inter
    assert math.isclose(big.flops / slots, 6 * TINY.hidden * TINY.inter)


@pytest.mark.parametrize(("name", "recipe", "bytes_per_32"), [
    ("layer-fp8-mxfp4", "fp8_mxfp4", 17), ("layer-mxfp8", "mxfp8", 33),
    ("layer-nvfp4", "nvfp4", 18),
])
def test_quantized_layer_benchmarks_check_their_layer_and_declare_their_bytes(
        tiny, name: str, recipe: str, bytes_per_32: int) -> None:  # type: ignore[no-untyped-def]
    from megamoe.bench.benchmarks import layer_quantized as qb

    qb._MX.clear()
    bench = get_benchmark(name)
    assert [b.name for b in bench.baselines] == ["torch-grouped-mm", "layer-bf16"]
    assert bench.cases == get_benchmark("layer").cases
    build = qb.make_builder(next(q for q in qb.RECIPES if q.recipe == recipe))
    work = build(_case("skewed", 4), CTX)
    work.check()  # the layer's rows against the oracle (CPU path here)
    per_expert = 3 * TINY.inter * TINY.hidden * bytes_per_32 // 32
    assert work.ceiling == "copy_bw" and work.bytes_moved == per_expert  # one expert
    big = build(_case("uniform", 70), CTX)
    assert big.ceiling == "fp8_mm" and big.flops > 0
    qb._MX.clear()


def test_layer_stages_table_lists_every_stage_of_the_plan_in_order() -> None:
    from megamoe.bench.layer_stages import render

    rows = [{"case": "fp8_mxfp4 deepseek-uniform-T1",
             "median_s": {"stage": 2e-6, "layout": 5e-5, "fc1": 1e-4, "a2": 3e-6,
                          "forward": 2e-4}}]
    table = render(rows).splitlines()
    assert table[0] == ("| case | stage (us) | layout (us) | fc1 (us) | a2 (us) | "
                        "forward (us) |")
    assert table[2] == "| fp8_mxfp4 deepseek-uniform-T1 | 2.0 | 50.0 | 100.0 | 3.0 | 200.0 |"


def test_mx_gemm_table_has_a_column_per_variant() -> None:
    from megamoe.bench.mx_gemm import render

    rows = [{"case": "mxfp4 deepseek T1 fc1", "experts": 8, "rows_per_expert": 1,
             "median_s": {"n64s4": 1.8e-4, "m64n64s6": 1.2e-4}}]
    table = render(rows).splitlines()
    assert table[0] == "| case | experts x rows | n64s4 (us) | m64n64s6 (us) |"
    assert table[2] == "| mxfp4 deepseek T1 fc1 | 8 x 1 | 180.0 | 120.0 |"


def test_mx_gemm_refuses_an_unknown_variant_before_touching_a_gpu() -> None:
    from megamoe.bench.mx_gemm import profile

    with pytest.raises(SystemExit, match="n999s9"):
        profile("mxfp4", "deepseek", 1, ["n64s4", "n999s9"], 1, 1)
    with pytest.raises(SystemExit, match="n64s4'"):  # an MX variant is not a bf16 one
        profile("bf16", "deepseek", 1, ["n64s8", "n64s4"], 1, 1)


def test_mx_gemm_rows_follow_the_layer_benchmarks_routes() -> None:
    from megamoe.bench.mx_gemm import expert_rows, variants

    assert expert_rows(256, 8, 1, "uniform") == (8, 1)
    assert expert_rows(256, 8, 1024, "uniform") == (256, 32)
    assert expert_rows(256, 8, 16, "skewed") == (1, 16)  # every route on one expert
    assert "n256s4persist" in variants("bf16") and "n64s4" in variants("mxfp4")
