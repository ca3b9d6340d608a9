"""Our layer's own kernels on the H200 (docs/contract.md s5, s8): which GEMM variant each
layer case of ``test_layer_contract.py`` takes, the fp8_mxfp4 tiny-value cases with
prequantized MXFP4 weights (issue 7), and the designated sanitizer cases. The layer's
contract tests, which run against any backend, are in ``test_layer_contract.py``."""

from __future__ import annotations

import pytest
import torch

from megamoe import ConfigError
from megamoe.experts.mxfp4 import Mxfp4Matrix
from megamoe.layer import LAYER_RECIPES, LayerConfig, MoELayer
from oracle.formats import quantize_mxfp4
from tests.layer_check import compare_rows, layer_routes, layer_weights, oracle_output
from tests.single.layer_cases import (
    C_GEMV,
    INTER,
    KERNEL_PATHS,
    C,
    E,
    H,
    K,
    StaticBatch,
    case_id,
    layer_cases,
)
from tests.weighting_check import stages_after_forward, weighting_problems
from tests.workspace_guards import fill_workspace_guards, guard_problems

LAYER_CASES = layer_cases(LAYER_RECIPES)


def _weights(seed: int, e: int = E, h: int = H, i: int = INTER):
    return layer_weights(seed, e, h, i)


def _routes(seed: int, t: int, mask_p: float, dev, e: int = E, k: int = K, h: int = H):
    return layer_routes(seed, t, num_experts=e, top_k=k, hidden=h, mask_p=mask_p, device=dev)


@pytest.mark.parametrize(("recipe", "capacity"), LAYER_CASES,
                         ids=[case_id(*c) for c in LAYER_CASES])
def test_each_contract_case_takes_its_gemm_variant(cuda_device, recipe, capacity) -> None:
    """The contract tests' layer cases cover both GEMM kinds of every recipe that has a
    GEMV: the GEMV at ``C_GEMV``, the wgmma variants at ``C`` (chosen from the config,
    docs/contract.md s7)."""
    w13, w2 = _weights(0)
    layer = MoELayer(LayerConfig(E, K, H, INTER, capacity, recipe=recipe), w13, w2, cuda_device)
    gemv = [c.gemv_warps > 0 for c in layer.gemm_configs]
    assert gemv == [capacity == C_GEMV.get(recipe)] * 2, (recipe, capacity, layer.gemm_configs)
    layer.destroy()


@pytest.mark.contract("s8.row-tolerance")
@pytest.mark.parametrize("capacity", [8, 64], ids=["gemv", "wgmma"])
@pytest.mark.parametrize(("amplitude", "w13_scale_raise"), [
    (1e-15, 0), (1e-18, 0), (1e-19, 0), (1e-35, 55),
])
@pytest.mark.mega_sm90_mxfp4("tiny-values")
def test_fp8_mxfp4_tiny_values_stay_finite_non_zero_and_within_the_bound(
        cuda_device, amplitude, w13_scale_raise, capacity) -> None:
    """Issue 7 tiny-value cases: hidden amplitude 1e-15 .. 1e-19, and 1e-35 with the W13
    scale bytes raised by 55; every row finite, non-zero, within 0.025 of the oracle by
    relative L2 alone (``compare_rows`` has no absolute tolerance); on both GEMM kinds (a
    capacity of 8 tokens takes the GEMV, 64 the wgmma variants: ``GEMV_MAX_ROWS``)."""
    h, i = H, INTER
    g = torch.Generator().manual_seed(23)
    p13, s13 = quantize_mxfp4(torch.randn(1, 2 * i, h, generator=g) * 0.5)
    p2, s2 = quantize_mxfp4(torch.randn(1, h, i, generator=g) * 0.5)
    w13 = Mxfp4Matrix(p13, s13 + w13_scale_raise)
    w2 = Mxfp4Matrix(p2, s2)
    cfg = LayerConfig(1, 1, h, i, capacity, recipe="fp8_mxfp4")
    layer = MoELayer(cfg, w13, w2, cuda_device)
    assert (layer.gemm_configs[0].gemv_warps > 0) == (capacity == 8)
    x = (torch.randn(8, h, generator=g) * amplitude).bfloat16().to(cuda_device)
    ids = torch.zeros(8, 1, dtype=torch.int64, device=cuda_device)
    w = torch.ones(8, 1, device=cuda_device)
    out = layer.warmup(x, ids, w)
    assert set(layer.last_paths.values()) == KERNEL_PATHS
    assert bool(torch.isfinite(out).all()) and bool((out != 0).any(dim=1).all())
    report = compare_rows(out, oracle_output(cfg, w13, w2, x, ids, w), ids, "fp8_mxfp4")
    assert report.problems == (), report
    layer.destroy()


SANITIZE_LAYERS = sorted({(r, 8) for r in LAYER_RECIPES}
                         | {(r, min(8, c)) for r, c in C_GEMV.items()}
                         | {(r, 64) for r, c in C_GEMV.items() if c >= 8})
