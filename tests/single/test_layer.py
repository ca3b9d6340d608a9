"""The MegaMoE layer on the H200 (docs/contract.md s1-s10, issue 7), for every recipe the layer
runs (``LAYER_RECIPES``), each with its GEMV where it has one (``C_GEMV``): every stage a
CuTe DSL kernel; every live row within the section 8 bound of the oracle, inactive rows
exactly zero; the invariance contract bitwise; the changing-route scenario set on one
captured graph; route errors eager and under graphs; bad metadata refused before any
launch; the fp8_mxfp4 tiny-value cases."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.scenarios import CHANGING_ROUTE_SEQUENCE, RESTORED_FROM, make_sequence
from megamoe import ConfigError, RouteError
from megamoe.experts.mxfp4 import Mxfp4Matrix
from megamoe.graphs import capture
from megamoe.layer import LAYER_RECIPES, LayerConfig, MoELayer
from oracle.formats import quantize_mxfp4
from oracle.routing import find_route_violations
from tests.layer_check import compare_rows, layer_routes, layer_weights, oracle_output

E, K, H, INTER, C = 8, 2, 256, 128, 300
C_GEMV = {"fp8_mxfp4": 32, "nvfp4": 32, "mxfp8": 32}
"""Per recipe, the largest capacity that takes its GEMMs' GEMV variant
(``mxfp4_gemm_kernel.GEMV_MAX_ROWS``); ``C`` takes the wgmma variants."""
LAYER_CASES = [(r, C) for r in LAYER_RECIPES] + list(C_GEMV.items())
"""(recipe, capacity) of the layers the contract tests run: every recipe, and each recipe with
a GEMV again at its ``C_GEMV`` so both of its GEMM kinds meet every rule."""
CASE_IDS = [r if c == C else f"{r}-gemv" for r, c in LAYER_CASES]
REPLAYS_PER_STATE = 17
KERNEL_PATHS = {"kernel"}
ID_DTYPES = (torch.int32, torch.int64)
SCORE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _weights(seed: int, e: int = E, h: int = H, i: int = INTER):
    return layer_weights(seed, e, h, i)


W13, W2 = _weights(0)
_LAYERS: dict[tuple, MoELayer] = {}


def _layer(dev, clamp=None, late=False, recipe="bf16", capacity=C) -> MoELayer:  # type: ignore[no-untyped-def]
    key = (str(dev), clamp, late, recipe, capacity)
    if key not in _LAYERS:
        cfg = LayerConfig(E, K, H, INTER, capacity, recipe=recipe, clamp=clamp,
                          late_weighting=late)
        layer = MoELayer(cfg, W13, W2, dev)
        gemv = [c.gemv_warps > 0 for c in layer.gemm_configs]
        assert gemv == [capacity == C_GEMV.get(recipe)] * 2, (recipe, capacity,
                                                               layer.gemm_configs)
        _LAYERS[key] = layer
    return _LAYERS[key]


def _routes(seed: int, t: int, mask_p: float, dev, id_dtype=torch.int64,
            score_dtype=torch.float32, e: int = E, k: int = K, h: int = H):
    return layer_routes(seed, t, num_experts=e, top_k=k, hidden=h, mask_p=mask_p, device=dev,
                        id_dtype=id_dtype, score_dtype=score_dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16).cpu()


CASE_EXAMPLES = max(1, settings().max_examples // len(LAYER_CASES))
"""Hypothesis examples per layer case: the profile's budget shared out evenly, so each case
is its own test (one xdist worker each; session 32: as one test drawing the case, it ran
402 s on one worker, the longest path of the ``single`` suite) and gets its share for sure."""


@pytest.mark.contract("s1.route-dtypes-and-layouts", "s5.clamp", "s5.ffn-recipes", "s5.weighting", "s6.inactive-rows-zero", "s8.row-tolerance")
@pytest.mark.parametrize(("recipe", "capacity"), LAYER_CASES, ids=CASE_IDS)
@settings(max_examples=CASE_EXAMPLES)
@given(
    t=st.integers(0, C),
    mask_p=st.sampled_from((0.0, 0.3, 0.9, 1.0)),
    clamp=st.sampled_from((None, 0.25, 4.0)),
    late=st.booleans(),
    id_dtype=st.sampled_from(ID_DTYPES),
    score_dtype=st.sampled_from(SCORE_DTYPES),
    seed=st.integers(0, 2**31),
)
def test_every_live_row_meets_the_oracle(cuda_device, recipe, capacity, t, mask_p, clamp, late,
                                         id_dtype, score_dtype, seed) -> None:
    t = t % (capacity + 1)
    layer = _layer(cuda_device, clamp, late, recipe, capacity)
    x, ids, w = _routes(seed, t, mask_p, cuda_device, id_dtype, score_dtype)
    before = [v.clone() for v in (x, ids, w)]
    out = layer.warmup(x, ids, w)
    assert set(layer.last_paths.values()) == KERNEL_PATHS, layer.last_paths
    report = compare_rows(out, oracle_output(layer.config, W13, W2, x, ids, w), ids, recipe)
    assert report.problems == (), report
    for a, b in zip(before, (x, ids, w), strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.contract("s2.masked-any-score", "s8.invariance")
@pytest.mark.parametrize(("recipe", "capacity"), LAYER_CASES, ids=CASE_IDS)
def test_row_bits_do_not_depend_on_other_rows_masks_or_batch(cuda_device, recipe,
                                                             capacity) -> None:
    """docs/contract.md s8 invariance: row 0's bits stay the same whatever the other rows hold,
    how many there are, and whether masked slots carry NaN/Inf or zero."""
    layer = _layer(cuda_device, recipe=recipe, capacity=capacity)
    x, ids, w = _routes(11, min(64, capacity), 0.3, cuda_device)
    ids[0] = torch.tensor([3, -1], device=cuda_device)
    w[0, 1] = float("nan")
    layer.warmup(x, ids, w)
    ref = _bits(layer.forward(x, ids, w)[0])
    for seed, t in ((12, 1), (13, min(2, capacity)), (14, min(129, capacity)), (15, capacity)):
        x2, ids2, w2 = _routes(seed, t, 0.2, cuda_device)
        x2[0], ids2[0], w2[0] = x[0], ids[0], w[0]
        if t > 1:
            ids2[1:, 0] = 3  # many other rows share row 0's expert: row 0 moves in the tile
            w2[1:, 0] = 0.5  # (slot 0 may have been masked, with a non-finite score)
            ids2[1:, 1] = torch.where(ids2[1:, 1] == 3, -1, ids2[1:, 1])
        assert torch.equal(_bits(layer.forward(x2, ids2, w2)[0]), ref), (seed, t)
    w_zero = w.clone()
    w_zero[0, 1] = 0.0
    assert torch.equal(_bits(layer.forward(x, ids, w_zero)[0]), ref)
    w_inf = w.clone()
    w_inf[0, 1] = float("-inf")
    assert torch.equal(_bits(layer.forward(x, ids, w_inf)[0]), ref)


def _poison(layer: MoELayer, *buffers: torch.Tensor) -> None:
    """NaN into the layer's data buffers and the given caller buffers (docs/contract.md s10)."""
    for t in (layer._a1, layer._a2, layer._h2, layer._terms, layer._out, layer._act,
              layer._pre1, layer._pre2, layer._stage_ws.payload,
              layer._layout_ws.view("order"), *buffers):
        if t.is_floating_point():
            t.fill_(float("nan"))
        else:
            t.fill_(-7)


