"""The layer's contract on one GPU (docs/contract.md s1-s10), against the chosen MegaMoE backend
(``--moe-backend``, ``megamoe.backends``; default: our layer), for every recipe the backend
implements, each also at a small capacity (``C_GEMV``: our layer takes its GEMV variants
there): every stage a device kernel; every live row within the section 8 bound of the
oracle, inactive rows exactly zero; the invariance contract bitwise; the changing-route
scenario set on one captured graph; route errors eager and under graphs; bad metadata
refused before any launch. Every layer is built through the backend interface
(``tests.layer_check.build_layer``), and a test that needs a recipe or a feature the backend
lacks fails naming it, never skips. What only our kernels have is in ``test_layer.py``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.scenarios import CHANGING_ROUTE_SEQUENCE, RESTORED_FROM, make_sequence
from megamoe import ConfigError, RouteError
from megamoe.backends import (
    WEIGHTINGS,
    LayerSpec,
    MoEBackend,
    MoEHandle,
    weighting_refusal,
)
from megamoe.backends.registry import selected_name
from megamoe.graphs import capture
from oracle.moe_config import MoEConfig
from oracle.recipes import CONTRACT_RECIPES
from oracle.routing import SCORE_DTYPES, find_route_violations
from tests.harness.backend_plugin import OPTION
from tests.layer_check import (
    build_layer,
    compare_rows,
    layer_routes,
    layer_weights,
    oracle_output,
    oracle_output_gate_clamped_both_ways,
    poison_workspaces,
    require_features,
)
from tests.single.layer_cases import (
    INTER,
    KERNEL_PATHS,
    REPLAYS_PER_STATE,
    C,
    E,
    H,
    K,
    StaticBatch,
    case_id,
    layer_cases,
)

ID_DTYPES = (torch.int32, torch.int64)


REPLAY_VARIANTS = {"default": (None, None), "late-clamp": ("late", 4.0)}
"""Weighting and clamp of the changing-route replay: every layer case with the backend's
first weighting (ours: early) and no clamp, and every recipe at ``C`` again with late
weighting and a clamp (issue 40 item 2)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``(recipe, capacity[, variant])`` and ``recipe`` parameters from the chosen backend's
    recipes."""
    from megamoe.backends import BackendError, load_backend

    try:
        info = load_backend(selected_name(metafunc.config.getoption(OPTION))).info
        recipes, weightings = info.recipes, info.weightings
    except BackendError:  # the moe_backend fixture fails every test with the reason
        recipes, weightings = ("bf16",), ("early",)
    if "weighting" in metafunc.fixturenames:
        metafunc.parametrize("weighting", weightings)
    if {"recipe", "capacity", "variant"} <= set(metafunc.fixturenames):
        cases = [(*c, "default") for c in layer_cases(recipes)] + [
            (r, C, v) for v in REPLAY_VARIANTS if v != "default" for r in recipes]
        metafunc.parametrize(("recipe", "capacity", "variant"), cases,
                             ids=[case_id(r, c) + ("" if v == "default" else f"-{v}")
                                  for r, c, v in cases])
    elif {"recipe", "capacity"} <= set(metafunc.fixturenames):
        cases = layer_cases(recipes)
        metafunc.parametrize(("recipe", "capacity"), cases,
                             ids=[case_id(*c) for c in cases])
    elif "recipe" in metafunc.fixturenames:
        metafunc.parametrize("recipe", recipes)


def _weights(seed: int, e: int = E, h: int = H, i: int = INTER):
    return layer_weights(seed, e, h, i)


W13, W2 = _weights(0)
_LAYERS: dict[tuple, tuple[MoEHandle, LayerSpec]] = {}


def _spec(recipe: str = "bf16", capacity: int = C, **kw: object) -> LayerSpec:
    return LayerSpec(MoEConfig(recipe, E, K, H, INTER, **kw), capacity)  # type: ignore[arg-type]


def _layer(backend: MoEBackend, dev, clamp=None, weighting=None, recipe="bf16",  # type: ignore[no-untyped-def]
           capacity=C) -> tuple[MoEHandle, LayerSpec]:
    """The backend's layer (cached); ``weighting`` a name of ``WEIGHTINGS`` (None: the
    backend's first)."""
    weighting = weighting or backend.info.weightings[0]
    key = (backend.info.name, str(dev), clamp, weighting, recipe, capacity)
    if key not in _LAYERS:
        spec = _spec(recipe, capacity, clamp=clamp, **WEIGHTINGS[weighting])
        _LAYERS[key] = (build_layer(backend, spec, W13, W2, dev), spec)
    return _LAYERS[key]