"""(recipe, capacity) of the sanitizer's layer cases: every recipe at 8 tokens, and each
recipe with a GEMV at a capacity that takes it and at one that takes the wgmma variants."""


@pytest.mark.sanitizer
@pytest.mark.parametrize(("recipe", "c"), SANITIZE_LAYERS,
                         ids=[f"{r}-c{c}" for r, c in SANITIZE_LAYERS])
@pytest.mark.mega_sm107("sanitizer")
@pytest.mark.mega_sm90_mxfp4("sanitizer")
def test_sanitizer_case_layer_small(cuda_device, recipe, c) -> None:
    """Designated small case of the whole layer, per recipe and GEMM kind, for the
    compute-sanitizer suite: staging, layout, the gather (widening for fp8_mxfp4), both
    grouped GEMMs (block-scaled weights decoded in the mainloop), the A2 quantizer where the
    recipe has one, scatter and combine."""
    e, k, h, i = 4, 2, 128, 64
    w13, w2 = _weights(3, e, h, i)
    cfg = LayerConfig(e, k, h, i, c, recipe=recipe, nvfp4_input_scale=0.3,
                      nvfp4_a2_scale=0.02)  # the nvfp4 global scales: not 1.0
    layer = MoELayer(cfg, w13, w2, cuda_device)
    x, ids, w = _routes(23, min(6, c), 0.3, cuda_device, e=e, k=k, h=h)
    out = layer.warmup(x, ids, w)
    assert set(layer.last_paths.values()) == KERNEL_PATHS
    gemv = [cfg.gemv_warps > 0 for cfg in layer.gemm_configs]
    assert gemv == [c <= C_GEMV.get(recipe, 0)] * 2, (recipe, c, layer.gemm_configs)
    report = compare_rows(out, oracle_output(layer.config, w13, w2, x, ids, w), ids, recipe)
    assert report.problems == (), report
    layer.destroy()


@pytest.mark.contract("s2.check-routes-switch")
@pytest.mark.parametrize("recipe", LAYER_RECIPES)
def test_a_layer_warmed_up_with_checks_off_computes_bad_routes_eagerly_and_captured(
        cuda_device, monkeypatch, recipe) -> None:
    """Issue 40 item 5: MEGAMOE_CHECK_ROUTES=0 at warmup turns the layer's value checks off,
    eagerly and in a captured graph (read at capture): a NaN score on an active slot raises
    nothing and records nothing; its row comes out NaN and every other row equals, bit for
    bit, a layer with checks on given the clean routes."""
    from megamoe.graphs import capture
    from megamoe.route_check_setting import ENV_VAR

    w13, w2 = _weights(7)
    x, ids, w = _routes(44, 24, 0.2, cuda_device)
    bad = w.clone()
    active = (ids[5] != -1).nonzero()[0, 0]
    bad[5, active] = float("nan")
    monkeypatch.setenv(ENV_VAR, "1")
    checked = MoELayer(LayerConfig(E, K, H, INTER, C_GEMV.get(recipe, C), recipe=recipe),
                       w13, w2, cuda_device)
    want = checked.warmup(x, ids, w)
    monkeypatch.setenv(ENV_VAR, "0")
    layer = MoELayer(checked.config, w13, w2, cuda_device)
    layer.warmup(x, ids, w)
    monkeypatch.setenv(ENV_VAR, "1")  # read at warmup and at capture only
    keep = torch.arange(24, device=cuda_device) != 5
    got = layer.forward(x, ids, bad)  # no RouteError
    assert bool(got[5].isnan().all())
    assert torch.equal(got[keep].view(torch.int16), want[keep].view(torch.int16))
    monkeypatch.setenv(ENV_VAR, "0")
    out = torch.zeros_like(want)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        layer.forward(x, ids, bad, out=out)
    monkeypatch.setenv(ENV_VAR, "1")
    graph.replay()
    torch.cuda.synchronize()
    layer.check_errors()  # nothing recorded
    assert bool(out[5].isnan().all())
    assert torch.equal(out[keep].view(torch.int16), want[keep].view(torch.int16))
    checked.destroy()
    layer.destroy()


@pytest.mark.contract("s5.weighting")
@pytest.mark.parametrize(("recipe", "capacity"), LAYER_CASES,
                         ids=[case_id(*c) for c in LAYER_CASES])