@pytest.mark.contract("s8.invariance", "s8.untouched-tail", "s9.replay-equals-eager", "s10.single-rank-replay")
@pytest.mark.parametrize(("recipe", "capacity"), LAYER_CASES, ids=CASE_IDS)
def test_changing_route_scenarios_replay_on_one_graph(cuda_device, recipe, capacity) -> None:
    """docs/contract.md s10 (single-rank): one captured forward over capacity-shaped buffers,
    17 replays per state, NaN poured into the workspace and the output between states;
    every live row against the oracle, first and last replay bitwise equal to an eager
    forward, rows past the live count untouched, ``restored`` equal to the first state."""
    layer = _layer(cuda_device, recipe=recipe, capacity=capacity)
    c = capacity
    states = make_sequence(world_size=1, capacity=c, top_k=K, num_experts=E, hidden_size=H,
                           seed=5, device=cuda_device)
    s_x = torch.zeros(c, H, dtype=torch.bfloat16, device=cuda_device)
    s_ids = torch.full((c, K), -1, dtype=torch.int64, device=cuda_device)
    s_w = torch.zeros(c, K, dtype=torch.float32, device=cuda_device)
    s_live = torch.full((1,), c, dtype=torch.int32, device=cuda_device)
    out = torch.zeros(c, H, dtype=torch.bfloat16, device=cuda_device)
    layer.warmup(s_x, s_ids, s_w)
    layer.forward(s_x, s_ids, s_w, live_tokens=s_live, out=out)  # warm the live-count path
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        layer.forward(s_x, s_ids, s_w, live_tokens=s_live, out=out)
    first_bits: dict[str, torch.Tensor] = {}
    assert [s.name for s in states] == list(CHANGING_ROUTE_SEQUENCE)
    for state in states:
        r = state.ranks[0]
        t = r.num_tokens
        s_x.copy_(r.hidden)
        s_ids.copy_(r.topk_ids)
        s_w.copy_(r.topk_weights)
        s_live.fill_(t)
        _poison(layer, out)
        replays = []
        for rep in range(REPLAYS_PER_STATE):
            graph.replay()
            if rep in (0, REPLAYS_PER_STATE - 1):
                torch.cuda.synchronize()
                replays.append(out.clone())
        layer.check_errors()  # no bad route in any state
        first, last = replays
        assert torch.equal(_bits(first), _bits(last)), state.name
        tail = first[t:].view(torch.int16)
        assert bool((tail == _bits(torch.tensor(float("nan"), dtype=torch.bfloat16)).to(
            tail.device)).all()), f"{state.name}: rows >= T were written"
        x_l, ids_l, w_l = r.live()
        eager = layer.forward(x_l, ids_l, w_l)
        assert torch.equal(_bits(eager), _bits(first[:t])), state.name
        want = oracle_output(layer.config, W13, W2, x_l, ids_l, w_l)
        report = compare_rows(first[:t], want, ids_l, recipe)
        assert report.problems == (), (state.name, report)
        first_bits[state.name] = _bits(first[:t])
    assert torch.equal(first_bits["restored"], first_bits[RESTORED_FROM])