def _routes(seed: int, t: int, mask_p: float, dev, id_dtype=torch.int64,
            score_dtype=torch.float32, e: int = E, k: int = K, h: int = H):
    return layer_routes(seed, t, num_experts=e, top_k=k, hidden=h, mask_p=mask_p, device=dev,
                        id_dtype=id_dtype, score_dtype=score_dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16).cpu()


CASE_EXAMPLES = max(1, settings().max_examples // len(layer_cases(CONTRACT_RECIPES)))
"""Hypothesis examples per layer case: the profile's budget shared out evenly, so each case
is its own test (one xdist worker each; session 32: as one test drawing the case, it ran
402 s on one worker, the longest path of the ``single`` suite) and gets its share for sure."""


@pytest.mark.contract("s1.route-dtypes-and-layouts", "s5.clamp", "s5.ffn-recipes", "s5.weighting", "s6.inactive-rows-zero", "s8.row-tolerance")
@settings(max_examples=CASE_EXAMPLES)
@given(
    t=st.integers(0, C),
    mask_p=st.sampled_from((0.0, 0.3, 0.9, 1.0)),
    clamp=st.sampled_from((None, 0.25, 4.0)),
    weighting_pick=st.integers(0, len(WEIGHTINGS) - 1),
    id_dtype=st.sampled_from(ID_DTYPES),
    score_dtype=st.sampled_from(SCORE_DTYPES),
    seed=st.integers(0, 2**31),
)
@pytest.mark.mega_sm107("masked-routes")
def test_every_live_row_meets_the_oracle(moe_backend, cuda_device, recipe, capacity, t, mask_p,
                                         clamp, weighting_pick, id_dtype, score_dtype,
                                         seed) -> None:
    t = t % (capacity + 1)
    declared = moe_backend.info.weightings  # each place the backend applies the score
    weighting = declared[weighting_pick % len(declared)]
    layer, spec = _layer(moe_backend, cuda_device, clamp, weighting, recipe, capacity)
    x, ids, w = _routes(seed, t, mask_p, cuda_device, id_dtype, score_dtype)
    before = [v.clone() for v in (x, ids, w)]
    out = layer.warmup(x, ids, w)
    assert set(layer.stages_ran().values()) == KERNEL_PATHS, layer.stages_ran()
    report = compare_rows(out, oracle_output(spec, W13, W2, x, ids, w), ids, recipe)
    assert report.problems == (), report
    for a, b in zip(before, (x, ids, w), strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


CLAMP_BELOW_GATES = 0.25
"""A clamp at which most gates of ``_routes``' rows lie below ``-c``: clamping them there too
moves every live row far past the tolerance (relative L2 about 0.5 in bf16)."""


@pytest.mark.contract("s5.clamp")
def test_the_clamp_limits_the_gate_from_above_only(moe_backend, cuda_device, recipe) -> None:
    """docs/contract.md s5: ``gate = min(gate, c)``, ``up = clamp(up, -c, c)``; a gate below
    ``-c`` stays as it is. Every live row of ``C`` tokens with a clamp of 0.25 meets the
    oracle; the same rows judged against a reference that clamps the gate from below too
    fail, so these inputs tell the two readings apart, and a backend that fails is told
    whether its rows meet that reading instead. The backend's first weighting (the clamp
    comes before any weighting; the every-row test draws clamps with each)."""
    layer, spec = _layer(moe_backend, cuda_device, CLAMP_BELOW_GATES, None, recipe)
    x, ids, w = _routes(21, C, 0.0, cuda_device)
    out = layer.warmup(x, ids, w)
    want = oracle_output(spec, W13, W2, x, ids, w)
    planted = oracle_output_gate_clamped_both_ways(spec, W13, W2, x, ids, w)
    assert compare_rows(planted, want, ids, recipe).problems != (), (
        "a gate clamped from below too is within the tolerance on these rows: they cannot "
        "tell the readings apart")
    got = compare_rows(out, want, ids, recipe).problems
    assert got == (), "; ".join(got) + " | against a gate clamped from below too: " + (
        "; ".join(compare_rows(out, planted, ids, recipe).problems) or "every live row meets it")


@pytest.mark.contract("s2.masked-any-score", "s8.invariance")
@pytest.mark.mega_sm107("masked-routes")
def test_row_bits_do_not_depend_on_other_rows_masks_or_batch(moe_backend, cuda_device, recipe,
                                                             capacity) -> None:
    """docs/contract.md s8 invariance: row 0's bits stay the same whatever the other rows hold,
    how many there are, whether masked slots carry NaN/Inf or zero, and whatever an earlier
    forward left behind its masked slot: forwards with that slot active come between, twice
    with different terms, and the masked row must not add the term they left (FlashInfer's FP8
    pull, 2026-12-05: its combine sums every slot's cell, and a masked slot's cell keeps an
    earlier launch's term, also one a layer built before this one left)."""
    layer, _ = _layer(moe_backend, cuda_device, recipe=recipe, capacity=capacity)
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
    # row 0's masked slot active once, then once more with another term: a workspace that an
    # earlier layer of the same shape left holding the first term (FlashInfer pools them)
    # shows nothing at the first step, never at both
    for expert, score in ((0, 0.75), (1, -0.5)):
        ids_on, w_on = ids.clone(), w.clone()
        ids_on[0, 1], w_on[0, 1] = expert, score
        layer.forward(x, ids_on, w_on)
        assert torch.equal(_bits(layer.forward(x, ids, w)[0]), ref), (
            f"row 0 changed after a forward in which its masked slot was active (expert "
            f"{expert}, score {score}): the masked slot added what that forward left behind it")


@pytest.mark.contract("s8.invariance", "s8.untouched-tail", "s9.replay-equals-eager", "s10.single-rank-replay")
@pytest.mark.mega_sm107("graph-replay")
def test_changing_route_scenarios_replay_on_one_graph(moe_backend, cuda_device, recipe,
                                                      capacity, variant) -> None:
    """docs/contract.md s10 (single-rank): one captured forward over capacity-shaped buffers,
    17 replays per state, NaN poured into every workspace region (metadata included) and the
    output between states; every live row against the oracle, every replay bitwise equal to
    the first, which is bitwise equal to an eager forward, rows past the live count untouched,
    the caller's input tensors untouched by every replay, ``restored`` equal to the first
    state; early weighting, and late weighting with a clamp
    (``REPLAY_VARIANTS``)."""
    require_features(moe_backend, "cuda_graphs", "live_tokens", "out_buffer", "workspaces")
    weighting, clamp = REPLAY_VARIANTS[variant]
    layer, spec = _layer(moe_backend, cuda_device, clamp, weighting, recipe, capacity)
    c = capacity
    states = make_sequence(world_size=1, capacity=c, top_k=K, num_experts=E, hidden_size=H,
                           seed=5, device=cuda_device)
    batch = StaticBatch.empty(c, H, K, cuda_device)
    s_x, s_ids, s_w, s_live, out = batch.x, batch.ids, batch.w, batch.live, batch.out
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
        t = batch.load(r)
        poison_workspaces(layer, out)
        inputs_before = [v.clone() for v in (s_x, s_ids, s_w, s_live)]
        first = None
        for rep in range(REPLAYS_PER_STATE):  # every replay compared, not a sample
            graph.replay()
            torch.cuda.synchronize()
            if first is None:
                first = out.clone()
            else:
                assert torch.equal(_bits(out), _bits(first)), f"{state.name}: replay {rep}"
        layer.check_errors()  # no bad route in any state
        assert first is not None
        for a, b in zip(inputs_before, (s_x, s_ids, s_w, s_live), strict=True):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (
                f"{state.name}: a replay wrote a caller tensor")
        tail = first[t:].view(torch.int16)
        assert bool((tail == _bits(torch.tensor(float("nan"), dtype=torch.bfloat16)).to(
            tail.device)).all()), f"{state.name}: rows >= T were written"
        x_l, ids_l, w_l = r.live()
        eager = layer.forward(x_l, ids_l, w_l)
        assert torch.equal(_bits(eager), _bits(first[:t])), state.name
        want = oracle_output(spec, W13, W2, x_l, ids_l, w_l)
        report = compare_rows(first[:t], want, ids_l, recipe)
        assert report.problems == (), (state.name, report)
        first_bits[state.name] = _bits(first[:t])
    assert torch.equal(first_bits["restored"], first_bits[RESTORED_FROM])


@pytest.mark.contract("s5.weighting")
def test_the_backend_applies_the_score_early_and_late(moe_backend) -> None:
    """docs/contract.md s5: a layer weights early (before A2) or late (after FC2), as asked;
    a backend that declares only some places of the score fails here, and the row tests run
    for the places it declares."""
    refusal = weighting_refusal(moe_backend.info, "early", "late")
    assert refusal is None, refusal


LONG_REPLAYS = 65
"""Seed 003: a state's first and 65th captured replay must agree."""


def _sparse_or_dense(seed: int, c: int, dense: bool, dev):  # type: ignore[no-untyped-def]
    """``C`` live rows, every route active, or every third route masked (NaN behind it)."""
    x, ids, w = _routes(seed, c, 0.0, dev)
    if not dense:
        third = (torch.arange(ids.numel(), device=dev) % 3 == 2).view(ids.shape)
        ids = torch.where(third, -1, ids)
        w = torch.where(third, float("nan"), w)
    return x, ids, w


@pytest.mark.contract("s9.replay-equals-eager", "s10.single-rank-replay")
@pytest.mark.mega_sm107("graph-replay")
def test_sparse_to_dense_and_back_first_and_65th_replay(moe_backend, cuda_device, recipe,
                                                        weighting) -> None:
    """Seed 003's sparse-to-dense regression on one rank: one captured forward (all C rows
    live, its output the graph's own tensor), the contents changed in place from sparse
    (every third route masked) to dense (every route) and back; in each phase the 65th replay
    equals the first bit for bit, the first equals an eager forward, and every live row meets
    the oracle; for every weighting the backend declares."""
    require_features(moe_backend, "cuda_graphs")
    layer, spec = _layer(moe_backend, cuda_device, weighting=weighting, recipe=recipe)
    c = C
    s_x, s_ids, s_w = _sparse_or_dense(41, c, True, cuda_device)
    layer.warmup(s_x, s_ids, s_w)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        out = layer.forward(s_x, s_ids, s_w)
    for phase, dense in (("sparse", False), ("dense", True), ("sparse again", False)):
        x, ids, w = _sparse_or_dense(41, c, dense, cuda_device)
        s_x.copy_(x)
        s_ids.copy_(ids)
        s_w.copy_(w)
        replays = []
        for rep in range(LONG_REPLAYS):
            graph.replay()
            if rep in (0, LONG_REPLAYS - 1):
                torch.cuda.synchronize()
                replays.append(_bits(out))
        layer.check_errors()
        assert torch.equal(replays[0], replays[1]), f"{phase}: replay {LONG_REPLAYS} != 1"
        eager = layer.forward(x, ids, w)
        assert torch.equal(_bits(eager), replays[0]), f"{phase}: replay != eager"
        report = compare_rows(eager, oracle_output(spec, W13, W2, x, ids, w), ids, recipe)
        assert report.problems == (), (phase, report)


def _capture_clean(layer: MoEHandle, x, ids, w, out):  # type: ignore[no-untyped-def]
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
def test_bad_routes_under_a_graph_give_nan_rows_and_check_errors_raises(moe_backend, cuda_device,
                                                                        recipe) -> None:
    require_features(moe_backend, "cuda_graphs", "out_buffer", "route_errors")
    layer, _ = _layer(moe_backend, cuda_device, recipe=recipe)
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
def test_eager_route_error_and_bad_metadata_write_nothing(moe_backend, cuda_device) -> None:
    require_features(moe_backend, "out_buffer", "route_errors")
    layer, _ = _layer(moe_backend, cuda_device)
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
        moe_backend, cuda_device) -> None:
    """docs/contract.md s4: safe-FP8 input rows must be finite, checked like routes."""
    require_features(moe_backend, "cuda_graphs", "out_buffer", "route_errors")
    layer, _ = _layer(moe_backend, cuda_device, recipe="fp8_mxfp4")
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


@pytest.mark.contract("s4.safe-fp8-inactive-row", "s6.inactive-rows-zero")
def test_fp8_mxfp4_hidden_row_that_routes_nowhere_may_be_non_finite_eager_and_under_graphs(
        moe_backend, cuda_device) -> None:
    """docs/contract.md s4: a row with no active slot is never consumed: NaN/Inf in it raise
    nothing, eagerly, in a replay and at ``check_errors``; its output row is ``+0.0`` bytes and
    every other row the same bits as with that row finite."""
    require_features(moe_backend, "cuda_graphs", "out_buffer")
    layer = build_layer(moe_backend, _spec("fp8_mxfp4", C), W13, W2, cuda_device)
    x, ids, w = _routes(24, 12, 0.0, cuda_device)
    ids[4] = -1
    w[4] = float("nan")
    want = _bits(layer.warmup(x, ids, w))
    assert bool((want[4] == 0).all())
    for junk in (float("nan"), float("inf"), float("-inf")):
        bad = x.clone()
        bad[4, 17] = junk
        assert torch.equal(_bits(layer.forward(bad, ids, w)), want), junk
    layer.check_errors()
    out = torch.full((12, H), 3.0, dtype=torch.bfloat16, device=cuda_device)
    graph, clean = _capture_clean(layer, x, ids, w, out)
    assert torch.equal(_bits(clean), want)
    for junk in (float("nan"), float("inf"), float("-inf")):
        x[4, 17] = junk
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(_bits(out), want), junk
    layer.check_errors()
    layer.destroy()


@pytest.mark.parametrize(("elem", "mode"), [("e5m2", "floor"), ("e4m3", "floor")])
def test_mxfp8_other_element_and_scale_modes_meet_the_oracle(moe_backend, cuda_device, elem,
                                                             mode) -> None:
    """The hypothesis test runs ``mxfp8`` with E4M3 / ``rceil``; here the others."""
    spec = _spec("mxfp8", mxfp8_elem=elem, mxfp8_mode=mode, clamp=4.0)
    layer = build_layer(moe_backend, spec, W13, W2, cuda_device)
    x, ids, w = _routes(31, 150, 0.3, cuda_device)
    out = layer.warmup(x, ids, w)
    assert set(layer.stages_ran().values()) == KERNEL_PATHS
    report = compare_rows(out, oracle_output(spec, W13, W2, x, ids, w), ids, "mxfp8")
    assert report.problems == (), report
    layer.destroy()