def test_the_kernels_apply_the_score_where_the_flag_says(cuda_device, recipe, capacity) -> None:
    """Issue 40 item 3 at kernel level, for every recipe and both GEMM kinds: the FC1 kernel's
    ``act`` (or bf16 A2) of an early layer is the late layer's times the score
    (``tests.weighting_check``), on live rows that carry exactly the caller's active scores;
    the output alone cannot show it for ``fp8_mxfp4``. A layer ignoring the flag (late stages
    reported as early, or early as late) is caught by the same check."""
    w13, w2 = _weights(3)
    x, ids, w = _routes(71, capacity, 0.25, cuda_device)
    stages = {}
    for late in (False, True):
        cfg = LayerConfig(E, K, H, INTER, capacity, recipe=recipe, late_weighting=late)
        layer = MoELayer(cfg, w13, w2, cuda_device)
        stages[late] = stages_after_forward(layer, x, ids, w)
        assert set(layer.last_paths.values()) == KERNEL_PATHS
        layer.destroy()
    active = w[ids >= 0].float().sort().values.cpu()
    for s in stages.values():
        assert s.live == active.numel() > 0
        assert torch.equal(s.score.sort().values, active)
    early, late = stages[False], stages[True]
    assert weighting_problems(recipe, early, late) == []
    assert weighting_problems(recipe, late, late), "a layer ignoring the flag passed"
    assert weighting_problems(recipe, early, early), "a layer always weighting early passed"


SANITIZER_REPLAY_STATES = ("dense-C", "sparse-holes", "all-masked", "last-capacity-row-only",
                           "restored")
"""The section 10 states the sanitizer's replay case walks (a capacity of 16 rows)."""


@pytest.mark.sanitizer
@pytest.mark.parametrize("recipe", ["bf16", "fp8_mxfp4"])
@pytest.mark.mega_sm107("sanitizer")
def test_sanitizer_case_changing_routes_on_one_graph(cuda_device, recipe) -> None:
    """Issue 40 item 8: the compute-sanitizer tools over graph replays of changing routes, not
    only eager cases: one captured forward at a capacity of 16, five section 10 states with
    NaN poured into every workspace between them, three replays each, every live row equal to
    an eager forward's bits."""
    from fixtures.scenarios import make_sequence
    from megamoe.backends.megamoe_layer import LayerHandle
    from megamoe.graphs import capture
    from tests.layer_check import poison_workspaces

    c, e, k, h, i = 16, 4, 2, 128, 64
    w13, w2 = _weights(9, e, h, i)
    layer = MoELayer(LayerConfig(e, k, h, i, c, recipe=recipe), w13, w2, cuda_device)
    states = {s.name: s for s in make_sequence(world_size=1, capacity=c, top_k=k,
                                               num_experts=e, hidden_size=h, seed=13,
                                               device=cuda_device)}
    batch = StaticBatch.empty(c, h, k, cuda_device)
    s_x, s_ids, s_w, live, out = batch.x, batch.ids, batch.w, batch.live, batch.out
    layer.warmup(s_x, s_ids, s_w)
    layer.forward(s_x, s_ids, s_w, live_tokens=live, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        layer.forward(s_x, s_ids, s_w, live_tokens=live, out=out)
    for name in SANITIZER_REPLAY_STATES:
        r = states[name].ranks[0]
        batch.load(r)
        poison_workspaces(LayerHandle(layer), out)
        outs = []
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            outs.append(out[: r.num_tokens].clone())
        layer.check_errors()
        x, ids, w = r.live()
        eager = layer.forward(x, ids, w)
        for o in outs:
            assert torch.equal(o.view(torch.int16), eager.view(torch.int16)), name
    layer.destroy()


@pytest.mark.contract("s9.warmup-before-capture")
def test_warmup_or_a_first_forward_inside_a_capture_of_the_layer_is_a_clear_error(
        cuda_device) -> None:
    """Issue 40 item 9: compiling or allocating while a stream captures is refused with a
    message that names what to do, for the layer as for its stages."""
    from megamoe.graphs import capture
    from megamoe.staging import CompileDuringCaptureError

    w13, w2 = _weights(8)
    cfg = LayerConfig(E, K, H, INTER, 32)
    x, ids, w = _routes(45, 20, 0.3, cuda_device)
    cold = MoELayer(cfg, w13, w2, cuda_device)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ConfigError, match=r"warmup\(\.\.\.\) called before forward"), \
            capture(graph):
        cold.forward(x, ids, w)
    del graph
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(CompileDuringCaptureError, match="during CUDA-graph capture"), \
            capture(graph):
        cold.warmup(x, ids, w)
    del graph
    cold.destroy()


@pytest.mark.parametrize("recipe", LAYER_RECIPES)
def test_the_layers_workspaces_keep_their_guard_bytes(cuda_device, recipe) -> None:
    """Issue 40 item 9: the guard bytes around the regions of the layer's staging and layout
    workspaces survive warmup, eager forwards and graph replays (``tests.workspace_guards``)."""
    from megamoe.graphs import capture

    w13, w2 = _weights(8)
    x, ids, w = _routes(45, 20, 0.3, cuda_device)
    layer = MoELayer(LayerConfig(E, K, H, INTER, 32, recipe=recipe), w13, w2, cuda_device)
    guards = fill_workspace_guards(layer)
    layer.warmup(x, ids, w)
    layer.forward(x, ids, w)
    out = torch.zeros(20, H, dtype=torch.bfloat16, device=cuda_device)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        layer.forward(x, ids, w, out=out)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert guard_problems(guards) == []
    layer.destroy()