def _capture_clean(layer: MoELayer, x, ids, w, out):  # type: ignore[no-untyped-def]
    """Capture one forward into ``out``, replay it on clean inputs, check that no error was
    recorded; returns the graph and the clean output."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with capture(graph):
        layer.forward(x, ids, w, out=out)
    graph.replay()
    torch.cuda.synchronize()
    layer.check_errors()  # clean so far
    return graph, out.clone()


def _replay_makes_only_row_nan(graph, out: torch.Tensor, clean: torch.Tensor,
                               row: int) -> None:  # type: ignore[no-untyped-def]
    graph.replay()
    torch.cuda.synchronize()
    assert bool(out[row].isnan().all()), "the bad row's output must be NaN"
    keep = torch.arange(out.shape[0]) != row
    assert torch.equal(_bits(out[keep]), _bits(clean[keep]))


@pytest.mark.contract("s2.route-error-graph")
@pytest.mark.parametrize("recipe", LAYER_RECIPES)
def test_bad_routes_under_a_graph_give_nan_rows_and_check_errors_raises(cuda_device,
                                                                        recipe) -> None:
    layer = _layer(cuda_device, recipe=recipe)
    x, ids, w = _routes(21, 16, 0.0, cuda_device)
    layer.warmup(x, ids, w)
    out = torch.zeros(16, H, dtype=torch.bfloat16, device=cuda_device)
    graph, clean = _capture_clean(layer, x, ids, w, out)
    ids[5, 1] = E + 3  # out of range
    first = find_route_violations(ids.cpu(), w.cpu(), E)[0]
    _replay_makes_only_row_nan(graph, out, clean, 5)
    with pytest.raises(RouteError) as err:
        layer.check_errors()
    assert (err.value.row, err.value.slot, err.value.rule) == (first.row, first.slot, first.rule)
    layer.check_errors()  # the record was cleared


@pytest.mark.contract("s2.metadata-checks", "s2.route-error-eager")
def test_eager_route_error_and_bad_metadata_write_nothing(cuda_device) -> None:
    layer = _layer(cuda_device)
    x, ids, w = _routes(22, 10, 0.0, cuda_device)
    layer.warmup(x, ids, w)
    out = torch.full((10, H), 3.0, dtype=torch.bfloat16, device=cuda_device)
    ids[2, 0] = ids[2, 1]  # duplicate
    with pytest.raises(RouteError, match="duplicate_id"):
        layer.forward(x, ids, w, out=out)
    assert bool((out == 3.0).all())
    with pytest.raises(ConfigError, match=r"hidden\.device"):
        layer.forward(x.cpu(), ids, w, out=out)
    with pytest.raises(ConfigError, match=r"hidden\.shape"):
        layer.forward(x[:, :128], ids, w, out=out)
    assert bool((out == 3.0).all())


@pytest.mark.contract("s4.safe-fp8-row-rule")
def test_fp8_mxfp4_non_finite_hidden_row_is_a_route_error_eager_and_under_graphs(
        cuda_device) -> None:
    """docs/contract.md s4: safe-FP8 input rows must be finite, checked like routes."""
    layer = _layer(cuda_device, recipe="fp8_mxfp4")
    x, ids, w = _routes(24, 12, 0.0, cuda_device)
    layer.warmup(x, ids, w)
    out = torch.full((12, H), 3.0, dtype=torch.bfloat16, device=cuda_device)
    bad = x.clone()
    bad[4, 17] = float("inf")
    with pytest.raises(RouteError, match="non_finite_input"):
        layer.forward(bad, ids, w, out=out)
    assert bool((out == 3.0).all())
    graph, clean = _capture_clean(layer, x, ids, w, out)
    x[4, 17] = float("nan")
    _replay_makes_only_row_nan(graph, out, clean, 4)
    with pytest.raises(RouteError, match="non_finite_input"):
        layer.check_errors()


@pytest.mark.contract("s8.row-tolerance")
@pytest.mark.parametrize("capacity", [8, 64], ids=["gemv", "wgmma"])
@pytest.mark.parametrize(("amplitude", "w13_scale_raise"), [
    (1e-15, 0), (1e-18, 0), (1e-19, 0), (1e-35, 55),
])
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


@pytest.mark.parametrize(("elem", "mode"), [("e5m2", "floor"), ("e4m3", "floor")])
def test_mxfp8_other_element_and_scale_modes_meet_the_oracle(cuda_device, elem, mode) -> None:
    """The hypothesis test runs ``mxfp8`` with E4M3 / ``rceil``; here the others."""
    cfg = LayerConfig(E, K, H, INTER, C, recipe="mxfp8", mxfp8_elem=elem, mxfp8_mode=mode,
                      clamp=4.0)
    layer = MoELayer(cfg, W13, W2, cuda_device)
    x, ids, w = _routes(31, 150, 0.3, cuda_device)
    out = layer.warmup(x, ids, w)
    assert set(layer.last_paths.values()) == KERNEL_PATHS
    report = compare_rows(out, oracle_output(cfg, W13, W2, x, ids, w), ids, "mxfp8")
    assert report.problems == (), report
    layer.destroy()

